//! The issuer behind Envoy on its Unix socket, as shipped (both issuer clusters of
//! `envoy/full-stack.yaml` and `envoy/native.yaml` are `pipe: { path: /run/issuer/http.sock }`,
//! where the Debian package listens): tokens and the edge feed go through the socket, and another
//! local account (uid 65534) cannot take the issuer's place while it restarts. Over TCP it can,
//! and it then receives the edge client's credential with Envoy's next poll: why the socket is
//! the shipped default (`docs/threat-model.md`, threats 27 and 29). Both take root, to act as
//! uid 65534: elsewhere they fail, saying so.

use crate::edge::{access, call, edge_stack, password, revoke, wait_for_sync};
use base64::Engine as _;
use e2e::squatter::{next_line, Squatter};
use e2e::{demo, needed_for_test, Options, Stack, Tools};
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The squatter, or the test fails saying why it cannot act as another user here (not root).
fn squatter() -> Squatter {
    needed_for_test(Squatter::new(Path::new(env!("CARGO_BIN_EXE_squat"))))
}

/// The socket's folder, as the Debian unit makes it (`RuntimeDirectory=`, 0750, the issuer's
/// user's), in a temp dir every user may enter, so that what stops the squatter is that folder.
fn run_folder() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::Builder::new()
        .prefix("issuer-run")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(tmp.path(), PermissionsExt::from_mode(0o755)).unwrap();
    let run = tmp.path().join("issuer");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, PermissionsExt::from_mode(0o750)).unwrap();
    (tmp, run.join("http.sock"))
}

/// A stack whose issuer listens on `socket`, Envoy syncing from it.
async fn socket_stack(tools: &Tools, socket: &Path) -> (tempfile::TempDir, Stack) {
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        edge_sync: true,
        issuer_socket: Some(socket.to_owned()),
        ..Options::default()
    };
    let stack = Stack::start(tmp.path(), tools, &opts).await.unwrap();
    (tmp, stack)
}

/// Until a call with `token` through Envoy is refused as revoked (the feed brought it).
async fn refused(s: &Stack, token: &str) {
    let refused = e2e::wait::until(e2e::wait::LONG, async || call(s, token).await.0 == 401);
    assert!(refused.await, "never refused\n{}", s.logs());
}

#[tokio::test]
#[ignore = "needs Envoy and root: `cargo xtask test` runs it as root"]
async fn a_local_user_cannot_take_the_socket_of_a_restarting_issuer() {
    let (tools, squatter) = (Tools::for_test(), squatter());
    let (_run, socket) = run_folder();
    let (_tmp, mut s) = socket_stack(&tools, &socket).await;
    // The filter's first feed answers came through the socket, and so does a token.
    wait_for_sync(&s).await;
    let token = access(&password(&s, demo::USER, demo::PASSWORD).await);
    assert_eq!(call(&s, &token).await.0, 200, "{}", s.logs());
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.mode() & 0o777, 0o660);

    let running = squatter.take_socket(&socket).unwrap();
    assert!(!running.took, "while it runs:\n{}", running.said);
    s.stop_issuer(0).unwrap();
    assert!(!socket.exists(), "the socket stays after the stop");
    let stopped = squatter.take_socket(&socket).unwrap();
    eprintln!(
        "uid 65534 at {} while stopped:\n{}",
        socket.display(),
        stopped.said
    );
    assert!(!stopped.took, "while it is stopped:\n{}", stopped.said);
    assert_eq!(stopped.said.matches("Permission denied").count(), 4);
    assert!(!socket.exists());

    // Back on the same socket: a revocation through Envoy reaches the edge through the feed.
    s.start_issuer_again(0).unwrap();
    revoke(&s, &token).await;
    refused(&s, &token).await;
}

#[tokio::test]
#[ignore = "needs Envoy and root: `cargo xtask test` runs it as root"]
async fn over_tcp_a_local_user_on_a_stopped_issuers_port_receives_the_edge_credential() {
    let squatter = squatter();
    let (_tmp, mut s) = edge_stack().await;
    s.stop_issuer(0).unwrap();
    let (_squatting, lines) = squatter.listen_on(s.ports.issuer, 30).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut received = Vec::new();
    let credential = loop {
        let line = next_line(&lines, deadline)
            .unwrap_or_else(|| panic!("no poll reached the squatter: {received:?}"));
        if let Some(value) = line.strip_prefix("authorization: ") {
            break value.to_owned();
        }
        received.push(line);
    };
    let secret = s.edge_secret.clone().unwrap();
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("{}:{secret}", demo::EDGE_CLIENT));
    assert_eq!(credential, format!("Basic {basic}"), "{received:?}");
    assert!(
        received.iter().any(|l| l.contains("/apiv2/oauth/edge")),
        "{received:?}"
    );
}
