//! Several issuers on one PostgreSQL: the real binary twice, a real throwaway cluster, admin
//! commands writing to the database while both serve.

use super::{admin, admin_output, post, Server};
use e2e::postgres::PgCluster;
use reqwest::StatusCode;
use shared::token;
use std::path::Path;
use std::time::{Duration, Instant};

pub(super) fn kek_file(dir: &Path) -> String {
    kek_file_named(dir, "kek", "5a")
}

fn kek_file_named(dir: &Path, name: &str, byte: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("{}\n", byte.repeat(32))).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path.display().to_string()
}

fn with(args: &[&str], store: &[String]) -> Vec<String> {
    args.iter()
        .map(|s| s.to_string())
        .chain(store.iter().cloned())
        .collect()
}

fn admin_on(dir: &Path, args: &[&str], store: &[String], stdin: Option<&str>) -> String {
    let args = with(args, store);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    admin(dir, &args, stdin)
}

/// A database with client `app` (these grants, active) and user `alice` / `alice-pw`: the store
/// arguments of the issuers and the admin commands, and the client's secret.
pub(super) fn provision(pg: &PgCluster, tmp: &Path, grants: &str) -> (Vec<String>, String) {
    let store = vec![
        "--store".to_owned(),
        pg.url(),
        "--kek-file".to_owned(),
        kek_file(tmp),
    ];
    let dir = tmp.join("admin");
    let out = admin_on(
        &dir,
        &["client", "add", "app", "--grants", grants],
        &store,
        None,
    );
    let secret = out
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .expect("secret printed")
        .to_owned();
    admin_on(&dir, &["client", "activate", "app"], &store, None);
    admin_on(&dir, &["user", "add", "alice"], &store, Some("alice-pw"));
    (store, secret)
}

/// Waits until `check` holds (the test fails if it never does, within [`e2e::wait::LONG`]);
/// returns how long it took, for the log.
pub(super) async fn eventually<F: std::future::Future<Output = bool>>(
    mut check: impl FnMut() -> F,
) -> Duration {
    let start = Instant::now();
    let held = e2e::wait::until(e2e::wait::LONG, async || check().await);
    assert!(held.await, "never held");
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn two_issuers_on_one_postgres_answer_alike() {
    let pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let (store, secret) = provision(&pg, tmp.path(), "password,client_credentials");
    let (dir_a, dir_b) = (tmp.path().join("a"), tmp.path().join("b"));
    let args: Vec<&str> = store.iter().map(String::as_str).collect();
    let (a, b) = (Server::start(&dir_a, &args), Server::start(&dir_b, &args));
    let app = Some(("app", secret.as_str()));
    let (signed_in, next) = step_a_family_moves_between_the_issuers(&a, &b, app).await;
    step_racing_refreshes_over_both_get_one_successor(&a, &b, &secret, next).await;
    // A key rotation by the admin command reaches both issuers.
    admin_on(&dir_a, &["keys", "rotate", "--delay", "0"], &store, None);
    for server in [&a, &b] {
        let took = eventually(|| async {
            let t = post(
                &server.token_url(),
                app,
                &[("grant_type", "client_credentials")],
            )
            .await;
            t.json["access_token"]
                .as_str()
                .is_some_and(|t| token::inspect(t).is_ok_and(|b| b.kid == 2))
        })
        .await;
        eprintln!("key rotation reached {} after {took:?}", server.url);
    }
    let access = signed_in.json["access_token"].as_str().unwrap().to_owned();
    step_a_disabled_user_is_revoked_at_both(&dir_a, &store, [&a, &b], &access).await;
    // A deactivated client is refused by both (each issuer caches clients for 1 s).
    admin_on(&dir_a, &["client", "deactivate", "app"], &store, None);
    for server in [&a, &b] {
        let took = eventually(|| async {
            let t = post(
                &server.token_url(),
                app,
                &[("grant_type", "client_credentials")],
            )
            .await;
            t.status == StatusCode::UNAUTHORIZED
        })
        .await;
        eprintln!("deactivation reached {} after {took:?}", server.url);
    }
    // The same admin command line lists what the issuers use.
    assert!(admin_on(&dir_a, &["keys", "list"], &store, None).contains("signing"));
}

/// A refresh form for `rt`.
fn refresh_form(rt: &str) -> [(&'static str, &str); 2] {
    [("grant_type", "refresh_token"), ("refresh_token", rt)]
}

/// Step: signed in at A, refreshed at B; the same token again at A (a retry) gets the same
/// successor. The sign-in's answer and the successor.
async fn step_a_family_moves_between_the_issuers(
    a: &Server,
    b: &Server,
    app: Option<(&str, &str)>,
) -> (crate::Answer, String) {
    let signed_in = post(
        &a.token_url(),
        app,
        &[
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "alice-pw"),
        ],
    )
    .await;
    assert_eq!(signed_in.status, 200, "{}", signed_in.json);
    let rt = signed_in.json["refresh_token"].as_str().unwrap().to_owned();
    let form = refresh_form(&rt);
    let at_b = post(&b.token_url(), app, &form).await;
    assert_eq!(at_b.status, 200, "{}", at_b.json);
    let at_a = post(&a.token_url(), app, &form).await;
    assert_eq!(at_a.json["refresh_token"], at_b.json["refresh_token"]);
    let next = at_b.json["refresh_token"].as_str().unwrap().to_owned();
    (signed_in, next)
}

/// Step: 32 refreshes of one token racing over both issuers: no 5xx, one successor.
async fn step_racing_refreshes_over_both_get_one_successor(
    a: &Server,
    b: &Server,
    secret: &str,
    next: String,
) {
    let racers = (0..32).map(|i| {
        let url = if i % 2 == 0 {
            a.token_url()
        } else {
            b.token_url()
        };
        let next = next.clone();
        async move { post(&url, Some(("app", secret)), &refresh_form(&next)).await }
    });
    let answers = futures_util::future::join_all(racers).await;
    let mut successors = std::collections::HashSet::new();
    for x in &answers {
        assert_eq!(x.status, 200, "{}", x.json);
        successors.insert(x.json["refresh_token"].as_str().unwrap().to_owned());
    }
    assert_eq!(successors.len(), 1, "one successor across both issuers");
}

/// Step: disabling the user revokes its access token `access` at both issuers (introspection
/// by another client).
async fn step_a_disabled_user_is_revoked_at_both(
    dir_a: &Path,
    store: &[String],
    servers: [&Server; 2],
    access: &str,
) {
    let out = admin_on(
        dir_a,
        &["client", "add", "other", "--grants", "client_credentials"],
        store,
        None,
    );
    let other = out
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .unwrap()
        .to_owned();
    admin_on(dir_a, &["client", "activate", "other"], store, None);
    for server in servers {
        let url = format!("{}/apiv2/oauth/introspect", server.url);
        let i = post(&url, Some(("other", &other)), &[("token", access)]).await;
        assert_eq!(i.json["active"], true, "before the change");
    }
    admin_on(dir_a, &["user", "disable", "alice"], store, None);
    for server in servers {
        let took = eventually(|| async {
            let url = format!("{}/apiv2/oauth/introspect", server.url);
            let i = post(&url, Some(("other", &other)), &[("token", access)]).await;
            i.json["active"] == false
        })
        .await;
        eprintln!(
            "the user's revocation reached {} after {took:?}",
            server.url
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn postgres_down_is_503_with_retry_after_and_the_issuer_recovers() {
    let mut pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let (store, secret) = provision(&pg, tmp.path(), "password,client_credentials");
    let dir = tmp.path().join("a");
    let args: Vec<&str> = store.iter().map(String::as_str).collect();
    let server = Server::start(&dir, &args);
    let app = Some(("app", secret.as_str()));
    let sign_in = [
        ("grant_type", "password"),
        ("username", "alice"),
        ("password", "alice-pw"),
    ];
    assert_eq!(post(&server.token_url(), app, &sign_in).await.status, 200);
    pg.pause().unwrap();
    // A client cached in the last second still gets client tokens (nothing to write); a sign-in
    // needs the database.
    let started = Instant::now();
    let down = post(&server.token_url(), app, &sign_in).await;
    assert_eq!(
        down.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        down.json
    );
    assert_eq!(down.json["error"], "temporarily_unavailable");
    assert!(down.headers.contains_key("retry-after"));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "answered, not hung"
    );
    // Health follows the once-a-second key ring read: unavailable a few seconds into the outage.
    let health = || async {
        reqwest::get(format!("{}/healthz", server.url))
            .await
            .unwrap()
            .status()
    };
    let noticed = eventually(|| async { health().await == StatusCode::SERVICE_UNAVAILABLE }).await;
    eprintln!("/healthz said unavailable {noticed:?} after the sign-in was refused");
    pg.resume().unwrap();
    let took = eventually(|| async {
        post(&server.token_url(), app, &sign_in).await.status == StatusCode::OK
    })
    .await;
    eprintln!("served again {took:?} after PostgreSQL came back");
    eventually(|| async { health().await == StatusCode::OK }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn the_key_encryption_key_rotates_without_stopping_the_issuer() {
    let pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let old = kek_file_named(tmp.path(), "old", "a1");
    let new = kek_file_named(tmp.path(), "new", "b2");
    let dir = tmp.path().join("a");
    let url = pg.url();
    let with_old = vec![
        "--store".to_owned(),
        url.clone(),
        "--kek-file".to_owned(),
        old.clone(),
    ];
    let both = vec![
        "--store".to_owned(),
        url.clone(),
        "--kek-file".to_owned(),
        new.clone(),
        "--previous-kek-file".to_owned(),
        old.clone(),
    ];
    let with_new = vec!["--store".to_owned(), url, "--kek-file".to_owned(), new];
    let out = admin_on(&dir, &["client", "add", "app"], &with_old, None);
    let secret = out
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .expect("secret printed")
        .to_owned();
    admin_on(&dir, &["client", "activate", "app"], &with_old, None);
    // Step 1: the issuer runs with the new key and the previous one.
    let args: Vec<&str> = both.iter().map(String::as_str).collect();
    let server = Server::start(&dir, &args);
    let app = Some(("app", secret.as_str()));
    let cc = [("grant_type", "client_credentials")];
    assert_eq!(post(&server.token_url(), app, &cc).await.status, 200);
    // Step 2: re-seal everything under the new key.
    let out = admin_on(&dir, &["keys", "rotate-kek"], &both, None);
    assert!(out.starts_with("2 secrets re-sealed"), "{out}");
    // The old key opens nothing any more; the new one alone does; the issuer kept serving.
    let args = with(&["keys", "list"], &with_old);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let refused = admin_output(&dir, &args, None);
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("wrong --kek-file"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(admin_on(&dir, &["keys", "list"], &with_new, None).contains("signing"));
    // Past the client cache (1 s), the issuer reads the re-sealed record again: a window to let
    // pass, with nothing to wait on (that it serves is what is tested).
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(post(&server.token_url(), app, &cc).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn guesses_spread_over_issuers_meet_one_back_off() {
    let pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let (store, secret) = provision(&pg, tmp.path(), "password");
    let (dir_a, dir_b) = (tmp.path().join("a"), tmp.path().join("b"));
    let mut args: Vec<&str> = store.iter().map(String::as_str).collect();
    args.extend(["--login-backoff-base", "60"]);
    let (a, b) = (Server::start(&dir_a, &args), Server::start(&dir_b, &args));
    let mut statuses = Vec::new();
    for i in 0..8 {
        let server = if i % 2 == 0 { &a } else { &b };
        let form = [
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "guess"),
        ];
        statuses.push(
            post(&server.token_url(), Some(("app", &secret)), &form)
                .await
                .status
                .as_u16(),
        );
    }
    // One issuer allows 5 free failures and sets the wait on the sixth; two issuers together
    // allow exactly as many.
    assert_eq!(statuses, [400, 400, 400, 400, 400, 400, 429, 429]);
    let right = [
        ("grant_type", "password"),
        ("username", "alice"),
        ("password", "alice-pw"),
    ];
    assert_eq!(
        post(&a.token_url(), Some(("app", &secret)), &right)
            .await
            .status,
        429
    );
}
