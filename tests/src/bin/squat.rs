//! A local user trying to take the issuer's place, run as another user (uid 65534) by
//! `e2e::squatter`:
//!
//! - `squat unix PATH`: connects to the socket at PATH, binds a socket there, creates a file
//!   there, and renames its folder away; one line per attempt (`bind: ok`, or
//!   `bind: refused: ERROR`). Exits 0 if any attempt got in, 3 if every one was refused.
//! - `squat tcp PORT SECONDS`: listens on 127.0.0.1:PORT, as the issuer does, for SECONDS:
//!   prints `listening` (or `bind: refused: ERROR` and exits 3), then for each request it
//!   receives its request line (`request: GET …`) and its `Authorization` header
//!   (`authorization: VALUE`), and answers 503.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args[..] {
        ["unix", path] => squat_socket(Path::new(path)),
        ["tcp", port, seconds] => match (port.parse(), seconds.parse()) {
            (Ok(port), Ok(seconds)) => squat_port(port, Duration::from_secs(seconds)),
            _ => usage(),
        },
        _ => usage(),
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: squat unix PATH | squat tcp PORT SECONDS");
    ExitCode::from(2)
}

/// Prints how the attempt `what` went; true if it got in.
fn attempt<T>(what: &str, result: std::io::Result<T>) -> bool {
    match result {
        Ok(_) => {
            println!("{what}: ok");
            true
        }
        Err(e) => {
            println!("{what}: refused: {e}");
            false
        }
    }
}

fn squat_socket(path: &Path) -> ExitCode {
    let folder = path.parent().unwrap_or(Path::new("/"));
    let took = [
        attempt("connect", UnixStream::connect(path)),
        attempt("bind", UnixListener::bind(path)),
        attempt(
            "create",
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path),
        ),
        attempt(
            "rename folder",
            std::fs::rename(folder, folder.with_extension("squatted")),
        ),
    ];
    if took.contains(&true) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(3)
    }
}

fn squat_port(port: u16, time: Duration) -> ExitCode {
    let listener = match TcpListener::bind(("127.0.0.1", port)) {
        Ok(l) => l,
        Err(e) => {
            println!("bind: refused: {e}");
            return ExitCode::from(3);
        }
    };
    println!("listening");
    if listener.set_nonblocking(true).is_err() {
        return ExitCode::FAILURE;
    }
    let deadline = Instant::now() + time;
    while Instant::now() < deadline {
        match listener.accept() {
            Ok((stream, _)) => receive(stream),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    ExitCode::SUCCESS
}

/// Reads one request head off `stream`, prints its request line and `Authorization`, answers 503.
fn receive(stream: TcpStream) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    let mut reader = BufReader::new(&stream);
    let mut line = String::new();
    if reader.read_line(&mut line).is_ok() {
        println!("request: {}", line.trim_end());
    }
    loop {
        line.clear();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim_end().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("authorization") {
                println!("authorization: {}", value.trim());
            }
        }
    }
    let answer =
        "HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
    let _ = (&stream).write_all(answer.as_bytes());
}
