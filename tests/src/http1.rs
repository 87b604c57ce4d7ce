//! Reading an HTTP/1.1 answer off a connection a harness wrote its request to by hand (Envoy's
//! admin socket, the issuer's Unix socket, the benches' probes): the status line and headers a
//! line at a time ([`Head`], which an asynchronous reader can drive too), then a body by
//! `Content-Length`, in chunks, or to the end of the connection.

use anyhow::{bail, Context, Result};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::Duration;

/// Sends `request` (a whole HTTP/1.1 request, `Connection: close` included) on a new connection
/// to the Unix socket `sock` and reads the answer (at most 10 s of waiting per read): its status
/// and body.
pub fn exchange_unix(sock: &Path, request: &str) -> Result<(u16, Vec<u8>)> {
    let mut s = std::os::unix::net::UnixStream::connect(sock)
        .with_context(|| format!("connecting to {}", sock.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(request.as_bytes())?;
    read_answer(&mut BufReader::new(s))
}

/// What an answer's head says, read a line at a time.
pub struct Head {
    /// The status code.
    pub status: u16,
    /// `Content-Length`, if given.
    pub length: Option<usize>,
    /// `Transfer-Encoding: chunked`.
    pub chunked: bool,
}

impl Head {
    /// From the status line.
    pub fn new(status_line: &str) -> Result<Self> {
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
    pub fn header(&mut self, line: &str) -> bool {
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

/// Reads one answer from `r`: its status and body.
pub fn read_answer(r: &mut impl BufRead) -> Result<(u16, Vec<u8>)> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut head = Head::new(&line)?;
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            bail!("the connection closed inside the headers");
        }
        if !head.header(&line) {
            break;
        }
    }
    let body = match (head.length, head.chunked) {
        (_, true) => read_chunks(r)?,
        (Some(n), false) => {
            let mut body = vec![0; n];
            r.read_exact(&mut body)?;
            body
        }
        (None, false) => {
            let mut body = Vec::new();
            r.read_to_end(&mut body)?;
            body
        }
    };
    Ok((head.status, body))
}

/// A chunked body (RFC 9112 section 7.1), without trailers.
fn read_chunks(r: &mut impl BufRead) -> Result<Vec<u8>> {
    let mut body = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        r.read_line(&mut line)?;
        let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
            .with_context(|| format!("a chunk size: {line:?}"))?;
        let start = body.len();
        body.resize(start + size, 0);
        r.read_exact(&mut body[start..])?;
        line.clear();
        r.read_line(&mut line)?;
        if size == 0 {
            return Ok(body);
        }
    }
}
