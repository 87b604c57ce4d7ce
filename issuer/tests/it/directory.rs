//! The directory client against real OpenLDAP servers: a server's timeout is the server's time
//! alone. The issuer's own work between its operations (the bind guard's count in the store,
//! which a busy disk can hold up) never turns a server that answered into one that failed; a
//! server that stops answering still fails the attempt; and a bind that got no answer is never
//! sent again to the next server.

use e2e::slapd::Slapd;
use e2e::DirectoryTable;
use issuer::config::DirectoryConfig;
use issuer::directory::{BindGuard, Directory, DirectoryError};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_millis(1500);

/// The directory of `servers`, in that order, with [`TIMEOUT`].
fn directory(servers: &[&Slapd]) -> Directory {
    let table = DirectoryTable {
        timeout_ms: Some(TIMEOUT.as_millis() as u64),
        ..DirectoryTable::slapd(servers)
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

/// A guard that stops the server with `pid` before letting the bind go to it.
struct StopsTheServer(u32);

#[async_trait::async_trait]
impl BindGuard for StopsTheServer {
    async fn take_bind(&self, _entry: &str) -> bool {
        signal("-STOP", self.0);
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
    let d = directory(&[&ldap]);
    let guard = Slow(TIMEOUT + Duration::from_millis(500));
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
async fn a_server_that_stops_answering_fails_the_attempt_and_is_used_once_back() {
    let ldap = Slapd::for_test();
    let d = directory(&[&ldap]);
    let pid = ldap.pid().expect("slapd runs");
    signal("-STOP", pid);
    let outcome = d.sign_in("alice", ldap.password("alice"), &Slow(Duration::ZERO));
    let outcome = tokio::time::timeout(TIMEOUT * 10, outcome).await;
    signal("-CONT", pid);
    assert!(
        matches!(outcome, Ok(Err(DirectoryError::Unavailable))),
        "a stopped server: {outcome:?}"
    );
    let user = d.lookup("alice").await;
    assert!(user.is_ok(), "answers again once resumed: {user:?}");
}

#[tokio::test]
#[ignore = "needs slapd: `cargo xtask test` runs it"]
async fn a_bind_that_got_no_answer_is_not_sent_to_the_next_server() {
    let first = Slapd::for_test();
    let second = first.start_another().unwrap();
    let d = directory(&[&first, &second]);
    // bob's bind leaves a connection to the first server open for the next bind.
    let bob = d.sign_in("bob", first.password("bob"), &Slow(Duration::ZERO));
    assert!(bob.await.is_ok());
    let pid = first.pid().expect("slapd runs");
    let guard = StopsTheServer(pid);
    let alice = d.sign_in("alice", first.password("alice"), &guard);
    let alice = tokio::time::timeout(TIMEOUT * 10, alice).await;
    signal("-CONT", pid);
    assert!(
        matches!(alice, Ok(Err(DirectoryError::Unavailable))),
        "a bind the first server never answered went to the second: {alice:?}"
    );
    let again = d.sign_in("alice", first.password("alice"), &Slow(Duration::ZERO));
    assert!(again.await.is_ok(), "the next sign-in goes through");
}
