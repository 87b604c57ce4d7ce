//! `issuer serve --listen unix:PATH`: the real binary on a Unix socket. Tokens and the edge feed
//! are served there (the socket's peer is on this host, as a loopback peer is: the feed is
//! answered, and `--trusted-proxy`'s default 127.0.0.1 believes its `X-Forwarded-For`). The
//! socket is 0660, made only in a folder its user owns and no one else may write; a socket a
//! killed run left is replaced, anything else at the path is refused and left as it is, and the
//! socket leaves with the issuer. Another user's attempts on the path are in the end-to-end test
//! `a_local_user_cannot_take_the_socket_of_a_restarting_issuer`.

use super::{add_client, fixture, spawn};
use base64::Engine as _;
use serde_json::Value;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The folder `run` beside the data dir, with this mode, and the socket's path in it.
fn socket_in(dir: &Path, mode: u32) -> PathBuf {
    let run = dir.with_file_name("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::set_permissions(&run, PermissionsExt::from_mode(mode)).unwrap();
    run.join("http.sock")
}

/// `METHOD path` on the socket, as `id:secret`, with these header lines and this form body:
/// the status and the JSON answer.
fn request(
    socket: &Path,
    (method, path): (&str, &str),
    (id, secret): (&str, &str),
    headers: &str,
    body: &str,
) -> (u16, Value) {
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{id}:{secret}"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic {basic}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n{headers}\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, body) = e2e::http1::exchange_unix(socket, &request).unwrap();
    (status, serde_json::from_slice(&body).unwrap())
}

#[test]
fn the_issuer_serves_tokens_and_the_edge_feed_on_its_socket() {
    let f = fixture();
    let edge = add_client(&f.dir, "edge", &["--edge"]);
    let socket = socket_in(&f.dir, 0o750);
    let listen = format!("unix:{}", socket.display());
    let args = ["--trust-x-forwarded-for".to_owned()];
    let (mut proc, url) = spawn(&f.dir, &args, &listen);
    assert_eq!(url, listen);
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o7777, 0o660);

    let token = ("POST", "/apiv2/oauth/token");
    let form = "grant_type=password&username=alice&password=alice-pw";
    let relayed = "X-Forwarded-For: 192.0.2.7\r\n";
    let (status, answer) = request(&socket, token, ("app", &f.secret), relayed, form);
    assert_eq!(status, 200, "{answer}");
    assert!(answer["access_token"]
        .as_str()
        .unwrap()
        .starts_with("mmat1."));
    let feed = ("GET", "/apiv2/oauth/edge");
    let (status, answer) = request(&socket, feed, ("edge", &edge), "", "");
    assert_eq!(status, 200, "{answer}");
    assert!(answer["keys"][0]["kid"].is_number(), "{answer}");
    // A relayed feed request is refused on the socket as on loopback.
    let (status, _) = request(&socket, feed, ("edge", &edge), relayed, "");
    assert_eq!(status, 403);

    assert!(proc.stop(), "the issuer did not stop cleanly");
    assert!(!socket.exists(), "the socket stays after the stop");
    let log = std::fs::read_to_string(f.dir.with_extension("log")).unwrap();
    // The back-off and the log saw the caller behind the proxy on the socket, not the proxy.
    let sign_in = log.lines().find(|l| l.contains("local sign-in")).unwrap();
    assert!(sign_in.contains("192.0.2.7"), "{sign_in}");
    assert!(log.contains("unix:uid="), "{log}");
}

#[test]
fn the_socket_is_made_only_in_a_private_folder_and_never_over_another_file() {
    let f = fixture();
    let socket = socket_in(&f.dir, 0o770);
    let listen = format!("unix:{}", socket.display());
    let log = f.dir.with_extension("log");
    let start = || {
        let mut command = std::process::Command::new(super::BIN);
        command.args(["serve", "--data-dir"]).arg(&f.dir);
        command.args(["--listen", &listen]);
        e2e::issuer::launch(command, &log).map(|(proc, _)| proc)
    };
    assert!(start().is_err(), "served in a group-writable folder");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(
        said.contains("writable by group or others (mode 770)"),
        "{said}"
    );
    assert!(said.contains("chmod 750"), "{said}");

    std::fs::set_permissions(socket.parent().unwrap(), PermissionsExt::from_mode(0o750)).unwrap();
    // A run killed with SIGKILL leaves its socket: the next one replaces it.
    start().unwrap().kill();
    assert!(socket.exists());
    let mut again = start().expect("a stale socket is replaced");
    assert!(again.stop());
    // Anything else at the path is left as it is.
    std::fs::write(&socket, "the operator's").unwrap();
    assert!(start().is_err(), "a file was replaced by the socket");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains("is not a socket of uid"), "{said}");
    assert_eq!(std::fs::read_to_string(&socket).unwrap(), "the operator's");
}
