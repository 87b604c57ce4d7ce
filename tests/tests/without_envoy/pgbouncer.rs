//! The issuer through PgBouncer, configured as `docs/deploy-postgres.md` says ("A pooler in
//! front"), the password in a password file: in session mode sign-in, rotations and admin
//! commands work through it; in transaction mode it works where PgBouncer keeps prepared
//! statements (1.21 and later), and where it does not (Debian 12 ships 1.18) the issuer is not
//! ready and says why, instead of answering from a store it cannot use.

use e2e::issuer::{
    demo, issuer_admin_on, provision_on, refresh, start_issuer_on, token, StoreArgs,
};
use e2e::postgres::pgbouncer::{PgBouncer, PoolMode};
use e2e::postgres::PgCluster;
use e2e::{write_private, Proc, Tools};

/// Database, PgBouncer and the store arguments through it, in a temp dir kept by the guard.
struct Pooled {
    tools: Tools,
    tmp: tempfile::TempDir,
    store: StoreArgs,
    bouncer: PgBouncer,
    /// Stopped after the issuer and PgBouncer (fields drop in order).
    _pg: PgCluster,
}

fn pooled(mode: PoolMode) -> Pooled {
    let tools = Tools::for_test();
    let pg = PgCluster::for_test();
    let bouncer = PgBouncer::for_test(&pg, mode);
    let tmp = tempfile::tempdir().unwrap();
    let kek = tmp.path().join("kek");
    write_private(&kek, &[7u8; 32]).unwrap();
    let password = tmp.path().join("pg-password");
    write_private(&password, format!("{}\n", pg.password()).as_bytes()).unwrap();
    // The URL names PgBouncer and holds no password: it comes from the file.
    let mut store = StoreArgs::postgres(&bouncer.url(), &kek);
    store.args.push("--store-password-file".into());
    store.args.push(password.display().to_string());
    Pooled {
        tools,
        tmp,
        store,
        bouncer,
        _pg: pg,
    }
}

impl Pooled {
    fn issuer(&self) -> (Proc, String) {
        let log = self.tmp.path().join("issuer.log");
        start_issuer_on(&self.tools, &self.store, e2e::free_port(), &[], &log)
            .unwrap_or_else(|e| panic!("{e:#}\n--- pgbouncer:\n{}", self.bouncer.log()))
    }

    fn issuer_log(&self) -> String {
        std::fs::read_to_string(self.tmp.path().join("issuer.log")).unwrap_or_default()
    }
}

/// Signs the demo user in `families` times and rotates each family five times, concurrently;
/// returns each family's last refresh token.
async fn rotate(http: &reqwest::Client, url: &str, secret: &str, families: usize) -> Vec<String> {
    let sign_in = [
        ("grant_type", "password"),
        ("username", demo::USER),
        ("password", demo::PASSWORD),
    ];
    let tasks = (0..families).map(|_| async {
        let v = token(http, &format!("{url}/apiv2/oauth/token"), secret, &sign_in).await;
        let mut rt = v["refresh_token"].as_str().unwrap().to_owned();
        for _ in 0..5 {
            rt = refresh(http, &format!("{url}/apiv2/oauth/token"), secret, &rt).await;
        }
        rt
    });
    futures_util::future::join_all(tasks).await
}

async fn readyz(http: &reqwest::Client, url: &str) -> u16 {
    http.get(format!("{url}/readyz"))
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

/// Works in full through PgBouncer: provisioning and admin commands, sign-in, concurrent
/// rotations, and `/readyz`.
async fn works_through(pooled: &Pooled) {
    let tools = &pooled.tools;
    let secret = provision_on(tools, pooled.tmp.path(), &pooled.store).unwrap();
    let (mut issuer, url) = pooled.issuer();
    let http = reqwest::Client::new();
    // Every acknowledged rotation is in the database: each family's last token rotates again.
    for rt in rotate(&http, &url, &secret, 8).await {
        refresh(&http, &format!("{url}/apiv2/oauth/token"), &secret, &rt).await;
    }
    assert_eq!(readyz(&http, &url).await, 200, "{}", pooled.issuer_log());
    // A session keeps the LISTEN: the notification the issuer sends itself comes back.
    let listening = e2e::wait::until(e2e::wait::LONG, async || {
        let metrics = http.get(format!("{url}/metrics")).send().await.unwrap();
        let text = metrics.text().await.unwrap();
        text.contains("issuer_feed_listening 1")
    });
    assert!(listening.await, "not listening:\n{}", pooled.issuer_log());
    // An admin command through the pooler sees what the server wrote.
    let clients = issuer_admin_on(tools, &pooled.store, &["client", "list"], None).unwrap();
    assert!(clients.contains(demo::CLIENT), "{clients}");
    // The issuer's connections went through PgBouncer.
    assert!(
        pooled
            .bouncer
            .log()
            .contains("login attempt: db=postgres user=app"),
        "{}",
        pooled.bouncer.log()
    );
    assert!(issuer.stop(), "the issuer stops cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and PgBouncer: `cargo xtask test` runs it"]
async fn the_issuer_works_through_pgbouncer_in_session_mode() {
    let pooled = pooled(PoolMode::Session);
    works_through(&pooled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL and PgBouncer: `cargo xtask test` runs it"]
async fn in_transaction_mode_the_issuer_works_or_is_not_ready_and_says_why() {
    let pooled = pooled(PoolMode::Transaction);
    if pooled.bouncer.tracks_prepared_statements() {
        works_through(&pooled).await;
        return;
    }
    // PgBouncer before 1.21: a named statement prepared in one transaction is gone in the next.
    // Migrations run in one transaction each and pass; the periodic work that follows fails.
    let (mut issuer, url) = pooled.issuer();
    let http = reqwest::Client::new();
    let unready = e2e::wait::until(e2e::wait::LONG, async || readyz(&http, &url).await == 503);
    assert!(
        unready.await,
        "still ready through PgBouncer {:?} in transaction mode:\n{}",
        pooled.bouncer.version(),
        pooled.issuer_log()
    );
    let log = pooled.issuer_log();
    assert!(
        log.contains("a pooler in transaction mode") && log.contains("max_prepared_statements"),
        "the log names the cause:\n{log}"
    );
    assert!(issuer.stop(), "the issuer stops cleanly");
}
