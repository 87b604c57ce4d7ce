//! Integration tests of the issuer: the real binary, serving real HTTP on 127.0.0.1, with a real
//! redb data dir in a per-test temp dir. Routes are also exercised without sockets (`warp::test`).
//! `store` runs the store conformance suite against redb and a real PostgreSQL.

mod disk;
mod multi;
mod store;

use reqwest::header::{HeaderMap, CACHE_CONTROL, CONTENT_TYPE, PRAGMA};
use reqwest::StatusCode;
use serde_json::Value;
use shared::token::{self, SubjectKind};
use shared::{Key, KeyRing};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_issuer");

// ---------------------------------------------------------------------------------------------
// Harness

/// A running `issuer serve`; SIGTERM and wait on drop.
struct Server {
    child: Option<Child>,
    url: String,
    dir: PathBuf,
    args: Vec<String>,
}

impl Server {
    fn start(dir: &Path, args: &[&str]) -> Self {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let (child, url) = spawn(dir, &args, "127.0.0.1:0");
        Self {
            child: Some(child),
            url,
            dir: dir.to_owned(),
            args,
        }
    }

    fn token_url(&self) -> String {
        format!("{}/apiv2/oauth/token", self.url)
    }

    /// SIGKILL, then start again on the same data dir and port.
    fn kill9_and_restart(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reaped");
        let listen = self.url.trim_start_matches("http://").to_owned();
        let (child, url) = spawn(&self.dir, &self.args, &listen);
        self.child = Some(child);
        self.url = url;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let _ = child.wait();
        }
    }
}

fn spawn(dir: &Path, args: &[String], listen: &str) -> (Child, String) {
    let mut child = Command::new(BIN)
        .args(["serve", "--data-dir"])
        .arg(dir)
        .args(["--listen", listen])
        .args(args)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(
            std::fs::File::create(dir.with_extension("log")).unwrap(),
        ))
        .spawn()
        .expect("issuer starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("no address: {line:?}"))
        .to_owned();
    (child, url)
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

fn admin_output(dir: &Path, args: &[&str], stdin: Option<&str>) -> std::process::Output {
    let mut child = Command::new(BIN)
        .args(args)
        .arg("--data-dir")
        .arg(dir)
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
    let cfg: Value = serde_json::from_str(&admin(dir, &["keys", "filter-config"], None)).unwrap();
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
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    json: Value,
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

// ---------------------------------------------------------------------------------------------
// Grants

#[tokio::test]
async fn password_grant_issues_a_user_token_and_refresh_token() {
    let f = fixture();
    let s = Server::start(&f.dir, &["--access-ttl", "600"]);
    let a = password_grant(&s, &f).await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert_oauth_headers(&a);
    assert_eq!(a.json["token_type"], "Bearer");
    assert_eq!(a.json["expires_in"], 600);
    assert!(a.json["refresh_token"]
        .as_str()
        .unwrap()
        .starts_with("mmrt2."));
    let t = token::verify(
        &ring(&f.dir),
        a.json["access_token"].as_str().unwrap(),
        now(),
        0,
    )
    .unwrap();
    let b = t.body();
    assert_eq!(b.client, "app");
    assert_eq!(b.identity.kind, SubjectKind::User);
    assert_eq!(b.identity.subject, "alice");
    assert_eq!(b.identity.roles, ["editor", "viewer"]);
    assert_eq!(b.identity.claims[0].value, "alice@example.com");
    assert_eq!(b.exp - b.iat, 600);
}

#[tokio::test]
async fn client_credentials_grant_issues_a_client_token_without_refresh() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let a = post(
        &s.token_url(),
        f.app(),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert_oauth_headers(&a);
    assert!(a.json.get("refresh_token").is_none());
    assert_eq!(a.json["expires_in"], 3600);
    let t = token::verify(
        &ring(&f.dir),
        a.json["access_token"].as_str().unwrap(),
        now(),
        0,
    )
    .unwrap();
    assert_eq!(t.body().identity.kind, SubjectKind::Client);
    assert_eq!(t.body().client, "app");
}

#[tokio::test]
async fn basic_credentials_are_form_decoded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    admin(
        &dir,
        &["client", "add", "my app", "--secret-stdin"],
        Some("s3cr:t+%"),
    );
    admin(&dir, &["client", "activate", "my app"], None);
    let s = Server::start(&dir, &[]);
    // RFC 6749 2.3.1: id and secret are form-encoded before Basic encoding.
    let a = post(
        &s.token_url(),
        Some(("my+app", "s3cr%3At%2B%25")),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.json);
    let a = post(
        &s.token_url(),
        Some(("my app", "s3cr:t+%")),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_error(&a, 401, "invalid_client");
}

// ---------------------------------------------------------------------------------------------
// Error table

#[tokio::test]
async fn client_authentication_errors_are_401_invalid_client() {
    let f = fixture();
    let tmp_secret = add_client(&f.dir, "sleeper", &[]);
    admin(&f.dir, &["client", "deactivate", "sleeper"], None);
    let s = Server::start(&f.dir, &[]);
    let form = [("grant_type", "client_credentials")];
    assert_error(
        &post(&s.token_url(), None, &form).await,
        401,
        "invalid_client",
    );
    assert_error(
        &post(&s.token_url(), Some(("app", "wrong")), &form).await,
        401,
        "invalid_client",
    );
    assert_error(
        &post(&s.token_url(), Some(("nobody", &f.secret)), &form).await,
        401,
        "invalid_client",
    );
    assert_error(
        &post(&s.token_url(), Some(("sleeper", &tmp_secret)), &form).await,
        401,
        "invalid_client",
    );
    for header in ["Basic !!!", "Bearer abc", "Basic", "Basic bm9jb2xvbg=="] {
        let resp = reqwest::Client::new()
            .post(s.token_url())
            .header("authorization", header)
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_error(&answer(resp).await, 401, "invalid_client");
    }
}

#[tokio::test]
async fn request_errors_are_400_with_their_codes() {
    let f = fixture();
    admin(
        &f.dir,
        &["user", "add", "bob", "--role", "x"],
        Some("bob-pw"),
    );
    admin(&f.dir, &["user", "disable", "bob"], None);
    let cc_only = add_client(&f.dir, "cc-only", &["--grants", "client_credentials"]);
    let s = Server::start(&f.dir, &[]);
    let url = s.token_url();
    let cases: Vec<(Vec<(&str, &str)>, &str)> = vec![
        (vec![], "invalid_request"),
        (
            vec![("grant_type", "password"), ("username", "alice")],
            "invalid_request",
        ),
        (
            vec![
                ("grant_type", "password"),
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "alice-pw"),
            ],
            "invalid_request",
        ),
        (
            vec![
                ("grant_type", "client_credentials"),
                ("impersonate_claims", "no-equals"),
            ],
            "invalid_request",
        ),
        (
            vec![
                ("grant_type", "client_credentials"),
                ("impersonate_claims", ""),
            ],
            "ok-no-impersonation",
        ),
        (
            vec![("grant_type", "client_credentials"), ("client_secret", "x")],
            "invalid_request",
        ),
        (
            vec![
                ("grant_type", "client_credentials"),
                ("client_id", "someone-else"),
            ],
            "invalid_request",
        ),
        (
            vec![("grant_type", "authorization_code"), ("code", "x")],
            "unsupported_grant_type",
        ),
        (
            vec![
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "wrong"),
            ],
            "invalid_grant",
        ),
        (
            vec![
                ("grant_type", "password"),
                ("username", "nobody"),
                ("password", "x"),
            ],
            "invalid_grant",
        ),
        (
            vec![
                ("grant_type", "password"),
                ("username", "bob"),
                ("password", "bob-pw"),
            ],
            "invalid_grant",
        ),
        (
            vec![
                ("grant_type", "refresh_token"),
                ("refresh_token", "mmrt1.unknown"),
            ],
            "invalid_grant",
        ),
    ];
    for (form, expected) in cases {
        let a = post(&url, f.app(), &form).await;
        if expected == "ok-no-impersonation" {
            // An empty value counts as omitted (RFC 6749 3.1).
            assert_eq!(a.status, 200, "{form:?}: {}", a.json);
            continue;
        }
        assert_error(&a, 400, expected);
    }
    // Grant not enabled for this client.
    let a = post(
        &url,
        Some(("cc-only", &cc_only)),
        &[
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "alice-pw"),
        ],
    )
    .await;
    assert_error(&a, 400, "unauthorized_client");
    let a = post(
        &url,
        Some(("cc-only", &cc_only)),
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_as", "alice"),
        ],
    )
    .await;
    assert_error(&a, 400, "unauthorized_client");
    // Wrong content type, with valid credentials and a well-formed body.
    let resp = reqwest::Client::new()
        .post(&url)
        .basic_auth("app", Some(&f.secret))
        .header("content-type", "application/json")
        .body("grant_type=client_credentials")
        .send()
        .await
        .unwrap();
    assert_error(&answer(resp).await, 400, "invalid_request");
    let resp = reqwest::Client::new()
        .post(&url)
        .basic_auth("app", Some(&f.secret))
        .body("grant_type=client_credentials")
        .send()
        .await
        .unwrap();
    assert_error(&answer(resp).await, 400, "invalid_request");
}

#[tokio::test]
async fn method_size_and_path_errors() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let c = reqwest::Client::new();
    for method in [
        reqwest::Method::GET,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
        reqwest::Method::PATCH,
    ] {
        let a = answer(
            c.request(method.clone(), s.token_url())
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(a.status, 405, "{method}");
        assert_eq!(a.headers["allow"], "POST");
        assert_oauth_headers(&a);
    }
    let big = "a".repeat(17 * 1024);
    let resp = c
        .post(s.token_url())
        .basic_auth("app", Some(&f.secret))
        .form(&[("grant_type", "client_credentials"), ("pad", &big)])
        .send()
        .await
        .unwrap();
    let a = answer(resp).await;
    assert_eq!(a.status, 413);
    assert_oauth_headers(&a);
    // Without a Content-Length (chunked), the limit holds too.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..20).map(|_| Ok(vec![b'a'; 1024])).collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let resp = c
        .post(s.token_url())
        .basic_auth("app", Some(&f.secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let a = answer(
        c.get(format!("{}/apiv2/oauth/nothing", s.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(a.status, 404);
}

#[tokio::test]
async fn password_guessing_is_throttled_with_retry_after() {
    let f = fixture();
    add_user(&f.dir, "carol", "carol-pw", &[]);
    // A base wait of 5 s keeps the test clear of second boundaries.
    let s = Server::start(&f.dir, &["--login-backoff-base", "5"]);
    let guess = [
        ("grant_type", "password"),
        ("username", "carol"),
        ("password", "guess"),
    ];
    let mut throttled = None;
    for i in 0..10 {
        let a = post(&s.token_url(), f.app(), &guess).await;
        if a.status == 429 {
            throttled = Some((i, a));
            break;
        }
        assert_error(&a, 400, "invalid_grant");
    }
    let (attempt, a) = throttled.expect("throttled within 10 guesses");
    assert_eq!(attempt, 6, "five free failures, the sixth sets a wait");
    assert_error(&a, 429, "slow_down");
    let wait: u64 = a.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((4..=5).contains(&wait), "{wait}");
    // Even the right password waits while throttled; other users are served.
    let right = [
        ("grant_type", "password"),
        ("username", "carol"),
        ("password", "carol-pw"),
    ];
    assert_eq!(post(&s.token_url(), f.app(), &right).await.status, 429);
    assert_eq!(password_grant(&s, &f).await.status, 200);
    // The back-off is temporary.
    tokio::time::sleep(Duration::from_secs(wait + 1)).await;
    assert_eq!(post(&s.token_url(), f.app(), &right).await.status, 200);
}

// ---------------------------------------------------------------------------------------------
// Impersonation

#[tokio::test]
async fn impersonation_rules() {
    let f = fixture();
    let limited = add_client(
        &f.dir,
        "limited",
        &["--impersonate", "--impersonate-claim-types", "upn,name"],
    );
    let s = Server::start(&f.dir, &[]);
    let ring = ring(&f.dir);
    let identity = |a: &Answer| {
        token::verify(&ring, a.json["access_token"].as_str().unwrap(), now(), 0)
            .unwrap()
            .into_body()
    };

    // Claims supersede impersonate_as and roles, even malformed ones.
    let a = post(
        &s.token_url(),
        f.app(),
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_as", "ignored"),
            ("roles", ",,"),
            ("impersonate_claims", " upn = carol@corp , group=ops"),
        ],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert!(a.json.get("refresh_token").is_none());
    let b = identity(&a);
    assert_eq!(b.identity.kind, SubjectKind::Impersonation);
    assert_eq!(b.client, "app");
    assert_eq!(b.identity.subject, "");
    assert!(b.identity.roles.is_empty());
    let claims: Vec<_> = b
        .identity
        .claims
        .iter()
        .map(|c| (c.typ.as_str(), c.value.as_str()))
        .collect();
    assert_eq!(claims, [("upn", "carol@corp"), ("group", "ops")]);

    // The obsolete pair still works.
    let a = post(
        &s.token_url(),
        f.app(),
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_as", "dave"),
            ("roles", "admin, auditor"),
        ],
    )
    .await;
    let b = identity(&a);
    assert_eq!(
        (b.identity.subject.as_str(), b.identity.roles.clone()),
        ("dave", vec!["admin".to_string(), "auditor".to_string()])
    );

    // Malformed lists.
    for (k, v) in [
        ("impersonate_claims", "a=b,,c=d"),
        ("impersonate_claims", "=x"),
        ("impersonate_claims", "k=v=w"),
        ("roles", "a,,b"),
    ] {
        let a = post(
            &s.token_url(),
            f.app(),
            &[("grant_type", "client_credentials"), (k, v)],
        )
        .await;
        assert_error(&a, 400, "invalid_request");
    }
    let huge = vec!["t=v"; 65].join(",");
    assert_error(
        &post(
            &s.token_url(),
            f.app(),
            &[
                ("grant_type", "client_credentials"),
                ("impersonate_claims", &huge),
            ],
        )
        .await,
        400,
        "invalid_request",
    );

    // Limited to claim types.
    let lim = Some(("limited", limited.as_str()));
    assert_eq!(
        post(
            &s.token_url(),
            lim,
            &[
                ("grant_type", "client_credentials"),
                ("impersonate_claims", "upn=x")
            ]
        )
        .await
        .status,
        200
    );
    assert_eq!(
        post(
            &s.token_url(),
            lim,
            &[
                ("grant_type", "client_credentials"),
                ("impersonate_as", "x")
            ]
        )
        .await
        .status,
        200
    );
    assert_error(
        &post(
            &s.token_url(),
            lim,
            &[
                ("grant_type", "client_credentials"),
                ("impersonate_claims", "upn=x,group=y"),
            ],
        )
        .await,
        400,
        "unauthorized_client",
    );
    assert_error(
        &post(
            &s.token_url(),
            lim,
            &[("grant_type", "client_credentials"), ("roles", "admin")],
        )
        .await,
        400,
        "unauthorized_client",
    );
    let log = std::fs::read_to_string(f.dir.with_extension("log")).unwrap();
    assert!(
        log.contains("impersonation") && log.contains("upn=carol@corp"),
        "audit log line missing"
    );
}

// ---------------------------------------------------------------------------------------------
// Refresh tokens

#[tokio::test]
async fn refresh_rotates_and_retry_inside_the_window_gets_the_same_successor() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let first = password_grant(&s, &f).await;
    let rt1 = first.json["refresh_token"].as_str().unwrap().to_owned();
    let a = refresh(&s, &f, &rt1).await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert_oauth_headers(&a);
    let rt2 = a.json["refresh_token"].as_str().unwrap().to_owned();
    assert_ne!(rt1, rt2);
    let t = token::verify(
        &ring(&f.dir),
        a.json["access_token"].as_str().unwrap(),
        now(),
        0,
    )
    .unwrap();
    assert_eq!(t.body().identity.subject, "alice");
    // A retry of rt1 (lost response) gets rt2 again, not a branch.
    let retry = refresh(&s, &f, &rt1).await;
    assert_eq!(retry.status, 200);
    assert_eq!(retry.json["refresh_token"], rt2.as_str());
    // rt2 rotates on; now rt1 is stale even inside the window: the family is revoked.
    let rt3 = refresh(&s, &f, &rt2).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_error(&refresh(&s, &f, &rt1).await, 400, "invalid_grant");
    assert_error(&refresh(&s, &f, &rt3).await, 400, "invalid_grant");
    // Another sign-in's family is untouched.
    let other = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(refresh(&s, &f, &other).await.status, 200);
}

#[tokio::test]
async fn reuse_outside_the_window_revokes_the_family() {
    let f = fixture();
    let s = Server::start(&f.dir, &["--refresh-retry-window", "0"]);
    let rt1 = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let rt2 = refresh(&s, &f, &rt1).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_error(&refresh(&s, &f, &rt1).await, 400, "invalid_grant");
    assert_error(&refresh(&s, &f, &rt2).await, 400, "invalid_grant");
    let metrics = reqwest::get(format!("{}/metrics", s.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("result=\"reuse_detected\"") && metrics.contains("result=\"revoked\""),
        "{metrics}"
    );
}

#[tokio::test]
async fn refresh_tokens_are_bound_to_their_client_and_expire() {
    let f = fixture();
    let other = add_client(&f.dir, "other", &["--grants", "password"]);
    let s = Server::start(&f.dir, &["--refresh-idle-ttl", "2"]);
    let rt = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let a = post(
        &s.token_url(),
        Some(("other", &other)),
        &[("grant_type", "refresh_token"), ("refresh_token", &rt)],
    )
    .await;
    assert_error(&a, 400, "invalid_grant");
    // The foreign attempt did not spend or revoke it.
    let rt2 = refresh(&s, &f, &rt).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_error(&refresh(&s, &f, &rt2).await, 400, "invalid_grant");
}

#[tokio::test]
async fn refresh_rechecks_client_and_user_and_takes_current_roles() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let rt = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    admin(&f.dir, &["user", "disable", "alice"], None);
    assert_error(&refresh(&s, &f, &rt).await, 400, "invalid_grant");
    admin(&f.dir, &["user", "enable", "alice"], None);
    let a = refresh(&s, &f, &rt).await;
    assert_eq!(a.status, 200, "{}", a.json);
    let rt2 = a.json["refresh_token"].as_str().unwrap().to_owned();
    admin(&f.dir, &["client", "deactivate", "app"], None);
    assert_error(&refresh(&s, &f, &rt2).await, 401, "invalid_client");
    admin(&f.dir, &["client", "activate", "app"], None);
    assert_eq!(refresh(&s, &f, &rt2).await.status, 200);
}

#[tokio::test]
async fn concurrent_refreshes_of_one_token_yield_exactly_one_successor() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let rt = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let client = reqwest::Client::new();
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let req = client
                .post(s.token_url())
                .basic_auth("app", Some(&f.secret))
                .form(&[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", rt.as_str()),
                ]);
            tokio::spawn(async move { answer(req.send().await.unwrap()).await })
        })
        .collect();
    let mut successors = std::collections::HashSet::new();
    for t in tasks {
        let a = t.await.unwrap();
        assert_eq!(a.status, 200, "{}", a.json);
        successors.insert(a.json["refresh_token"].as_str().unwrap().to_owned());
    }
    assert_eq!(successors.len(), 1, "the family forked: {successors:?}");
    let next = successors.into_iter().next().unwrap();
    assert_eq!(refresh(&s, &f, &next).await.status, 200);
}

// ---------------------------------------------------------------------------------------------
// Durability and administration

#[tokio::test]
async fn kill_9_and_restart_keeps_everything_a_client_received() {
    let f = fixture();
    let mut s = Server::start(&f.dir, &[]);
    let a = password_grant(&s, &f).await;
    let access = a.json["access_token"].as_str().unwrap().to_owned();
    let rt1 = a.json["refresh_token"].as_str().unwrap().to_owned();
    let rt2 = refresh(&s, &f, &rt1).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let fresh = password_grant(&s, &f).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    s.kill9_and_restart();
    // Keys survived: the access token still introspects as active.
    let i = post(
        &format!("{}/apiv2/oauth/introspect", s.url),
        f.app(),
        &[("token", &access)],
    )
    .await;
    assert_eq!(i.json["active"], true, "{}", i.json);
    // Clients and users survived; every refresh token the client holds works.
    assert_eq!(refresh(&s, &f, &fresh).await.status, 200);
    let rt3 = refresh(&s, &f, &rt2).await.json["refresh_token"]
        .as_str()
        .unwrap()
        .to_owned();
    // The rotated rt1 is still known as rotated: reuse revokes its family.
    s.kill9_and_restart();
    assert_error(&refresh(&s, &f, &rt1).await, 400, "invalid_grant");
    assert_error(&refresh(&s, &f, &rt3).await, 400, "invalid_grant");
}

#[tokio::test]
async fn admin_commands_take_effect_on_a_running_server() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    // A client added and activated while the server runs works at once.
    let out = admin(
        &f.dir,
        &["client", "add", "late", "--grants", "client_credentials"],
        None,
    );
    let secret = out
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .unwrap()
        .to_owned();
    let form = [("grant_type", "client_credentials")];
    assert_error(
        &post(&s.token_url(), Some(("late", &secret)), &form).await,
        401,
        "invalid_client",
    );
    admin(&f.dir, &["client", "activate", "late"], None);
    assert_eq!(
        post(&s.token_url(), Some(("late", &secret)), &form)
            .await
            .status,
        200
    );
    assert!(admin(&f.dir, &["client", "list"], None).contains("late"));
    // Users and passwords.
    add_user(&f.dir, "erin", "erin-pw", &[]);
    let login = |pw: &'static str| {
        [
            ("grant_type", "password"),
            ("username", "erin"),
            ("password", pw),
        ]
    };
    assert_eq!(
        post(&s.token_url(), f.app(), &login("erin-pw"))
            .await
            .status,
        200
    );
    admin(&f.dir, &["user", "passwd", "erin"], Some("erin-new"));
    assert_eq!(
        post(&s.token_url(), f.app(), &login("erin-new"))
            .await
            .status,
        200
    );
    assert!(admin(&f.dir, &["user", "list"], None).contains("erin"));
    admin(&f.dir, &["user", "remove", "erin"], None);
    assert_error(
        &post(&s.token_url(), f.app(), &login("erin-new")).await,
        400,
        "invalid_grant",
    );
    // Key rotation: new tokens use the new key; old tokens keep verifying.
    let old = post(&s.token_url(), f.app(), &form).await.json["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(admin(&f.dir, &["keys", "rotate"], None).contains("key 2"));
    let new = post(&s.token_url(), f.app(), &form).await.json["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let ring = ring(&f.dir);
    assert_eq!(token::verify(&ring, &new, now(), 0).unwrap().body().kid, 2);
    assert_eq!(token::verify(&ring, &old, now(), 0).unwrap().body().kid, 1);
    let list = admin(&f.dir, &["keys", "list"], None);
    assert!(
        list.contains("signing") && list.contains("verifying"),
        "{list}"
    );
    let i = post(
        &format!("{}/apiv2/oauth/introspect", s.url),
        f.app(),
        &[("token", &old)],
    )
    .await;
    assert_eq!(i.json["active"], true);
    // Refusals come back as errors from the server.
    let out = admin_output(&f.dir, &["client", "activate", "ghost"], None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ghost"));
    // The log carries an audit line per change and never a secret.
    let log = std::fs::read_to_string(f.dir.with_extension("log")).unwrap();
    assert!(log.contains("client activate late") && log.contains("keys rotate"));
    assert!(!log.contains(&secret) && !log.contains(&f.secret) && !log.contains("erin-new"));
    assert!(!log.contains(&new) && !log.contains(&old));
}

#[test]
fn data_dir_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let f = fixture();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&f.dir), 0o700);
    assert_eq!(mode(&f.dir.join("issuer.redb")), 0o600);
    assert_eq!(mode(&f.dir.join("hash.key")), 0o600);
    let _s = Server::start(&f.dir, &[]);
    assert_eq!(mode(&f.dir.join("admin.sock")), 0o600);
}

// ---------------------------------------------------------------------------------------------
// Revocation, introspection, metadata, health, metrics

#[tokio::test]
async fn revocation_and_introspection() {
    let f = fixture();
    let other = add_client(&f.dir, "other", &["--grants", "password"]);
    let s = Server::start(&f.dir, &[]);
    let a = password_grant(&s, &f).await;
    let rt = a.json["refresh_token"].as_str().unwrap().to_owned();
    let introspect = format!("{}/apiv2/oauth/introspect", s.url);
    let revoke = format!("{}/apiv2/oauth/revoke", s.url);
    let i = post(&introspect, f.app(), &[("token", &rt)]).await;
    assert_eq!(
        (i.json["active"].clone(), i.json["username"].clone()),
        (Value::Bool(true), Value::from("alice"))
    );
    assert_eq!(
        post(&introspect, Some(("other", &other)), &[("token", &rt)])
            .await
            .json["active"],
        false
    );
    assert_eq!(
        post(&introspect, f.app(), &[("token", "garbage")])
            .await
            .json,
        serde_json::json!({"active": false})
    );
    assert_error(
        &post(&introspect, None, &[("token", &rt)]).await,
        401,
        "invalid_client",
    );
    assert_error(
        &post(&revoke, Some(("other", &other)), &[("token", &rt)]).await,
        400,
        "unauthorized_client",
    );
    let r = post(&revoke, f.app(), &[("token", &rt)]).await;
    assert_eq!(r.status, 200);
    assert_oauth_headers(&r);
    assert_error(&refresh(&s, &f, &rt).await, 400, "invalid_grant");
    assert_eq!(
        post(&introspect, f.app(), &[("token", &rt)]).await.json["active"],
        false
    );
    assert_eq!(
        post(&revoke, f.app(), &[("token", "unknown")]).await.status,
        200
    );
    assert_error(&post(&revoke, f.app(), &[]).await, 400, "invalid_request");

    // A token made with the issuer's own key but a lifetime it never grants (a stolen key) is not
    // active; within the access token lifetime it is.
    let ring = ring(&f.dir);
    let forged = |lifetime: u64| {
        let body = token::TokenBody {
            kid: ring.keys()[0].id(),
            jti: [9; 16],
            iat: now() - 5,
            exp: now() - 5 + lifetime,
            client: "app".into(),
            identity: token::Identity {
                kind: SubjectKind::User,
                subject: "root".into(),
                roles: vec!["admin".into()],
                claims: vec![],
            },
        };
        token::mint(&ring.keys()[0], &body).unwrap()
    };
    for (lifetime, active) in [(10 * 365 * 86_400, false), (3600, true)] {
        let t = forged(lifetime);
        let i = post(&introspect, f.app(), &[("token", &t)]).await;
        assert_eq!(i.json["active"], active, "lifetime {lifetime}");
    }
}

#[tokio::test]
async fn metadata_health_and_metrics() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let m: Value = reqwest::get(format!("{}/.well-known/oauth-authorization-server", s.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m["issuer"], s.url.as_str());
    assert_eq!(m["token_endpoint"], format!("{}/apiv2/oauth/token", s.url));
    assert_eq!(
        m["revocation_endpoint"],
        format!("{}/apiv2/oauth/revoke", s.url)
    );
    assert_eq!(
        m["introspection_endpoint"],
        format!("{}/apiv2/oauth/introspect", s.url)
    );
    assert_eq!(
        m["grant_types_supported"],
        serde_json::json!(["password", "refresh_token", "client_credentials"])
    );
    let h = reqwest::get(format!("{}/healthz", s.url)).await.unwrap();
    assert_eq!(h.status(), 200);
    password_grant(&s, &f).await;
    post(&s.token_url(), None, &[("grant_type", "password")]).await;
    let text = reqwest::get(format!("{}/metrics", s.url))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains(
            r#"issuer_oauth_requests_total{endpoint="token",grant="password",outcome="ok"} 1"#
        ),
        "{text}"
    );
    assert!(text.contains(r#"outcome="invalid_client""#), "{text}");
    assert!(
        text.contains("issuer_token_request_duration_seconds_count"),
        "{text}"
    );
}

// ---------------------------------------------------------------------------------------------
// HTTPS served by the issuer itself

#[tokio::test]
async fn serves_https_with_its_own_certificate() {
    let f = fixture();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
    let cert_path = f.dir.with_extension("crt");
    let key_path = f.dir.with_extension("key");
    std::fs::write(&cert_path, cert.cert.pem()).unwrap();
    std::fs::write(&key_path, cert.key_pair.serialize_pem()).unwrap();
    let s = Server::start(
        &f.dir,
        &[
            "--tls-cert",
            cert_path.to_str().unwrap(),
            "--tls-key",
            key_path.to_str().unwrap(),
        ],
    );
    assert!(s.url.starts_with("https://"), "{}", s.url);
    let port = s.url.rsplit(':').next().unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).unwrap())
        .resolve("localhost", format!("127.0.0.1:{port}").parse().unwrap())
        .build()
        .unwrap();
    let resp = client
        .post(format!("https://localhost:{port}/apiv2/oauth/token"))
        .basic_auth("app", Some(&f.secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    let a = answer(resp).await;
    assert_eq!(a.status, 200, "{}", a.json);
    // Plain HTTP on the TLS port is refused, not served.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
}

// ---------------------------------------------------------------------------------------------
// A third-party OAuth client library

#[tokio::test]
async fn the_oauth2_crate_obtains_uses_and_refreshes_tokens() {
    use oauth2::basic::BasicClient;
    use oauth2::{
        ClientId, ClientSecret, RefreshToken, ResourceOwnerPassword, ResourceOwnerUsername,
        TokenResponse, TokenUrl,
    };
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let client = BasicClient::new(ClientId::new("app".into()))
        .set_client_secret(ClientSecret::new(f.secret.clone()))
        .set_token_uri(TokenUrl::new(s.token_url()).unwrap());
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let t = client
        .exchange_password(
            &ResourceOwnerUsername::new("alice".into()),
            &ResourceOwnerPassword::new("alice-pw".into()),
        )
        .request_async(&http)
        .await
        .unwrap();
    assert_eq!(t.expires_in(), Some(Duration::from_secs(3600)));
    let rt = t.refresh_token().unwrap().clone();
    let ring = ring(&f.dir);
    assert_eq!(
        token::verify(&ring, t.access_token().secret(), now(), 0)
            .unwrap()
            .body()
            .identity
            .subject,
        "alice"
    );
    let t2 = client
        .exchange_refresh_token(&rt)
        .request_async(&http)
        .await
        .unwrap();
    assert_ne!(t2.refresh_token().unwrap().secret(), rt.secret());
    // Using the token: introspection with it as the subject.
    let i = post(
        &format!("{}/apiv2/oauth/introspect", s.url),
        f.app(),
        &[("token", t2.access_token().secret())],
    )
    .await;
    assert_eq!(i.json["username"], "alice");
    let c = client
        .exchange_client_credentials()
        .add_extra_param("impersonate_claims", "upn=zed")
        .request_async(&http)
        .await
        .unwrap();
    assert!(c.refresh_token().is_none());
    assert_eq!(
        token::verify(&ring, c.access_token().secret(), now(), 0)
            .unwrap()
            .body()
            .identity
            .claims[0]
            .value,
        "zed"
    );
    let err = client
        .exchange_refresh_token(&RefreshToken::new("mmrt1.bogus".into()))
        .request_async(&http)
        .await
        .unwrap_err();
    match err {
        oauth2::RequestTokenError::ServerResponse(r) => assert_eq!(
            r.error(),
            &oauth2::basic::BasicErrorResponseType::InvalidGrant
        ),
        other => panic!("expected invalid_grant, got {other:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Routes without sockets

#[tokio::test]
async fn routes_without_sockets() {
    use issuer::app::{App, Settings};
    use issuer::store::redb::RedbStore;
    use issuer::store::{RefreshPolicy, Store};
    use issuer::throttle::{Throttle, ThrottlePolicy};
    use std::sync::Arc;
    let tmp = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(RedbStore::open(tmp.path(), now(), RefreshPolicy::default()).unwrap());
    let settings = Settings {
        access_ttl: 60,
        refresh: RefreshPolicy {
            idle_ttl: 60,
            absolute_ttl: 600,
            retry_window: 5,
        },
        trusted_proxies: Vec::new(),
        public_url: "https://issuer.example".into(),
    };
    let app = Arc::new(
        App::new(
            store,
            settings,
            Throttle::in_memory(ThrottlePolicy::default()),
            1,
        )
        .await
        .unwrap(),
    );
    let routes = issuer::http::routes(app);
    let r = warp::test::request()
        .method("GET")
        .path("/.well-known/oauth-authorization-server")
        .reply(&routes)
        .await;
    assert_eq!(r.status(), 200);
    let m: Value = serde_json::from_slice(r.body()).unwrap();
    assert_eq!(
        m["token_endpoint"],
        "https://issuer.example/apiv2/oauth/token"
    );
    let r = warp::test::request()
        .method("DELETE")
        .path("/apiv2/oauth/revoke")
        .reply(&routes)
        .await;
    assert_eq!(
        (r.status().as_u16(), r.headers()["allow"].to_str().unwrap()),
        (405, "POST")
    );
    let r = warp::test::request()
        .method("POST")
        .path("/apiv2/oauth/token")
        .body(vec![b'a'; 17 * 1024])
        .reply(&routes)
        .await;
    assert_eq!(r.status(), 413);
    let r = warp::test::request()
        .method("POST")
        .path("/apiv2/oauth/token")
        .body("grant_type=client_credentials")
        .reply(&routes)
        .await;
    assert_eq!(r.status(), 401);
    assert_eq!(
        r.headers()["content-type"],
        "application/json;charset=UTF-8"
    );
    let r = warp::test::request().path("/nope").reply(&routes).await;
    assert_eq!(r.status(), 404);
}

#[tokio::test]
async fn sigterm_shuts_down_gracefully() {
    let f = fixture();
    let mut s = Server::start(&f.dir, &[]);
    assert_eq!(password_grant(&s, &f).await.status, 200);
    let mut child = s.child.take().unwrap();
    assert!(f.dir.join("admin.sock").exists());
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    assert!(!f.dir.join("admin.sock").exists(), "socket left behind");
    // The data dir is free again: an offline admin command opens it directly.
    assert!(admin(&f.dir, &["user", "list"], None).contains("alice"));
}

// ---------------------------------------------------------------------------------------------
// Crash safety and concurrency

/// A small deterministic generator for test timing; the seed is printed so a run can be replayed.
struct Lcg(u64);

impl Lcg {
    fn from_time() -> Self {
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        eprintln!("random seed {seed}");
        Self(seed)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_refresh_load_loses_no_rotation() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const FAMILIES: usize = 8;
    const CYCLES: usize = 20;
    let f = fixture();
    let mut s = Server::start(&f.dir, &[]);
    let mut rng = Lcg::from_time();
    let mut last: Vec<String> = Vec::new();
    for _ in 0..FAMILIES {
        last.push(
            password_grant(&s, &f).await.json["refresh_token"]
                .as_str()
                .unwrap()
                .to_owned(),
        );
    }
    let first_of_family0 = last[0].clone();
    let mut total_rotations = 0u64;
    for cycle in 0..CYCLES {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks: Vec<_> = last
            .iter()
            .cloned()
            .map(|mut token| {
                let (url, secret, stop) = (s.token_url(), f.secret.clone(), stop.clone());
                tokio::spawn(async move {
                    let client = reqwest::Client::new();
                    let mut rotations = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let sent = client
                            .post(&url)
                            .basic_auth("app", Some(&secret))
                            .form(&[
                                ("grant_type", "refresh_token"),
                                ("refresh_token", token.as_str()),
                            ])
                            .send()
                            .await;
                        // A request cut off by the kill has no answer: the client keeps its token.
                        let Ok(resp) = sent else { break };
                        let status = resp.status();
                        let Ok(body) = resp.json::<Value>().await else {
                            break;
                        };
                        assert_eq!(status, 200, "cycle {cycle}: a rotation was refused: {body}");
                        token = body["refresh_token"].as_str().unwrap().to_owned();
                        rotations += 1;
                    }
                    (token, rotations)
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(30 + rng.below(300))).await;
        let mut child = s.child.take().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        stop.store(true, Ordering::Relaxed);
        last.clear();
        for t in tasks {
            let (token, n) = t.await.unwrap();
            total_rotations += n;
            last.push(token);
        }
        // The database opens cleanly after every kill.
        let listen = s.url.trim_start_matches("http://").to_owned();
        let (child, url) = spawn(&s.dir, &s.args, &listen);
        s.child = Some(child);
        s.url = url;
        // Every token a client received still works, and twice gives the same successor: a rotation
        // that committed before the kill is found again, never forked.
        for (i, token) in last.iter_mut().enumerate() {
            let a = refresh(&s, &f, token).await;
            assert_eq!(
                a.status, 200,
                "cycle {cycle}, family {i}: the last received token was lost: {}",
                a.json
            );
            let b = refresh(&s, &f, token).await;
            assert_eq!(
                b.json["refresh_token"], a.json["refresh_token"],
                "cycle {cycle}, family {i}: forked"
            );
            *token = a.json["refresh_token"].as_str().unwrap().to_owned();
        }
    }
    assert!(total_rotations > 0, "the load made no rotation");
    eprintln!("{CYCLES} SIGKILL cycles, {total_rotations} rotations under load");
    // Tokens legitimately rotated away are refused, and their reuse revokes only their family.
    assert_error(
        &refresh(&s, &f, &first_of_family0).await,
        400,
        "invalid_grant",
    );
    assert_error(&refresh(&s, &f, &last[0]).await, 400, "invalid_grant");
    assert_eq!(refresh(&s, &f, &last[1]).await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotations_revocations_and_admin_changes_race_without_forks() {
    const FAMILIES: usize = 16;
    const PER_FAMILY: usize = 4;
    const ROUNDS: usize = 12;
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let mut current: Vec<Option<String>> = Vec::new();
    for _ in 0..FAMILIES {
        current.push(Some(
            password_grant(&s, &f).await.json["refresh_token"]
                .as_str()
                .unwrap()
                .to_owned(),
        ));
    }
    // Admin changes through the running server's socket, all through the load.
    let dir = f.dir.clone();
    let admin_task = std::thread::spawn(move || {
        for i in 0..10 {
            admin(&dir, &["user", "add", &format!("racer{i}")], Some("pw"));
            add_client(&dir, &format!("racer{i}"), &[]);
            admin(&dir, &["client", "list"], None);
        }
        admin(&dir, &["keys", "rotate"], None);
    });
    let http = reqwest::Client::new();
    let mut revoked = [false; FAMILIES];
    for round in 0..ROUNDS {
        let mut round_tasks = Vec::new();
        for (family, token) in current.iter().enumerate() {
            let Some(token) = token.clone() else { continue };
            let requests: Vec<_> = (0..PER_FAMILY)
                .map(|_| {
                    http.post(s.token_url())
                        .basic_auth("app", Some(&f.secret))
                        .form(&[
                            ("grant_type", "refresh_token"),
                            ("refresh_token", token.as_str()),
                        ])
                        .send()
                })
                .collect();
            // Every third family has its family revoked during round `family / 3`, racing its refreshes.
            let revoke = (family % 3 == 0 && round == family / 3).then(|| {
                http.post(format!("{}/apiv2/oauth/revoke", s.url))
                    .basic_auth("app", Some(&f.secret))
                    .form(&[("token", token.as_str())])
                    .send()
            });
            round_tasks.push(tokio::spawn(async move {
                let revoke = async {
                    match revoke {
                        Some(r) => Some(r.await.unwrap().status()),
                        None => None,
                    }
                };
                let (answers, revoke_status) =
                    tokio::join!(futures_util::future::join_all(requests), revoke);
                let mut outcomes = Vec::new();
                for a in answers {
                    let a = answer(a.unwrap()).await;
                    assert!(!a.status.is_server_error(), "5xx: {}", a.json);
                    outcomes.push((
                        a.status.as_u16(),
                        a.json["refresh_token"].as_str().map(str::to_owned),
                    ));
                }
                (family, outcomes, revoke_status)
            }));
        }
        for t in round_tasks {
            let (family, outcomes, revoke_status) = t.await.unwrap();
            if let Some(status) = revoke_status {
                assert_eq!(status, 200);
                revoked[family] = true;
            }
            let successors: std::collections::HashSet<_> =
                outcomes.iter().filter_map(|(_, t)| t.clone()).collect();
            assert!(
                successors.len() <= 1,
                "round {round}, family {family} forked: {successors:?}"
            );
            if !revoked[family] {
                assert!(
                    outcomes.iter().all(|(s, _)| *s == 200),
                    "round {round}, family {family}: {outcomes:?}"
                );
            }
            current[family] = if revoked[family] {
                None
            } else {
                successors.into_iter().next()
            };
        }
    }
    admin_task.join().unwrap();
    // Revoked families stay revoked; every other family is alive and well.
    for (family, token) in current.iter().enumerate() {
        match token {
            Some(t) => assert_eq!(
                refresh(&s, &f, t).await.status,
                200,
                "family {family} was lost"
            ),
            None => assert!(revoked[family]),
        }
    }
    assert_eq!(revoked.iter().filter(|r| **r).count(), FAMILIES.div_ceil(3));
    // The admin changes took effect during the load.
    assert!(admin(&f.dir, &["client", "list"], None).contains("racer9"));
    assert!(admin(&f.dir, &["keys", "list"], None).contains("verifying"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bounded_guessing_attack_is_throttled_while_others_are_served() {
    let f = fixture();
    add_user(&f.dir, "victim", "victim-pw", &[]);
    for i in 0..30 {
        add_user(&f.dir, &format!("user{i}"), "secret-pw", &[]);
    }
    let s = Server::start(
        &f.dir,
        &["--trust-x-forwarded-for", "--login-backoff-base", "5"],
    );
    let http = reqwest::Client::new();
    let guess = |user: String, from: &'static str| {
        http.post(s.token_url())
            .basic_auth("app", Some(&f.secret))
            .header("x-forwarded-for", from)
            .form(&[
                ("grant_type", "password"),
                ("username", user.as_str()),
                ("password", "guess"),
            ])
            .send()
    };
    // 150 concurrent guesses at one user, and 60 at 30 users (credential stuffing), from one address.
    let mut attack: Vec<_> = (0..150)
        .map(|_| guess("victim".into(), "203.0.113.9"))
        .collect();
    attack.extend((0..60).map(|i| guess(format!("user{}", i % 30), "203.0.113.9")));
    let legit = async {
        let mut statuses = Vec::new();
        for _ in 0..5 {
            let a = post(
                &s.token_url(),
                f.app(),
                &[
                    ("grant_type", "password"),
                    ("username", "alice"),
                    ("password", "alice-pw"),
                ],
            )
            .await;
            statuses.push(a.status.as_u16());
            statuses.push(
                post(
                    &s.token_url(),
                    f.app(),
                    &[("grant_type", "client_credentials")],
                )
                .await
                .status
                .as_u16(),
            );
        }
        statuses
    };
    let (answers, legit) = tokio::join!(futures_util::future::join_all(attack), legit);
    let mut checked = 0;
    let mut throttled = 0;
    for a in answers {
        let a = answer(a.unwrap()).await;
        match a.status.as_u16() {
            400 => checked += 1,
            429 => {
                throttled += 1;
                assert!(a.headers.contains_key("retry-after"));
            }
            other => panic!("unexpected {other}: {}", a.json),
        }
    }
    eprintln!("attack: {checked} passwords checked, {throttled} refused with 429");
    // Only the free failures (5 per user, 20 per address) and a few racing them were checked.
    assert!(
        checked <= 40,
        "{checked} guesses reached the password check"
    );
    assert!(
        throttled >= 170,
        "only {throttled} of 210 guesses were throttled"
    );
    assert!(
        legit.iter().all(|s| *s == 200),
        "other users and clients were not served: {legit:?}"
    );
    // The victim's own correct password waits out the back-off, from the attacker's address too.
    let from_attacker = http
        .post(s.token_url())
        .basic_auth("app", Some(&f.secret))
        .header("x-forwarded-for", "203.0.113.9")
        .form(&[
            ("grant_type", "password"),
            ("username", "user0"),
            ("password", "secret-pw"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(from_attacker.status(), 429);
}
