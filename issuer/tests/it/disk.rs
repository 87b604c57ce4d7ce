//! The embedded store on a full disk: the data dir is a small tmpfs, filled by a ballast file
//! while the issuer serves. Writes are refused with a clear 503, nothing acknowledged is lost, and
//! the issuer serves again by itself once space is freed.

use super::{add_client, add_user, post, refresh, Answer, Fixture, Server};
use reqwest::StatusCode;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a directory, unmounted on drop.
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// Mounts a tmpfs of `size` on `dir`. Needs root; without it the test fails, saying so.
    fn mount(dir: &Path, size: &str) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let out = Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0700"),
                "tmpfs",
            ])
            .arg(dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Self(dir.to_owned()),
            other => panic!("mounting a tmpfs failed (the test needs root; CI runs `cargo xtask test` as root): {other:?}"),
        }
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// Writes zeros to `path` until the file system refuses; returns how many bytes went in.
fn fill(path: &Path) -> u64 {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0u8; 64 * 1024];
    let mut written = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(28), "expected ENOSPC, got {e}");
                break;
            }
        }
    }
    // Whatever is left is less than a page: fill it byte by byte.
    while f.write(&[0]).is_ok_and(|n| n == 1) {
        written += 1;
    }
    written
}

async fn sign_in(s: &Server, f: &Fixture) -> Answer {
    super::password_grant(s, f).await
}

/// 200, or 503 `temporarily_unavailable` with `Retry-After`; anything else fails the test.
fn served_or_unavailable(a: &Answer, what: &str) -> bool {
    if a.status == StatusCode::OK {
        return true;
    }
    assert_eq!(
        a.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{what}: {:?}",
        a.json
    );
    assert_eq!(a.json["error"], "temporarily_unavailable", "{what}");
    assert_eq!(a.headers["retry-after"], "1", "{what}");
    false
}

#[tokio::test]
#[ignore = "needs root: `cargo xtask test` runs it as root"]
async fn a_full_disk_is_503_loses_nothing_and_recovers_when_space_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let _mount = Tmpfs::mount(&dir, "24m");
    let secret = add_client(&dir, "app", &["--grants", "password,client_credentials"]);
    add_user(&dir, "alice", "alice-pw", &["--role", "viewer"]);
    let f = Fixture {
        _tmp: tempfile::tempdir().unwrap(),
        dir: dir.clone(),
        secret,
    };
    let mut server = Server::start(&dir, &[]);
    // A family whose every acknowledged rotation must survive.
    let first = sign_in(&server, &f).await;
    assert_eq!(first.status, StatusCode::OK);
    let mut kept = first.json["refresh_token"].as_str().unwrap().to_owned();

    let ballast = dir.join("ballast");
    let filled = fill(&ballast);
    assert!(filled > 0, "the ballast took no space");
    // Sign-ins (new families) and rotations until the store refuses a write.
    let mut refused = 0;
    for i in 0..2_000 {
        let a = if i % 2 == 0 {
            sign_in(&server, &f).await
        } else {
            refresh(&server, &f, &kept).await
        };
        if served_or_unavailable(&a, "while the disk fills") {
            if i % 2 == 1 {
                kept = a.json["refresh_token"].as_str().unwrap().to_owned();
            }
        } else {
            refused += 1;
            if refused == 5 {
                break;
            }
        }
    }
    assert_eq!(refused, 5, "the store never refused a write on a full disk");

    // Space again: the issuer serves by itself, without a restart.
    std::fs::remove_file(&ballast).unwrap();
    let served = e2e::wait::until_some(e2e::wait::LONG, async || {
        let a = refresh(&server, &f, &kept).await;
        served_or_unavailable(&a, "after space was freed")
            .then(|| a.json["refresh_token"].as_str().unwrap().to_owned())
    });
    kept = served.await.expect("not serving after space was freed");
    assert_eq!(sign_in(&server, &f).await.status, StatusCode::OK);

    // Nothing acknowledged was lost, and the file is sound: after a restart the last
    // acknowledged token rotates on.
    server.kill9_and_restart();
    let a = refresh(&server, &f, &kept).await;
    assert_eq!(a.status, StatusCode::OK, "{:?}", a.json);
    let probe = post(
        &server.token_url(),
        f.app(),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_eq!(probe.status, StatusCode::OK);
    drop(server);
}
