//! The directory client against real OpenLDAP servers: a server's timeout is the server's time
//! alone. The issuer's own work between its operations (the bind guard's count in the store,
//! which a busy disk can hold up) never turns a server that answered into one that failed; a
//! server that stops answering (a [`Relay`] that holds what it gets) still fails the attempt;
//! and a bind that got no answer is never sent again to the next server.

use e2e::slapd::Slapd;
use e2e::DirectoryTable;
use issuer::config::DirectoryConfig;
use issuer::directory::{BindGuard, Directory, DirectoryError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Room for a first TLS connection of a debug build on a loaded machine.
const TIMEOUT: Duration = Duration::from_secs(3);

/// The directory of `servers` (reached at `urls` if given), in that order, with [`TIMEOUT`].
fn directory(servers: &[&Slapd], urls: Option<Vec<String>>) -> Directory {
    let mut table = DirectoryTable {
        timeout_ms: Some(TIMEOUT.as_millis() as u64),
        ..DirectoryTable::slapd(servers)
    };
    if let Some(urls) = urls {
        table.urls = urls;
    }
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

/// A guard that freezes the relay in front of the server before letting the bind go to it.
struct Freezes(Arc<AtomicBool>);

#[async_trait::async_trait]
impl BindGuard for Freezes {
    async fn take_bind(&self, _entry: &str) -> bool {
        self.0.store(true, Ordering::SeqCst);
        true
    }
}

/// A TCP relay on 127.0.0.1 to a server's `ldaps://` port, which forwards both ways until
/// frozen; frozen, it holds whatever arrives on any connection, old or new, as a server that
/// stopped answering would (no signal to the server: the test cannot race one).
struct Relay {
    url: String,
    frozen: Arc<AtomicBool>,
}

impl Relay {
    async fn to(server: &Slapd) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!(
            "ldaps://127.0.0.1:{}",
            listener.local_addr().unwrap().port()
        );
        let target = ("127.0.0.1", server.ldaps_port());
        let frozen = Arc::new(AtomicBool::new(false));
        let held = frozen.clone();
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = TcpStream::connect(target).await else {
                    continue;
                };
                let (from_client, to_client) = inbound.into_split();
                let (from_server, to_server) = outbound.into_split();
                tokio::spawn(pipe(from_client, to_server, held.clone()));
                tokio::spawn(pipe(from_server, to_client, held.clone()));
            }
        });
        Self { url, frozen }
    }
}

/// Copies `from` to `to` until either closes; once `frozen`, holds what it reads.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<AtomicBool>,
) {
    let mut buf = vec![0; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

#[tokio::test]
#[ignore = "needs slapd: `cargo xtask test` runs it"]
async fn a_slow_bind_guard_is_not_counted_against_the_servers_timeout() {
    let ldap = Slapd::for_test();
    let d = directory(&[&ldap], None);
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
    let relay = Relay::to(&ldap).await;
    let d = directory(&[&ldap], Some(vec![relay.url.clone()]));
    relay.frozen.store(true, Ordering::SeqCst);
    let outcome = d.sign_in("alice", ldap.password("alice"), &Slow(Duration::ZERO));
    let outcome = tokio::time::timeout(TIMEOUT * 10, outcome).await;
    relay.frozen.store(false, Ordering::SeqCst);
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
    let relay = Relay::to(&first).await;
    let urls = vec![relay.url.clone(), second.ldaps_url()];
    let d = directory(&[&first, &second], Some(urls));
    // bob's bind leaves a connection to the first server open for the next bind.
    let bob = d.sign_in("bob", first.password("bob"), &Slow(Duration::ZERO));
    let bob = bob.await.expect("bob signs in");
    assert_eq!(bob.server, relay.url, "bob signed in on the first server");
    let freezes = Freezes(relay.frozen.clone());
    let alice = d.sign_in("alice", first.password("alice"), &freezes);
    let alice = tokio::time::timeout(TIMEOUT * 10, alice).await;
    assert!(
        matches!(alice, Ok(Err(DirectoryError::Unavailable))),
        "a bind the first server never answered went to the second: {alice:?}"
    );
    let again = d.sign_in("alice", first.password("alice"), &Slow(Duration::ZERO));
    assert!(again.await.is_ok(), "the next sign-in goes through");
}
