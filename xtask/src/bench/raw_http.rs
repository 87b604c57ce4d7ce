//! The few HTTP/1.1 exchanges the revocation benches make, over plain `TcpStream`s to
//! loopback: a request written by hand and its answer read to its end, so that a probe keeps one
//! connection (and so one Envoy worker) and a time is taken the moment an answer is in, with no
//! client library or subprocess between. Answers are read by the harness's `e2e::http1`, as
//! Envoy's admin answers are.

use anyhow::{bail, Context, Result};
use std::io::{BufReader, Write};
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
        let (status, body) = e2e::http1::read_answer(&mut self.reader)?;
        Ok(Answer { status, body })
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
/// The value of `name` in the issuer's `/metrics` on `port` (`None`: it has none).
pub(super) fn metric(port: u16, name: &str) -> Result<Option<u64>> {
    let m = once(port, "GET", "/metrics", &[], "")?;
    let text = String::from_utf8_lossy(&m.body);
    Ok(text
        .lines()
        .find_map(|l| {
            let mut words = l.split_whitespace();
            (words.next()? == name).then_some(())?;
            words.next()?.parse::<f64>().ok()
        })
        .map(|v| v as u64))
}

pub(super) fn port_of(url: &str) -> Result<u16> {
    url.rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .with_context(|| format!("no port in {url}"))
}

/// HTTP Basic for `id:secret`.
pub(super) fn basic(id_secret: &str) -> String {
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
