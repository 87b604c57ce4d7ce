//! Connections straight to the issuer, with no Envoy in front (`--listen 0.0.0.0:8080`, or
//! `--tls-cert`): a connection with no request in flight is closed once it has been idle past the
//! bound, in every state a client can leave it in (silent, protocol detection, the HTTP/2 preface
//! and SETTINGS, the TLS handshake, keep-alive between requests); request heads over 64 KiB are
//! refused; and with its file descriptors used up the issuer logs accept failures rarely and
//! recovers once idle connections are closed. The bounds are in `docs/hostile-input.md` ("Slow
//! clients") and threat 16 of `docs/threat-model.md`.

use e2e::issuer::start_issuer_with;
use e2e::raw::{exchange, http_get, tls_connect_to};
use e2e::{ensure_tls, free_port, start_issuer, Proc, StoreArgs, Tools};
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long the issuer keeps a connection with no request in flight.
const IDLE: Duration = Duration::from_secs(10);
/// What a close may take beyond [`IDLE`]: the issuer's grace after a graceful close (5 s) and
/// scheduling on a busy machine.
const SLACK: Duration = Duration::from_secs(8);
/// How long a test waits for a close before calling the connection open.
const PATIENCE: Duration = Duration::from_secs(30);

/// The HTTP/2 connection preface (RFC 9113, section 3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// A SETTINGS frame with no settings.
const EMPTY_SETTINGS: &[u8] = &[0, 0, 0, 4, 0, 0, 0, 0, 0];
/// HTTP/2 frame types read or written here.
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;

/// An issuer of its own in `dir/name` (a fresh data dir) on a free port; returns it and the port.
fn lone_issuer(tools: &Tools, dir: &Path, name: &str, extra: &[&str]) -> (Proc, u16) {
    let port = free_port();
    let (proc, _) = start_issuer(
        tools,
        &dir.join(name),
        port,
        extra,
        &dir.join(format!("{name}.log")),
    )
    .unwrap();
    (proc, port)
}

/// Reads until the peer closes the connection (EOF or reset) or [`PATIENCE`] has passed since
/// `since`; returns what arrived and when it closed, measured from `since` (`None`: still open).
async fn until_closed(
    mut conn: impl AsyncRead + Unpin,
    since: Instant,
) -> (Vec<u8>, Option<Duration>) {
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    let deadline = tokio::time::Instant::from_std(since + PATIENCE);
    loop {
        match tokio::time::timeout_at(deadline, conn.read(&mut chunk)).await {
            Err(_) => return (got, None),
            Ok(Ok(0) | Err(_)) => return (got, Some(since.elapsed())),
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
        }
    }
}

/// What is wrong with how a connection ended, if anything: it must close within the bound.
fn late(what: &str, closed: Option<Duration>) -> Option<String> {
    match closed {
        None => Some(format!("{what}: still open after {PATIENCE:?}")),
        Some(t) if t > IDLE + SLACK => Some(format!("{what}: closed only after {t:?}")),
        Some(_) => None,
    }
}

/// Reads one HTTP/1.1 response with a `Content-Length` off a kept-alive connection; returns its
/// status (0 if the connection closed or 5 s passed first).
async fn read_response(conn: &mut (impl AsyncRead + Unpin)) -> u16 {
    let read = async {
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        while !got.ends_with(b"\r\n\r\n") {
            if conn.read(&mut byte).await.ok()? == 0 {
                return None;
            }
            got.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&got).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))?
            .trim()
            .parse()
            .ok()?;
        let mut body = vec![0u8; length];
        conn.read_exact(&mut body).await.ok()?;
        head.split_whitespace().nth(1)?.parse().ok()
    };
    tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()
        .flatten()
        .unwrap_or(0)
}

/// One complete request, a second one half the bound later on the same connection, then
/// nothing: the connection must stay usable in between and close within the bound after the
/// second answer, not before it.
async fn keep_alive(port: u16) -> Vec<String> {
    const GET: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n";
    let mut conn = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    conn.write_all(GET).await.unwrap();
    let first = read_response(&mut conn).await;
    // Half the idle bound passes with nothing sent: the window under test.
    tokio::time::sleep(IDLE / 2).await;
    let second = match conn.write_all(GET).await {
        Ok(()) => read_response(&mut conn).await,
        Err(_) => 0,
    };
    let (_, closed) = until_closed(conn, Instant::now()).await;
    eprintln!("keep-alive: closed {closed:?} after the second answer");
    let mut wrong = Vec::new();
    if (first, second) != (200, 200) {
        wrong.push(format!(
            "keep-alive: answers {first} and {second} {:?} apart, not 200 twice",
            IDLE / 2
        ));
    }
    if closed.is_some_and(|t| t < IDLE - Duration::from_secs(1)) {
        wrong.push(format!(
            "keep-alive: closed {closed:?} after an answer, before the bound"
        ));
    }
    wrong.extend(late("HTTP/1.1 keep-alive after two requests", closed));
    wrong
}

/// The frames in `bytes` (whole ones), as (type, flags, stream, payload).
fn frames(mut bytes: &[u8]) -> Vec<(u8, u8, u32, Vec<u8>)> {
    let mut out = Vec::new();
    while bytes.len() >= 9 {
        let len = usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]);
        if bytes.len() < 9 + len {
            break;
        }
        let stream = u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff;
        out.push((bytes[3], bytes[4], stream, bytes[9..9 + len].to_vec()));
        bytes = &bytes[9 + len..];
    }
    out
}

#[tokio::test]
#[ignore = "needs MMS_ENVOY and MMS_FILTER_WASM: `cargo xtask test` runs it"]
async fn idle_and_unfinished_connections_are_closed() {
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let cert = ensure_tls(tmp.path()).unwrap();
    let (cert_file, key_file) = (
        tmp.path().join("tls/cert.pem"),
        tmp.path().join("tls/key.pem"),
    );
    let (_plain, port) = lone_issuer(&tools, tmp.path(), "plain", &[]);
    let tls_args = [
        "--tls-cert",
        cert_file.to_str().unwrap(),
        "--tls-key",
        key_file.to_str().unwrap(),
    ];
    let (_tls, tls_port) = lone_issuer(&tools, tmp.path(), "tls", &tls_args);

    let start = Instant::now();
    let connect = || TcpStream::connect(("127.0.0.1", port));
    let silent = connect().await.unwrap();
    let mut pri = connect().await.unwrap();
    pri.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let mut h2c = connect().await.unwrap();
    h2c.write_all(&[H2_PREFACE, EMPTY_SETTINGS].concat())
        .await
        .unwrap();
    let tls_silent = TcpStream::connect(("127.0.0.1", tls_port)).await.unwrap();
    let tls_quiet = tls_connect_to(tls_port, &cert).await.unwrap();

    // Meanwhile the issuers answer others, over plain HTTP and over TLS.
    let healthz = async {
        // Half the idle bound into the silent connections' wait: the window under test.
        tokio::time::sleep(IDLE / 2).await;
        let plain = http_get(port, "/healthz", &[]).await.unwrap().status;
        let get = "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
        let tls = exchange(tls_connect_to(tls_port, &cert).await.unwrap(), get)
            .await
            .unwrap()
            .status;
        (plain, tls)
    };
    let (
        (_, silent),
        (_, pri),
        (h2c_got, h2c),
        (_, tls_silent),
        (_, tls_quiet),
        mut wrong,
        healthz,
    ) = tokio::join!(
        until_closed(silent, start),
        until_closed(pri, start),
        until_closed(h2c, start),
        until_closed(tls_silent, start),
        until_closed(tls_quiet, start),
        keep_alive(port),
        healthz,
    );
    eprintln!(
        "closed after: silent {silent:?}, PRI line {pri:?}, h2c {h2c:?}, TLS without hello \
         {tls_silent:?}, TLS quiet {tls_quiet:?}"
    );
    wrong.extend(late("silent TCP connection", silent));
    wrong.extend(late("`PRI * HTTP/2.0` alone", pri));
    wrong.extend(late("h2c preface and an empty SETTINGS frame", h2c));
    wrong.extend(late("TLS connection without a ClientHello", tls_silent));
    wrong.extend(late("TLS connection silent after the handshake", tls_quiet));
    if h2c.is_some() && !frames(&h2c_got).iter().any(|f| f.0 == GOAWAY) {
        wrong.push("h2c: closed without a GOAWAY frame".into());
    }
    if healthz != (200, 200) {
        wrong.push(format!(
            "/healthz meanwhile (plain, TLS): {healthz:?}, not 200"
        ));
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
}

/// Appends `n` to an HPACK block as an integer with an `prefix`-bit prefix (RFC 7541, 5.1).
fn hpack_int(block: &mut Vec<u8>, mut n: usize, prefix: u32) {
    let max = (1usize << prefix) - 1;
    if n < max {
        block.push(n as u8);
        return;
    }
    block.push(max as u8);
    n -= max;
    while n >= 128 {
        block.push((n % 128 + 128) as u8);
        n /= 128;
    }
    block.push(n as u8);
}

/// An HPACK block of these fields, each a literal without indexing, no Huffman coding.
fn hpack(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in fields {
        block.push(0);
        for s in [name, value] {
            hpack_int(&mut block, s.len(), 7);
            block.extend_from_slice(s.as_bytes());
        }
    }
    block
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len().to_be_bytes();
    let mut f = vec![len[5], len[6], len[7], kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// `GET /healthz` over HTTP/2 with prior knowledge, with `extra` header fields, on a connection
/// of its own: what answered stream 1 ("200", "431", "status other than 200", "RST_STREAM",
/// "GOAWAY", or "closed" / "nothing" if none of these came within 10 s).
async fn h2_get(port: u16, extra: &[(&str, &str)]) -> &'static str {
    let mut fields = vec![
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/healthz"),
        (":authority", "localhost"),
    ];
    fields.extend_from_slice(extra);
    let block = hpack(&fields);
    let mut out = [H2_PREFACE, EMPTY_SETTINGS].concat();
    let chunks: Vec<&[u8]> = block.chunks(16_384).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let (kind, mut flags) = if i == 0 {
            (HEADERS, 0x1) // END_STREAM
        } else {
            (CONTINUATION, 0)
        };
        if i + 1 == chunks.len() {
            flags |= 0x4; // END_HEADERS
        }
        out.extend(frame(kind, flags, 1, chunk));
    }
    let mut conn = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    // The issuer may refuse before it has read everything; what it answers is what counts.
    let _ = conn.write_all(&out).await;
    let answer = async {
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            for (kind, _, stream, payload) in frames(&got) {
                match (kind, stream) {
                    // `:status: 200` is entry 8 of HPACK's static table, sent first.
                    (HEADERS, 1) if payload.first() == Some(&0x88) => return "200",
                    // "431" as a Huffman-coded string of 3 bytes (RFC 7541, appendix B).
                    (HEADERS, 1) if payload.windows(4).any(|w| w == [0x83, 0x69, 0x90, 0xff]) => {
                        return "431"
                    }
                    (HEADERS, 1) => return "status other than 200",
                    (RST_STREAM, 1) => return "RST_STREAM",
                    (GOAWAY, _) => return "GOAWAY",
                    _ => {}
                }
            }
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return "closed",
                Ok(n) => got.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), answer)
        .await
        .unwrap_or("nothing")
}

#[tokio::test]
#[ignore = "needs MMS_ENVOY and MMS_FILTER_WASM: `cargo xtask test` runs it"]
async fn oversized_request_heads_are_refused() {
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let (_issuer, port) = lone_issuer(&tools, tmp.path(), "issuer", &[]);
    // Headers of 4 KB each, well below hyper's limit of 100 headers: the size is what counts.
    let value = "a".repeat(4000);
    let names: Vec<String> = (0..25).map(|i| format!("x-filler-{i}")).collect();
    let lines: Vec<String> = names.iter().map(|n| format!("{n}: {value}")).collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let fields: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), value.as_str())).collect();

    // HTTP/1.1: a 60 KB head passes (Envoy forwards up to 60 KiB), a 100 KB one is refused.
    let fits = http_get(port, "/healthz", &lines[..15]).await.unwrap();
    assert_eq!(fits.status, 200, "a 60 KB head: {}", fits.text);
    let over = http_get(port, "/healthz", &lines).await.unwrap();
    assert!(
        over.status == 431 || over.status == 0,
        "a 100 KB head over HTTP/1.1: {} {}",
        over.status,
        over.text
    );
    // HTTP/2 (h2c with prior knowledge): the same.
    assert_eq!(
        h2_get(port, &fields[..15]).await,
        "200",
        "a 60 KB header list"
    );
    let h2 = h2_get(port, &fields).await;
    eprintln!(
        "a 100 KB head: HTTP/1.1 status {}, HTTP/2 {h2}",
        over.status
    );
    assert_eq!(h2, "431", "a 100 KB header list over HTTP/2");
    // The issuer is unharmed.
    assert_eq!(http_get(port, "/healthz", &[]).await.unwrap().status, 200);
}

#[tokio::test]
#[ignore = "needs MMS_ENVOY and MMS_FILTER_WASM: `cargo xtask test` runs it"]
async fn with_its_descriptors_used_up_the_issuer_recovers_and_logs_little() {
    /// The issuer's open-file limit here.
    const NOFILE: usize = 64;
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let log = tmp.path().join("issuer.log");
    let mut prlimit = std::process::Command::new("prlimit");
    prlimit
        .arg(format!("--nofile={NOFILE}:{NOFILE}"))
        .arg("--")
        .arg(&tools.issuer);
    let port = free_port();
    let store = StoreArgs::redb(&tmp.path().join("data"));
    let (mut issuer, _) = start_issuer_with(prlimit, &store, port, &[], &log).unwrap();
    let open = std::fs::read_dir(format!("/proc/{}/fd", issuer.pid()))
        .unwrap()
        .count();
    // More silent connections than the issuer has descriptors left; the rest wait in the backlog.
    let mut silent = Vec::new();
    for _ in 0..NOFILE - open + 16 {
        silent.push(TcpStream::connect(("127.0.0.1", port)).await.unwrap());
    }
    let start = Instant::now();
    let mut conn = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let (healthz, closed) = until_closed(conn, start).await;
    let took = start.elapsed();
    drop(silent);
    let text = std::fs::read_to_string(&log).unwrap();
    let warnings = text.lines().filter(|l| l.contains("accept failed")).count();
    eprintln!("/healthz answered after {closed:?}; {warnings} `accept failed` lines:");
    for line in text.lines().filter(|l| l.contains("accept")) {
        eprintln!("  {line}");
    }
    let mut wrong = Vec::new();
    let healthz = String::from_utf8_lossy(&healthz);
    if !healthz.starts_with("HTTP/1.1 200 ") {
        wrong.push(format!("/healthz: {healthz:?}, closed: {closed:?}"));
    }
    // At most one warning per 5 s, the first one at once.
    let allowed = took.as_secs() as usize / 5 + 1;
    if warnings > allowed {
        wrong.push(format!(
            "{warnings} `accept failed` lines in the log in {took:?} (at most {allowed})"
        ));
    }
    if !text.contains("Too many open files") {
        wrong.push("the log never names the accept error".into());
    }
    assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    assert!(issuer.stop(), "the issuer did not stop cleanly");
}
