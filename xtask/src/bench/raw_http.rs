//! The few HTTP/1.1 exchanges the revocation benches make, over plain `TcpStream`s to
//! loopback: a request written by hand and its answer read to its end, so that a probe keeps one
//! connection (and so one Envoy worker) and a time is taken the moment an answer is in, with no
//! client library or subprocess between.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// One connection, kept alive across requests.
pub(super) struct Conn {
    reader: BufReader<TcpStream>,
}

/// An answer: its status and body.
pub(super) struct Answer {
    pub(super) status: u16,
    pub(super) body: Vec<u8>,
}

impl Conn {
    pub(super) fn open(port: u16) -> Result<Self> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(std::time::Duration::from_secs(60)))?;
        Ok(Self {
            reader: BufReader::new(stream),
        })
    }

    /// Sends `method path` with `headers` and `body` (a form, if any) and reads the answer.
    pub(super) fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Result<Answer> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n");
        for (name, value) in headers {
            req.push_str(&format!("{name}: {value}\r\n"));
        }
        if !body.is_empty() {
            req.push_str("content-type: application/x-www-form-urlencoded\r\n");
        }
        req.push_str(&format!("content-length: {}\r\n\r\n{body}", body.len()));
        self.reader.get_mut().write_all(req.as_bytes())?;
        self.read_answer()
    }

    fn read_answer(&mut self) -> Result<Answer> {
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let mut head = Head::new(&line)?;
        loop {
            line.clear();
            if self.reader.read_line(&mut line)? == 0 {
                bail!("the connection closed inside the headers");
            }
            if !head.header(&line) {
                break;
            }
        }
        let status = head.status;
        let body = match (head.length, head.chunked) {
            (_, true) => self.read_chunks()?,
            (Some(n), false) => {
                let mut body = vec![0; n];
                self.reader.read_exact(&mut body)?;
                body
            }
            (None, false) => {
                let mut body = Vec::new();
                self.reader.read_to_end(&mut body)?;
                body
            }
        };
        Ok(Answer { status, body })
    }

    /// A chunked body (RFC 9112 section 7.1), without trailers.
    fn read_chunks(&mut self) -> Result<Vec<u8>> {
        let mut body = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .with_context(|| format!("a chunk size: {line:?}"))?;
            let start = body.len();
            body.resize(start + size, 0);
            self.reader.read_exact(&mut body[start..])?;
            line.clear();
            self.reader.read_line(&mut line)?;
            if size == 0 {
                return Ok(body);
            }
        }
    }
}

/// What an answer's head says, read a line at a time (by the blocking client here and the
/// asynchronous one of `fleet.rs`).
pub(super) struct Head {
    pub(super) status: u16,
    /// `Content-Length`, if given.
    pub(super) length: Option<usize>,
    /// `Transfer-Encoding: chunked`.
    pub(super) chunked: bool,
}

impl Head {
    /// From the status line.
    pub(super) fn new(status_line: &str) -> Result<Self> {
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("no HTTP status line: {status_line:?}"))?;
        Ok(Self {
            status,
            length: None,
            chunked: false,
        })
    }

    /// Takes one header line; false for the blank line that ends the head.
    pub(super) fn header(&mut self, line: &str) -> bool {
        let header = line.trim_end();
        if header.is_empty() {
            return false;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                self.length = value.trim().parse::<usize>().ok();
            }
            if name.eq_ignore_ascii_case("transfer-encoding") {
                self.chunked = value.trim().eq_ignore_ascii_case("chunked");
            }
        }
        true
    }
}

/// One exchange on a connection of its own.
pub(super) fn once(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Result<Answer> {
    Conn::open(port)?.send(method, path, headers, body)
}

/// The port of a `http://127.0.0.1:PORT` URL.
pub(super) fn port_of(url: &str) -> Result<u16> {
    url.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .with_context(|| format!("no port in {url}"))
}

/// HTTP Basic for `id:secret`.
fn basic(id_secret: &str) -> String {
    use base64::Engine as _;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(id_secret)
    )
}

/// A client_credentials token of the client `id_secret` (`id:secret`) from the issuer on `port`.
pub(super) fn client_token(port: u16, id_secret: &str) -> Result<String> {
    let auth = basic(id_secret);
    let form = "grant_type=client_credentials";
    let a = once(
        port,
        "POST",
        "/apiv2/oauth/token",
        &[("authorization", &auth)],
        form,
    )?;
    let v: serde_json::Value = serde_json::from_slice(&a.body)?;
    Ok(v["access_token"].as_str().context("no token")?.to_owned())
}

/// Revokes `token` as the client `id_secret` at the issuer on `port`; the moment its answer is in.
pub(super) fn revoke(port: u16, id_secret: &str, token: &str) -> Result<std::time::Instant> {
    let auth = basic(id_secret);
    let form = format!("token={token}");
    let a = once(
        port,
        "POST",
        "/apiv2/oauth/revoke",
        &[("authorization", &auth)],
        &form,
    )?;
    let at = std::time::Instant::now();
    if a.status != 200 {
        bail!("the revoke endpoint answered {}", a.status);
    }
    Ok(at)
}
