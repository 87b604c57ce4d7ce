//! Health probes and starting before the database: `/livez`, `/readyz` and `/healthz` on the
//! embedded store and before a store opens; on PostgreSQL an issuer started while the database is
//! down, two issuers migrating an empty database at once, a database turned read-only, and the
//! password file. The Envoy health check of `docs/issuer.md` is validated by Envoy.

use super::multi::{eventually, kek_file, provision};
use super::{fixture, post, Server, BIN};
use e2e::postgres::PgCluster;
use e2e::Proc;
use reqwest::header::{HeaderMap, RETRY_AFTER};
use reqwest::StatusCode;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const SIGN_IN: [(&str, &str); 3] = [
    ("grant_type", "password"),
    ("username", "alice"),
    ("password", "alice-pw"),
];

/// `GET url`: the status, headers and JSON body.
async fn get(url: &str) -> (StatusCode, HeaderMap, Value) {
    let resp = reqwest::get(url).await.unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let body = resp.bytes().await.unwrap();
    let json = serde_json::from_slice(&body)
        .unwrap_or_else(|_| panic!("not JSON ({status}): {}", String::from_utf8_lossy(&body)));
    (status, headers, json)
}

/// Asserts a 503 from a probe with `Retry-After` and this reason.
fn assert_not_ready((status, headers, json): &(StatusCode, HeaderMap, Value), reason: &str) {
    assert_eq!(*status, StatusCode::SERVICE_UNAVAILABLE, "{json}");
    assert_eq!(json["status"], "unavailable", "{json}");
    assert_eq!(json["reason"], reason, "{json}");
    assert!(headers.contains_key(RETRY_AFTER), "{headers:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_on_the_embedded_store() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    for path in ["/livez", "/readyz", "/healthz"] {
        let (status, _, json) = get(&format!("{}{path}", s.url)).await;
        assert_eq!(status, StatusCode::OK, "{path}: {json}");
        assert_eq!(json["status"], "ok", "{path}");
    }
    let posted = reqwest::Client::new()
        .post(format!("{}/readyz", s.url))
        .send()
        .await
        .unwrap();
    assert_eq!(posted.status(), StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_locked_or_damaged_data_dir_fails_at_once() {
    let f = fixture();
    let _s = Server::start(&f.dir, &[]);
    let serve = |dir: &Path| {
        let started = std::time::Instant::now();
        let out = Command::new(BIN)
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(out.stdout.is_empty(), "it never listened");
        assert!(started.elapsed() < Duration::from_secs(30), "no waiting");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let locked = serve(&f.dir);
    assert!(locked.contains("in use by another issuer"), "{locked}");
    let tmp = tempfile::tempdir().unwrap();
    let damaged = tmp.path().join("data");
    std::fs::create_dir(&damaged).unwrap();
    std::fs::write(damaged.join(issuer::store::redb::DB_FILE), [0x5a; 4096]).unwrap();
    let e = serve(&damaged);
    assert!(e.contains("opening"), "{e}");
}

#[tokio::test]
async fn before_the_store_opens_only_livez_answers() {
    use issuer::http::{routes_in, AppSlot};
    use issuer::store::RefreshPolicy;
    let slot = AppSlot::default();
    let routes = routes_in(slot.clone());
    let request = |method: &str, path: &str| {
        warp::test::request()
            .method(method)
            .path(path)
            .reply(&routes)
    };
    assert_eq!(request("GET", "/livez").await.status(), 200);
    for path in ["/readyz", "/healthz"] {
        let r = request("GET", path).await;
        assert_eq!(r.status(), 503, "{path}");
        assert!(r.headers().contains_key("retry-after"), "{path}");
        let json: Value = serde_json::from_slice(r.body()).unwrap();
        assert_eq!(json["reason"], "the store is not open yet", "{path}");
    }
    for (method, path) in [
        ("POST", "/apiv2/oauth/token"),
        ("POST", "/apiv2/oauth/revoke"),
        ("GET", "/.well-known/oauth-authorization-server"),
        ("GET", "/metrics"),
    ] {
        let r = request(method, path).await;
        assert_eq!(r.status(), 503, "{path}");
        assert!(r.headers().contains_key("retry-after"), "{path}");
        let json: Value = serde_json::from_slice(r.body()).unwrap();
        assert_eq!(json["error"], "temporarily_unavailable", "{path}");
    }
    assert_eq!(request("GET", "/nope").await.status(), 404);

    // An app arrives: ready once its store took the probe's write.
    let tmp = tempfile::tempdir().unwrap();
    let app = super::socketless_app(tmp.path(), RefreshPolicy::default()).await;
    assert!(slot.set(app.clone()));
    let r = request("GET", "/readyz").await;
    assert_eq!(r.status(), 503);
    let json: Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(
        json["reason"],
        "the store took no write in the last seconds"
    );
    app.probe_store().await.unwrap();
    assert_eq!(request("GET", "/readyz").await.status(), 200);
    assert_eq!(request("GET", "/healthz").await.status(), 200);
    let metadata = request("GET", "/.well-known/oauth-authorization-server").await;
    assert_eq!(metadata.status(), 200);
}

/// `issuer serve` on `store` (arguments; `env` for the URL with its password) listening on a
/// port of its own, its stderr in `log`, without waiting for it: the process, its base URL and
/// its stdout (where `listening on` comes once it serves).
fn spawn_serve(
    dir: &Path,
    store: &[String],
    env: &[(&str, String)],
    log: &Path,
) -> (Proc, String, std::process::ChildStdout) {
    let port = e2e::free_port();
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(store)
        .envs(env.iter().map(|(k, v)| (*k, v)))
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(e2e::private_log(log).unwrap()));
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    (
        Proc::new(child, "issuer"),
        format!("http://127.0.0.1:{port}"),
        stdout,
    )
}

/// Waits for the `listening on` line (the issuer serves), at most `limit`.
async fn serving(stdout: std::process::ChildStdout, limit: Duration) -> String {
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(limit, line)
        .await
        .expect("serving in time")
        .unwrap()
        .unwrap();
    assert!(line.starts_with("listening on "), "{line:?}");
    line
}

/// The `--store` URL of `pg` without its password, and the arguments after a provisioning.
fn store_args(store: &[String]) -> (String, Vec<String>) {
    let at = store.iter().position(|a| a == "--store").unwrap();
    let mut args = store.to_vec();
    let url = args.remove(at + 1);
    args.remove(at);
    (url, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn an_issuer_started_while_postgres_is_down_waits_then_serves() {
    let mut pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let (store, secret) = provision(&pg, tmp.path(), "password");
    let (url, args) = store_args(&store);
    pg.pause().unwrap();
    let log = tmp.path().join("a.log");
    let env = [("ISSUER_STORE", url)];
    let (mut proc, base, stdout) = spawn_serve(&tmp.path().join("a"), &args, &env, &log);
    let live = || async {
        reqwest::get(format!("{base}/livez"))
            .await
            .is_ok_and(|r| r.status() == StatusCode::OK)
    };
    eventually(live).await;
    assert_not_ready(
        &get(&format!("{base}/readyz")).await,
        "the store is not open yet",
    );
    assert_not_ready(
        &get(&format!("{base}/healthz")).await,
        "the store is not open yet",
    );
    let token = format!("{base}/apiv2/oauth/token");
    let app = Some(("app", secret.as_str()));
    let refused = post(&token, app, &SIGN_IN).await;
    assert_eq!(refused.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.json["error"], "temporarily_unavailable");
    assert!(refused.headers.contains_key(RETRY_AFTER));
    // Logged with its path and reason, at INFO: expected while starting.
    let starting = std::fs::read_to_string(&log).unwrap();
    let line = starting
        .lines()
        .find(|l| l.contains("answered 503: the issuer is starting"))
        .unwrap_or_else(|| panic!("no start-up 503 logged:\n{starting}"));
    assert!(line.contains("INFO"), "{line}");
    assert!(line.contains("/apiv2/oauth/token"), "{line}");
    assert!(line.contains("the store is not open yet"), "{line}");
    assert!(
        !starting.contains("answered with a server error"),
        "{starting}"
    );
    // It keeps trying (at least two attempts logged) and has not exited.
    eventually(|| async {
        std::fs::read_to_string(&log)
            .unwrap()
            .matches("the database is not available")
            .count()
            >= 2
    })
    .await;
    assert!(
        proc.exited().is_none(),
        "{}",
        std::fs::read_to_string(&log).unwrap()
    );

    pg.resume().unwrap();
    serving(stdout, Duration::from_secs(60)).await;
    eventually(|| async { get(&format!("{base}/readyz")).await.0 == StatusCode::OK }).await;
    assert_eq!(post(&token, app, &SIGN_IN).await.status, StatusCode::OK);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains(pg.password()), "the log shows the password");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn two_issuers_migrate_an_empty_database_once() {
    let pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let args = vec!["--kek-file".to_owned(), kek_file(tmp.path())];
    let env = [("ISSUER_STORE", pg.url())];
    let logs = [tmp.path().join("a.log"), tmp.path().join("b.log")];
    let a = spawn_serve(&tmp.path().join("a"), &args, &env, &logs[0]);
    let b = spawn_serve(&tmp.path().join("b"), &args, &env, &logs[1]);
    serving(a.2, Duration::from_secs(60)).await;
    serving(b.2, Duration::from_secs(60)).await;
    for base in [&a.1, &b.1] {
        eventually(|| async { get(&format!("{base}/readyz")).await.0 == StatusCode::OK }).await;
    }
    let migrated: Vec<usize> = logs
        .iter()
        .map(|l| {
            std::fs::read_to_string(l)
                .unwrap()
                .matches("database schema migrated")
                .count()
        })
        .collect();
    let versions: usize = pg
        .psql("SELECT count(*) FROM schema_migrations")
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        migrated.contains(&0) && migrated.contains(&versions),
        "one issuer migrates, the other waits: {migrated:?} of {versions}"
    );
    // What a later migration drops is gone: no step ran after its successor.
    assert_eq!(
        pg.psql("SELECT to_regclass('refresh_tokens') IS NULL")
            .unwrap(),
        "t"
    );
    assert_eq!(pg.psql("SELECT count(*) FROM schema_lock").unwrap(), "0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn a_read_only_database_is_not_ready() {
    let pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let (store, secret) = provision(&pg, tmp.path(), "password");
    let args: Vec<&str> = store.iter().map(String::as_str).collect();
    let server = Server::start(&tmp.path().join("a"), &args);
    let readyz = format!("{}/readyz", server.url);
    let app = Some(("app", secret.as_str()));
    assert_eq!(get(&readyz).await.0, StatusCode::OK);
    // New sessions are read-only; the open ones are ended, as a failover ends them.
    pg.psql("ALTER DATABASE postgres SET default_transaction_read_only = on")
        .unwrap();
    pg.psql(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE pid <> pg_backend_pid() AND datname = 'postgres'",
    )
    .unwrap();
    eventually(|| async { get(&readyz).await.0 == StatusCode::SERVICE_UNAVAILABLE }).await;
    assert_not_ready(
        &get(&readyz).await,
        "the store took no write in the last seconds",
    );
    let refused = post(&server.token_url(), app, &SIGN_IN).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        refused.json
    );
    assert!(refused.headers.contains_key(RETRY_AFTER));
    // Writable again: the read-only sessions meet a refused write, are dropped, and new ones
    // write. No restart.
    pg.psql(
        "BEGIN READ WRITE; \
         ALTER DATABASE postgres SET default_transaction_read_only = off; COMMIT",
    )
    .unwrap();
    eventually(|| async { get(&readyz).await.0 == StatusCode::OK }).await;
    assert_eq!(
        post(&server.token_url(), app, &SIGN_IN).await.status,
        StatusCode::OK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: `cargo xtask test` runs it"]
async fn the_password_from_a_file_stays_out_of_ps() {
    use std::os::unix::fs::PermissionsExt;
    let pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let (store, secret) = provision(&pg, tmp.path(), "password");
    let (_, kek) = store_args(&store);
    let url = format!("postgres://app@127.0.0.1:{}/postgres", pg.port());
    let pw = tmp.path().join("pgpass");
    std::fs::write(&pw, format!("{}\n", pg.password())).unwrap();
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o600)).unwrap();
    let with_file = |file: &Path| {
        let mut a = vec!["--store".to_owned(), url.clone()];
        a.extend(kek.iter().cloned());
        a.extend([
            "--store-password-file".to_owned(),
            file.display().to_string(),
        ]);
        a
    };
    let args = with_file(&pw);
    let log = tmp.path().join("a.log");
    let (proc, base, stdout) = spawn_serve(&tmp.path().join("a"), &args, &[], &log);
    serving(stdout, Duration::from_secs(60)).await;
    let app = Some(("app", secret.as_str()));
    let token = format!("{base}/apiv2/oauth/token");
    assert_eq!(post(&token, app, &SIGN_IN).await.status, StatusCode::OK);
    let cmdline = std::fs::read(format!("/proc/{}/cmdline", proc.pid())).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(cmdline.contains("--store-password-file"), "{cmdline}");
    assert!(!cmdline.contains(pg.password()), "ps shows the password");
    let ps = Command::new("ps").args(["-eo", "args"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ps.stdout).contains(pg.password()));
    // A database that was migrated before: no notice logged at start.
    // Admin commands take the same file.
    let mut list = vec!["client".to_owned(), "list".to_owned()];
    list.extend(args.iter().cloned());
    let list: Vec<&str> = list.iter().map(String::as_str).collect();
    assert!(super::admin(&tmp.path().join("admin"), &list, None).contains("app"));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(!text.contains("NOTICE"), "{text}");
    assert!(!text.contains(pg.password()));
    drop(proc);

    // What is wrong, named: a file others may read, a wrong password, none at all.
    let fails = |args: Vec<String>| {
        let out = Command::new(BIN)
            .arg("serve")
            .arg("--data-dir")
            .arg(tmp.path().join("b"))
            .args(["--listen", "127.0.0.1:0"])
            .args(&args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?} started");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    std::fs::set_permissions(&pw, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = fails(with_file(&pw));
    assert!(e.contains("chmod 600"), "{e}");
    let wrong = tmp.path().join("wrong");
    std::fs::write(&wrong, "not-the-password\n").unwrap();
    std::fs::set_permissions(&wrong, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = fails(with_file(&wrong));
    assert!(e.contains("password authentication failed"), "{e}");
    let mut none = vec!["--store".to_owned(), url.clone()];
    none.extend(kek.iter().cloned());
    let e = fails(none);
    assert!(e.contains("invalid configuration: password missing"), "{e}");
}

#[test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
fn the_documented_envoy_health_check_validates() {
    let envoy = e2e::needed_for_test(e2e::env_path("MMS_ENVOY"));
    let doc = std::fs::read_to_string(e2e::root().join("docs/issuer.md")).unwrap();
    // The snippet sits in a list item: its lines are indented alike.
    let mut lines = doc.lines().skip_while(|l| {
        !l.trim_start()
            .starts_with("# issuer cluster with health checks")
    });
    let first = lines.next().expect("the snippet in docs/issuer.md");
    let indent = first.len() - first.trim_start().len();
    let snippet: String = std::iter::once(first)
        .chain(lines.take_while(|l| l.trim() != "```"))
        .map(|l| format!("{}\n", l.get(indent..).unwrap_or_default()))
        .collect();
    assert!(snippet.contains("path: /readyz"), "{snippet}");
    let tmp = tempfile::tempdir().unwrap();
    let config = tmp.path().join("envoy.yaml");
    std::fs::write(&config, snippet).unwrap();
    let out = Command::new(envoy)
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(&config)
        .output()
        .unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && text.contains("OK"), "{text}");
}
