//! Integration tests of the issuer: the real binary, serving real HTTP on 127.0.0.1, with a
//! real redb data dir in a per-test temp dir. Routes are also exercised without sockets
//! (`warp::test`). This file is the shared harness (issuers start through the e2e harness's
//! [`e2e::issuer::launch`], as every other test's do); the tests are in one module per topic.
//! `store` runs the store conformance suite against redb and a real PostgreSQL,
//! `store_postgres` what only the PostgreSQL store does (sealed secrets, MACed records, TLS),
//! `multi` several issuers on one PostgreSQL, `disk` the embedded store on a full disk,
//! `directory` the directory client's timeouts, `config` the configuration file, `locate` where
//! admin commands find the store, `health` the probes and starting before the database,
//! `secret_files` the check of the files holding secrets or the configuration.

mod admin;
mod admin_http;
mod apply;
mod audit;
mod backup;
mod config;
mod crash;
mod directory;
mod disk;
mod documented;
mod edges;
mod endpoints;
mod errors;
mod grants;
mod health;
mod impersonation;
mod listen_socket;
mod locate;
mod multi;
mod oauth2_crate;
mod refresh;
mod reload;
mod secret_files;
mod store;
mod store_move;
mod store_postgres;
mod store_proofs;
mod token_exchange;
mod vendor;
mod vendor_life;

use e2e::Proc;
use reqwest::header::{HeaderMap, CACHE_CONTROL, CONTENT_TYPE, PRAGMA};
use reqwest::StatusCode;
use serde_json::Value;
use shared::token::{self, SubjectKind};
use shared::{Key, KeyRing};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_issuer");

/// `issuer keys filter-config` with the origin the filter requires.
const FILTER_CONFIG: [&str; 4] = [
    "keys",
    "filter-config",
    "--public-origin",
    "https://media.example.com",
];

// ---------------------------------------------------------------------------------------------
// Harness

/// A running `issuer serve` on a data dir, its log next to it (`DIR.log`); stopped (SIGTERM) on
/// drop.
struct Server {
    proc: Option<Proc>,
    url: String,
    dir: PathBuf,
    args: Vec<String>,
}

impl Server {
    fn start(dir: &Path, args: &[&str]) -> Self {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let (proc, url) = spawn(dir, &args, "127.0.0.1:0");
        Self {
            proc: Some(proc),
            url,
            dir: dir.to_owned(),
            args,
        }
    }

    fn token_url(&self) -> String {
        format!("{}/apiv2/oauth/token", self.url)
    }

    /// SIGKILL, as a crash would.
    fn kill9(&mut self) {
        self.proc.take().expect("running").kill();
    }

    /// Starts again, after [`Server::kill9`], on the same data dir and port.
    fn restart(&mut self) {
        let listen = self.url.trim_start_matches("http://").to_owned();
        let (proc, url) = spawn(&self.dir, &self.args, &listen);
        self.proc = Some(proc);
        self.url = url;
    }

    /// SIGKILL, then start again on the same data dir and port.
    fn kill9_and_restart(&mut self) {
        self.kill9();
        self.restart();
    }

    /// The issuer's process, for a test that stops it itself.
    fn take_child(&mut self) -> Child {
        self.proc.take().expect("running").into_child()
    }
}

fn spawn(dir: &Path, args: &[String], listen: &str) -> (Proc, String) {
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--listen", listen])
        .args(args)
        .env("RUST_LOG", "debug");
    e2e::issuer::launch(command, &dir.with_extension("log")).expect("issuer starts")
}

/// Runs an admin command; panics unless it succeeds. Returns stdout.
fn admin(dir: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = admin_output(dir, args, stdin);
    assert!(
        out.status.success(),
        "issuer {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs an admin command on the data dir `dir`, made first with `issuer init` if it holds no
/// store yet (as an operator does before the first `serve`), but for `backup` and `restore`,
/// whose tests ask for a missing data dir.
fn admin_output(dir: &Path, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let plain = !matches!(args.first(), Some(&("backup" | "restore")));
    if plain && !dir.join("issuer.redb").exists() {
        let init = Command::new(BIN)
            .args(["init", "--data-dir"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(init.status.success(), "issuer init: {init:?}");
    }
    let mut command = Command::new(BIN);
    command.args(args).arg("--data-dir").arg(dir);
    run_admin(command, stdin)
}

/// Runs `command` (an `issuer serve`), which must stop with an error: its stderr.
fn refused_to_start(mut command: Command) -> String {
    let mut child = command
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stopped =
        e2e::wait::until_blocking(e2e::wait::LONG, || child.try_wait().unwrap().is_some());
    if !stopped {
        child.kill().unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        panic!("{command:?} started and served:\n{stderr}");
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "{command:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

/// Gives `path` to uid and gid 65534 (`nobody`), or the test fails where this process may not
/// (not root), saying so.
fn give_away(path: &Path) {
    let given = std::os::unix::fs::chown(path, Some(65534), Some(65534));
    e2e::needed_for_test(given.map_err(|e| {
        anyhow::anyhow!("chown to uid 65534 needs root (CI runs `cargo xtask test` as root): {e}")
    }));
}

/// Runs the admin command line `command` with `stdin` on its standard input.
fn run_admin(mut command: Command, stdin: Option<&str>) -> std::process::Output {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        writeln!(input, "{s}").unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

/// A name made to forge output: a line separator, a paragraph separator and bidi controls
/// (U+202E, U+2066, U+200F, U+061C), which the rules for names allow (they refuse control
/// characters only), around the text of a made-up record.
const FORGER: &str = "eve\u{2028}2026-11-26T00:00:00Z root user.add admin: null -> {}\u{2029}\u{202e}nimda\u{2066}\u{200f}\u{61c}";

/// Whether a reader may take `c` for a line break (as Python's `splitlines` and JavaScript do) or
/// a terminal reorder what it shows around it: only `\n` may reach the command line's output.
fn forges(c: char) -> bool {
    (c.is_control() && c != '\n')
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{61c}'
        )
        || ('\u{202a}'..='\u{202e}').contains(&c)
        || ('\u{2066}'..='\u{2069}').contains(&c)
}

/// Asserts that `out` (what `what` printed) holds no character [`forges`] says a reader may take
/// for a line break or a reordering.
fn assert_no_forging(what: &str, out: &str) {
    let raw: Vec<String> = out
        .chars()
        .filter(|&c| forges(c))
        .map(|c| format!("U+{:04X}", u32::from(c)))
        .collect();
    assert!(raw.is_empty(), "{what} printed raw {raw:?}: {out:?}");
}

/// Adds and activates a client; returns its secret.
fn add_client(dir: &Path, id: &str, extra: &[&str]) -> String {
    let mut args = vec!["client", "add", id];
    args.extend_from_slice(extra);
    let out = admin(dir, &args, None);
    let secret = out
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .expect("secret printed")
        .to_owned();
    admin(dir, &["client", "activate", id], None);
    secret
}

fn add_user(dir: &Path, name: &str, password: &str, extra: &[&str]) {
    let mut args = vec!["user", "add", name];
    args.extend_from_slice(extra);
    admin(dir, &args, Some(password));
}

/// The key ring as `issuer keys filter-config` prints it.
fn ring(dir: &Path) -> KeyRing {
    use base64::Engine as _;
    let cfg: Value = serde_json::from_str(&admin(dir, &FILTER_CONFIG, None)).unwrap();
    let keys = cfg["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(k["secret"].as_str().unwrap())
                .unwrap();
            Key::from_slice(k["kid"].as_u64().unwrap() as u32, &secret).unwrap()
        })
        .collect();
    KeyRing::new(keys, None).unwrap()
}

fn now() -> u64 {
    shared::time::unix_seconds(std::time::SystemTime::now())
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    json: Value,
}

/// An app over a fresh redb store in `dir`, for routes tested without sockets (`warp::test`):
/// tokens of 60 s, the issuer `https://issuer.example`, refresh under `refresh`.
async fn socketless_app(
    dir: &Path,
    refresh: issuer::store::RefreshPolicy,
) -> std::sync::Arc<issuer::app::App> {
    use issuer::app::App;
    use issuer::store::redb::RedbStore;
    use issuer::store::{RefreshPolicy, Store};
    use issuer::throttle::{Throttle, ThrottlePolicy};
    let store: std::sync::Arc<dyn Store> =
        std::sync::Arc::new(RedbStore::open(dir, now(), RefreshPolicy::default()).unwrap());
    let throttle = Throttle::in_memory(ThrottlePolicy::default());
    std::sync::Arc::new(
        App::new(store, app_settings(refresh), throttle, 1)
            .await
            .unwrap(),
    )
}

/// The settings of the suite's apps: tokens of 60 s, the issuer `https://issuer.example`,
/// refresh under `refresh`, one issuer on its store.
fn app_settings(refresh: issuer::store::RefreshPolicy) -> issuer::app::Settings {
    issuer::app::Settings {
        access_ttl: 60,
        refresh,
        trusted_proxies: Vec::new(),
        public_url: "https://issuer.example".into(),
        tls: false,
        revocations_per_minute: issuer::app::REVOCATIONS_PER_MINUTE,
        edge_forget_after: issuer::store::edges::EDGE_FORGET_AFTER,
        feed: Default::default(),
        shared_store: false,
        dpop: Default::default(),
    }
}

async fn post(url: &str, basic: Option<(&str, &str)>, form: &[(&str, &str)]) -> Answer {
    let mut req = reqwest::Client::new().post(url).form(form);
    if let Some((id, secret)) = basic {
        req = req.basic_auth(id, Some(secret));
    }
    answer(req.send().await.unwrap()).await
}

async fn answer(resp: reqwest::Response) -> Answer {
    let status = resp.status();
    let headers = resp.headers().clone();
    let body = resp.bytes().await.unwrap();
    let json = serde_json::from_slice(&body)
        .unwrap_or_else(|_| panic!("not JSON ({status}): {}", String::from_utf8_lossy(&body)));
    Answer {
        status,
        headers,
        json,
    }
}

/// Asserts the headers every OAuth answer carries.
fn assert_oauth_headers(a: &Answer) {
    assert_eq!(a.headers[CONTENT_TYPE], "application/json;charset=UTF-8");
    assert_eq!(a.headers[CACHE_CONTROL], "no-store");
    assert_eq!(a.headers[PRAGMA], "no-cache");
}

/// Asserts an RFC 6749 error answer.
fn assert_error(a: &Answer, status: u16, error: &str) {
    assert_eq!(a.status.as_u16(), status, "{}", a.json);
    assert_eq!(a.json["error"], error, "{}", a.json);
    assert!(a.json["error_description"]
        .as_str()
        .is_some_and(|d| !d.is_empty()));
    assert_oauth_headers(a);
    if status == 401 {
        let challenge = a.headers["www-authenticate"].to_str().unwrap();
        assert!(challenge.starts_with("Basic realm=\""), "{challenge}");
    }
}

/// A data dir with client `app` (password + client_credentials, impersonation) and user `alice`.
struct Fixture {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    secret: String,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let secret = add_client(
        &dir,
        "app",
        &["--grants", "password,client_credentials", "--impersonate"],
    );
    add_user(
        &dir,
        "alice",
        "alice-pw",
        &[
            "--role",
            "editor",
            "--role",
            "viewer",
            "--claim",
            "email=alice@example.com",
        ],
    );
    Fixture {
        _tmp: tmp,
        dir,
        secret,
    }
}

impl Fixture {
    fn app(&self) -> Option<(&str, &str)> {
        Some(("app", self.secret.as_str()))
    }
}

async fn password_grant(s: &Server, f: &Fixture) -> Answer {
    post(
        &s.token_url(),
        f.app(),
        &[
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "alice-pw"),
        ],
    )
    .await
}

async fn refresh(s: &Server, f: &Fixture, rt: &str) -> Answer {
    post(
        &s.token_url(),
        f.app(),
        &[("grant_type", "refresh_token"), ("refresh_token", rt)],
    )
    .await
}
