//! The directory client against a real OpenLDAP: a server's timeout is the server's time alone.
//! The issuer's own work between its operations (the bind guard's count in the store, which a
//! busy disk can hold up) never turns a server that answered into one that failed; a server
//! that stops answering still fails within its timeout.

use e2e::slapd::Slapd;
use e2e::DirectoryTable;
use issuer::config::DirectoryConfig;
use issuer::directory::{BindGuard, Directory, DirectoryError};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_millis(400);

/// The directory of `ldap` alone, with [`TIMEOUT`].
fn directory(ldap: &Slapd) -> Directory {
    let table = DirectoryTable {
        timeout_ms: Some(TIMEOUT.as_millis() as u64),
        ..DirectoryTable::slapd(&[ldap])
    };
    let file: toml::Value = toml::from_str(&table.to_toml()).unwrap();
    let config = DirectoryConfig::from_toml(file["directory"].clone()).unwrap();
    Directory::new(config).unwrap()
}

/// A guard that lets every bind go after `0`, as one whose store is slow to write would.
struct Slow(Duration);

#[async_trait::async_trait]
impl BindGuard for Slow {
    async fn take_bind(&self, _entry: &str) -> bool {
        tokio::time::sleep(self.0).await;
        true
    }
}

/// `kill -SIG pid`.
fn signal(sig: &str, pid: u32) {
    let sent = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success(), "kill {sig} {pid}");
}

#[tokio::test]
#[ignore = "needs slapd: `cargo xtask test` runs it"]
async fn a_slow_bind_guard_is_not_counted_against_the_servers_timeout() {
    let ldap = Slapd::for_test();
    let d = directory(&ldap);
    let guard = Slow(TIMEOUT * 2);
    match d.sign_in("alice", ldap.password("alice"), &guard).await {
        Ok(user) => assert_eq!(user.name, "alice"),
        Err(e) => panic!("alice did not sign in past a slow guard: {e}"),
    }
    let wrong = d.sign_in("bob", "not-bobs-password", &guard).await;
    assert!(
        matches!(wrong, Err(DirectoryError::Refused { .. })),
        "a wrong password past a slow guard is the user's refusal, not an outage: {wrong:?}"
    );
}

#[tokio::test]
#[ignore = "needs slapd: `cargo xtask test` runs it"]
async fn a_server_that_stops_answering_fails_within_its_timeout() {
    let ldap = Slapd::for_test();
    let d = directory(&ldap);
    let pid = ldap.pid().expect("slapd runs");
    signal("-STOP", pid);
    let started = Instant::now();
    let outcome = d.sign_in("alice", ldap.password("alice"), &Slow(Duration::ZERO));
    let outcome = tokio::time::timeout(TIMEOUT * 20, outcome).await;
    let took = started.elapsed();
    signal("-CONT", pid);
    assert!(
        matches!(outcome, Ok(Err(DirectoryError::Unavailable))),
        "a stopped server: {outcome:?} after {took:?}"
    );
    assert!(took >= TIMEOUT, "failed in {took:?}, before its timeout");
    let user = d.lookup("alice").await;
    assert!(user.is_ok(), "answers again once resumed: {user:?}");
}
