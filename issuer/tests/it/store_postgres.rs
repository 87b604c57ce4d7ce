//! The PostgreSQL store alone: what only a shared database needs (sealed secrets, MACed records,
//! TLS to the server); the behaviour both stores share is the conformance suite in `store.rs`.

use crate::store::{client, user, KEK, POLICY};
use issuer::store::kek::Kek;
use issuer::store::postgres::PgStore;
use issuer::store::prelude::*;
use issuer::store::{ClientChange, StoreError};

/// PostgreSQL only (a finding of the second outside probe): client and user records carry a MAC, so a write to the
/// database alone changes no power; a database of an older version, whose records have none,
/// gets them once when opened by this version, and never again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn postgres_records_carry_macs_from_the_first_open_on() {
    let pg = e2e::postgres::PgCluster::for_test();
    let kek = || Kek::derive(&KEK);
    let s = PgStore::connect(&pg.url(), kek(), 1_000, POLICY)
        .await
        .unwrap();
    assert!(s.add_client("app", &client(true)).await.unwrap());
    assert!(s.add_user("alice", &user()).await.unwrap());
    assert!(s.add_user("bob", &user()).await.unwrap());
    // Written without the key: refused as if absent, and left out of the lists.
    pg.psql("UPDATE clients SET record = replace(record, '\"edge\":false', '\"edge\":true')")
        .unwrap();
    pg.psql(
        "UPDATE users SET mac = (SELECT mac FROM users WHERE name = 'alice') WHERE name = 'bob'",
    )
    .unwrap();
    assert!(s.client("app").await.unwrap().is_none());
    assert!(s.clients().await.unwrap().is_empty());
    assert!(s.user("bob").await.unwrap().is_none());
    let names: Vec<String> = s
        .users()
        .await
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["alice"]);
    // A change through the store never makes a tampered record genuine.
    let e = s
        .update_client("app", ClientChange::SetActive(false), 1_000)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("tampered"), "{e}");
    assert!(s.client("app").await.unwrap().is_none());
    assert!(s.remove_client("app", 1_000).await.unwrap());
    assert!(s.add_client("app", &client(true)).await.unwrap());
    assert!(s.client("app").await.unwrap().is_some());

    // The layout of the previous version: no MACs, the hash key in the row `hash-key`.
    let sealed = pg
        .psql("SELECT encode(sealed, 'hex') FROM sealed_secrets WHERE name = 'hash-key+records'")
        .unwrap();
    let plain = kek()
        .open(
            "hash-key+records",
            &hex::decode(sealed).unwrap(),
            "hash key",
        )
        .unwrap();
    let legacy = hex::encode(kek().seal("hash-key", &plain));
    pg.psql(&format!(
        "UPDATE sealed_secrets SET name = 'hash-key', sealed = decode('{legacy}', 'hex') \
         WHERE name = 'hash-key+records'"
    ))
    .unwrap();
    pg.psql("UPDATE clients SET mac = NULL").unwrap();
    pg.psql("UPDATE users SET mac = NULL WHERE name = 'alice'")
        .unwrap();
    drop(s);
    let s = PgStore::connect(&pg.url(), kek(), 1_000, POLICY)
        .await
        .unwrap();
    assert!(s.client("app").await.unwrap().is_some(), "MACed on upgrade");
    assert!(s.user("alice").await.unwrap().is_some());
    assert_eq!(
        pg.psql("SELECT string_agg(name, ',') FROM sealed_secrets")
            .unwrap(),
        "hash-key+records"
    );
    // From then on a record without its MAC stays refused, however often the store reopens.
    pg.psql("UPDATE clients SET mac = NULL").unwrap();
    drop(s);
    let s = PgStore::connect(&pg.url(), kek(), 1_000, POLICY)
        .await
        .unwrap();
    assert!(s.client("app").await.unwrap().is_none());
}

/// PostgreSQL only: the secrets are sealed, so the database alone mints nothing, and the wrong
/// key-encryption key is a clear error, never a new key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn postgres_secrets_need_the_right_kek() {
    let pg = e2e::postgres::PgCluster::for_test();
    let s = PgStore::connect(&pg.url(), Kek::derive(&KEK), 1_000, POLICY)
        .await
        .unwrap();
    let ring = s.key_ring(1_000).await.unwrap();
    let secret = hex::encode(ring.get(1).unwrap().secret());
    let dump = pg.psql("SELECT encode(sealed, 'hex') FROM signing_keys UNION ALL SELECT encode(sealed, 'hex') FROM sealed_secrets").unwrap();
    assert!(
        !dump.contains(&secret),
        "the signing key is sealed in the database"
    );
    let e = PgStore::connect(&pg.url(), Kek::derive(&[8; 32]), 1_000, POLICY)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("kek-file") || e.contains("key-encryption"),
        "{e}"
    );
    // Two issuers starting at once on a new database migrate the schema once and share one key
    // ring.
    pg.psql("CREATE DATABASE fresh").unwrap();
    let url = pg.url().replace("/postgres", "/fresh");
    let (a, b) = tokio::join!(
        PgStore::connect(&url, Kek::derive(&KEK), 1_000, POLICY),
        PgStore::connect(&url, Kek::derive(&KEK), 1_000, POLICY)
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(
        a.key_ring(1_000).await.unwrap().get(1).map(|k| *k.secret()),
        b.key_ring(1_000).await.unwrap().get(1).map(|k| *k.secret())
    );
}

/// Several issuers starting at once on new databases: each migration step may meet another
/// issuer's later step (one drops what an earlier one made), and every issuer still opens, on one
/// key ring. CI once saw `relation "refresh_tokens" does not exist` here.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn issuers_starting_at_once_all_open() {
    let pg = e2e::postgres::PgCluster::for_test();
    for round in 0..4 {
        pg.psql(&format!("CREATE DATABASE race{round}")).unwrap();
        let url = pg.url().replace("/postgres", &format!("/race{round}"));
        let open = || PgStore::connect(&url, Kek::derive(&KEK), 1_000, POLICY);
        let (a, b, c, d) = tokio::join!(open(), open(), open(), open());
        let rings: Vec<_> = [a, b, c, d]
            .into_iter()
            .map(|s| s.unwrap_or_else(|e| panic!("round {round}: {e}")))
            .collect();
        let first = rings[0].key_ring(1_000).await.unwrap();
        for s in &rings[1..] {
            let ring = s.key_ring(1_000).await.unwrap();
            assert_eq!(
                ring.get(1).map(|k| *k.secret()),
                first.get(1).map(|k| *k.secret())
            );
        }
    }
}

/// PostgreSQL over TLS: the server's certificate verified against the CA file; another CA is
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn postgres_over_tls_verifies_the_server() {
    let pg = e2e::postgres::PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("ca.pem");
    std::fs::write(&ca, pg.enable_tls().unwrap()).unwrap();
    let url = format!("{}?sslmode=require", pg.url());
    let s = PgStore::connect_with(&url, Some(&ca), Kek::derive(&KEK), 1_000, POLICY)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pg.log()));
    assert!(s.key_ring(1_000).await.is_ok());
    // Connections over TLS of the application named `app`.
    let tls_connections = |app: &str| {
        pg.psql(&format!("SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a ON a.pid = s.pid WHERE s.ssl AND a.application_name = '{app}'"))
            .unwrap()
    };
    const LISTENER: &str = "mms-issuer feed listener";
    assert_ne!(tls_connections(""), "0", "the issuer's connections use TLS");
    // The change listener's connection too, verified the same way.
    use issuer::store::{Notice, Notices as _};
    let mut listener = s.change_listener().expect("PostgreSQL notifies");
    assert_eq!(listener.next().await.unwrap(), Notice::Listening);
    assert_eq!(tls_connections(LISTENER), "1", "the listener uses TLS");
    drop(listener);
    // A listen URL decides the listener's TLS by itself: the store over plain TCP, the listener
    // over TLS (as with a pooler on the host and the database behind it).
    let plain = format!("{}?sslmode=disable", pg.url());
    let options = issuer::store::postgres::ConnectOptions {
        ca_file: Some(&ca),
        password: None,
        listen_url: Some(&url),
    };
    let split = PgStore::connect_options(&plain, options, Kek::derive(&KEK), 1_000, POLICY)
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", pg.log()));
    let mut listener = split.change_listener().expect("PostgreSQL notifies");
    assert_eq!(listener.next().await.unwrap(), Notice::Listening);
    assert_eq!(
        tls_connections(LISTENER),
        "1",
        "the listener uses TLS, its URL asks for it"
    );
    let other = tmp.path().join("other.pem");
    let stranger = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(&other, stranger.cert.pem()).unwrap();
    assert!(
        PgStore::connect_with(&url, Some(&other), Kek::derive(&KEK), 1_000, POLICY)
            .await
            .is_err(),
        "a certificate from another CA is refused"
    );
}

/// Several issuers on one database take turns at the directory recheck: the lease in the shared
/// back-off book goes to exactly one of them per round, whichever asks first, at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn one_issuer_of_several_takes_each_directory_recheck() {
    use issuer::throttle::{Throttle, ThrottlePolicy};
    use std::sync::Arc;
    let pg = e2e::postgres::PgCluster::for_test();
    let mut issuers = Vec::new();
    for _ in 0..4 {
        let store = PgStore::connect(&pg.url(), Kek::derive(&KEK), 1_000, POLICY)
            .await
            .unwrap();
        issuers.push(Throttle::new(ThrottlePolicy::default(), Arc::new(store)));
    }
    for round in 0..3u64 {
        let at = 1_000 + round * 60;
        let takes = futures_util::future::join_all(
            issuers
                .iter()
                .map(|t| t.try_lease("directory-recheck", at, 59)),
        )
        .await;
        let taken = takes.into_iter().filter(|t| *t.as_ref().unwrap()).count();
        assert_eq!(taken, 1, "round {round}: {taken} issuers took the lease");
    }
}

/// Several issuers on one database, their expiry timers waking in the same second or the next:
/// one of them deactivates the client whose statement expired, and the trail records it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn one_issuer_of_several_deactivates_each_expired_vendor_client() {
    use issuer::app::{App, Settings};
    use issuer::throttle::{Throttle, ThrottlePolicy};
    use std::sync::Arc;
    let pg = e2e::postgres::PgCluster::for_test();
    let t = 1_700_000_000;
    let mut apps = Vec::new();
    for _ in 0..3 {
        let pg_store = Arc::new(
            PgStore::connect(&pg.url(), Kek::derive(&KEK), t, POLICY)
                .await
                .unwrap(),
        );
        let settings = Settings {
            shared_store: true,
            ..crate::app_settings(Default::default())
        };
        let throttle = Throttle::new(ThrottlePolicy::default(), pg_store.clone());
        let store: Arc<dyn issuer::store::Store> = pg_store;
        apps.push(App::new(store, settings, throttle, 1).await.unwrap());
    }
    crate::vendor::an_active_vendor_client(apps[0].store.as_ref(), t).await;
    // One a second later, as a timer that wakes for another client or to recheck would.
    let at = [t + 100, t + 100, t + 101];
    let expiries = apps
        .iter()
        .zip(at)
        .map(|(a, at)| a.expire_vendor_clients(at));
    let done = futures_util::future::join_all(expiries).await;
    let deactivated: usize = done.into_iter().map(|n| n.unwrap()).sum();
    assert_eq!(deactivated, 1);
    let trail = apps[0].store.audit_since(0, 100).await.unwrap();
    let by_expiry = trail.iter().filter(|e| e.actor == "statement expiry");
    assert_eq!(by_expiry.count(), 1, "{trail:?}");
    let later = apps[1].expire_vendor_clients(t + 101).await.unwrap();
    assert_eq!(later, 0, "found inactive");
}

/// PostgreSQL only: the row of an issuer of an earlier version (keyed by node and VM, no client)
/// is read as its edge's, and filed again under the edge's key at its next report, merged (its
/// first sighting kept).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn edges_of_an_earlier_version_are_filed_again() {
    let pg = e2e::postgres::PgCluster::for_test();
    let s = PgStore::connect(&pg.url(), Kek::derive(&KEK), 1_000, POLICY)
        .await
        .unwrap();
    let report = |client: &str, last_seen| issuer::store::EdgeReport {
        node: "envoy-a".into(),
        vm: "1".into(),
        client: client.into(),
        first_seen: 900,
        last_seen,
        keys_version: None,
        kids: vec![],
        cursor: 0,
        latest: 0,
        synced_at: None,
    };
    let old = serde_json::to_string(&report("edge", 1_000)).unwrap();
    pg.psql(&format!(
        "INSERT INTO edges (key, last_seen, report) VALUES (E'envoy-a\\n1', 1000, '{old}')"
    ))
    .unwrap();
    assert_eq!(s.edges().await.unwrap(), [report("edge", 1_000)]);
    // A newer report of the same edge, from an issuer of this version: one edge, merged.
    let newer = issuer::store::EdgeReport {
        first_seen: 1_010,
        ..report("edge", 1_010)
    };
    assert_eq!(s.record_edges(vec![newer], 0).await.unwrap(), 0);
    assert_eq!(s.edges().await.unwrap(), [report("edge", 1_010)]);
    s.record_edges(vec![], 1_005).await.unwrap();
    assert_eq!(
        pg.psql("SELECT count(*) FROM edges WHERE client IS NULL")
            .unwrap()
            .trim(),
        "0"
    );
    assert_eq!(s.edges().await.unwrap(), [report("edge", 1_010)]);
}

/// A commit that the database never acknowledges (here every commit waits for a synchronous
/// standby that does not exist, as on a demoted primary whose standby was promoted) is answered
/// as the database being unavailable, which a request turns into 503, instead of holding the
/// request forever. The commit may land later, once the wait ends: a retry finds it done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn a_commit_the_database_never_acknowledges_is_answered_unavailable() {
    let pg = e2e::postgres::PgCluster::for_test();
    let s = PgStore::connect(&pg.url(), Kek::derive(&KEK), 1_000, POLICY)
        .await
        .unwrap();
    let wait_for_a_ghost = |names: &str| {
        pg.psql(&format!(
            "ALTER SYSTEM SET synchronous_standby_names = '{names}'"
        ))
        .unwrap();
        pg.psql("SELECT pg_reload_conf()").unwrap();
    };
    wait_for_a_ghost("ghost");
    // A guard against a hang, far beyond the store's own bound.
    let guard = std::time::Duration::from_secs(120);
    let stuck = tokio::time::timeout(guard, s.add_user("carol", &user()))
        .await
        .expect("the store answered");
    match stuck {
        Err(StoreError::Unavailable(issuer::store::Unreachable::Unanswered(_))) => {}
        other => panic!("{other:?}"),
    }
    wait_for_a_ghost("");
    // The abandoned commit ends once nothing waits for the ghost: it landed, and a retry says so.
    let retried = tokio::time::timeout(guard, s.add_user("carol", &user()))
        .await
        .expect("the store answered");
    assert!(!retried.unwrap(), "the first commit landed");
    assert!(s.user("carol").await.unwrap().is_some());
}
