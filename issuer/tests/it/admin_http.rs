//! The admin HTTP API through the real binary on loopback (`docs/admin-api.md`): the console's
//! sign-in, every route × role cell of the table, an audit event with before and after for every
//! mutating route, the refused tokens (401), bad input that changes nothing, and each kind of
//! refusal's status.

use super::*;
use issuer::http::admin::table::{Op, Role, Route, ROUTES};
use serde_json::json;
use shared::dpop::sign::{ProofClaims, ProofKey};
use std::io::{BufRead, BufReader};

mod directory;
mod lists;
mod refusals;
mod revoked_elsewhere;
mod statuses;

/// An issuer with `[admin_http]` on loopback, a trusted vendor, and a user per admin role.
struct Admin {
    _proc: Proc,
    main: String,
    url: String,
    dir: PathBuf,
    tmp: tempfile::TempDir,
    http: reqwest::Client,
    secrets: std::collections::HashMap<&'static str, String>,
}

const PW: &str = "admin-pw-1";

/// The user holding only `role` (`none`: no admin role).
fn user_of(role: Option<Role>) -> String {
    role.map_or("nobody".to_owned(), |r| r.name().replace(':', "-"))
}

fn start() -> Admin {
    start_with(60)
}

/// [`start`] with `token_max_age`.
fn start_with(token_max_age: u64) -> Admin {
    start_configured(token_max_age, "", |_| {})
}

/// [`start`] with `token_max_age`, `tables` (TOML) at the end of the configuration file, and
/// `fill` given the data dir before the issuer serves it.
fn start_configured(token_max_age: u64, tables: &str, fill: impl FnOnce(&Path)) -> Admin {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    let mut secrets = std::collections::HashMap::new();
    for id in ["app", "ops", "other"] {
        secrets.insert(id, add_client(&dir, id, &["--grants", "password"]));
    }
    admin(
        &dir,
        &["client", "add", "idle", "--grants", "client_credentials"],
        None,
    );
    for role in Role::ALL.map(Some).into_iter().chain([None]) {
        let extra: Vec<&str> = role.iter().flat_map(|r| ["--role", r.name()]).collect();
        add_user(&dir, &user_of(role), PW, &extra);
    }
    let mut all = vec![];
    for r in Role::ALL {
        all.extend(["--role", r.name()]);
    }
    add_user(&dir, "root", PW, &all);
    fill(&dir);
    let keys = tmp.path().join("acme-keys");
    let out = Command::new(BIN)
        .args([
            "vendor",
            "keygen",
            "--out",
            keys.to_str().unwrap(),
            "--alg",
            "EdDSA",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let config = format!(
        "data_dir = {:?}\nlisten = \"127.0.0.1:0\"\n[[vendor]]\nname = \"acme\"\nkeys = \"acme-keys/vendor-keys.json\"\n\
         [admin_http]\nlisten = \"127.0.0.1:0\"\nclients = [\"ops\"]\ntoken_max_age = {token_max_age}\n{tables}",
        dir.display().to_string()
    );
    serve(tmp, dir, &config, secrets)
}

/// `issuer serve` with the configuration file `config` (written in `tmp`; `dir` holds the
/// admin commands' store and the log), once it listens; `secrets` of its clients.
fn serve(
    tmp: tempfile::TempDir,
    dir: PathBuf,
    config: &str,
    secrets: std::collections::HashMap<&'static str, String>,
) -> Admin {
    let text = config;
    let config = tmp.path().join("issuer.toml");
    std::fs::write(&config, text).unwrap();
    // It may hold a database password: the issuer refuses it readable by others.
    std::fs::set_permissions(&config, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let mut command = Command::new(BIN);
    command
        .args(["serve", "--config", config.to_str().unwrap()])
        .env("RUST_LOG", "debug")
        .stdout(Stdio::piped())
        .stderr(Stdio::from(
            std::fs::File::create(dir.with_extension("log")).unwrap(),
        ));
    let mut child = command.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let proc = Proc::new(child, "issuer");
    let started = now();
    let log = dir.with_extension("log");
    let mut line = || {
        let read = lines.next().and_then(Result::ok);
        read.unwrap_or_else(|| panic!("{}", std::fs::read_to_string(&log).unwrap_or_default()))
    };
    let (main, admin_line) = (line(), line());
    // An embedded store refuses proofs that may predate its memory of used ones.
    let ready = started + shared::dpop::MAX_AHEAD_SECONDS + 1;
    while now() < ready {
        std::thread::sleep(Duration::from_millis(200));
    }
    Admin {
        _proc: proc,
        main: main.strip_prefix("listening on ").unwrap().to_owned(),
        url: admin_line
            .strip_prefix("admin listening on ")
            .unwrap()
            .to_owned(),
        dir,
        tmp,
        http: reqwest::Client::new(),
        secrets,
    }
}

/// A credential set of the vendor `acme` (`issuer vendor issue`) for "Acme Sync", of 30 days,
/// with `args` (its grants at least).
fn issue(s: &Admin, args: &[&str]) -> Value {
    let key = s.tmp.path().join("acme-keys/vendor-key.jwk");
    let out = Command::new(BIN)
        .args(["vendor", "issue", "--key", key.to_str().unwrap()])
        .args(["--name", "Acme Sync", "--expires", "30d"])
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A caller holding a token of `user` for `client` from the main listener, bound to a new key.
async fn bound_caller(s: &Admin, client: &str, user: &str) -> Caller {
    let key = key();
    let url = format!("{}/apiv2/oauth/token", s.main);
    let token = password_token(s, client, user, Some((&key, &url))).await;
    Caller { token, key }
}

/// A password grant of `user` for `client` at the main listener: bound when `dpop` gives the
/// key and the token URL.
async fn password_token(
    s: &Admin,
    client: &str,
    user: &str,
    dpop: Option<(&ProofKey, &str)>,
) -> String {
    let url = format!("{}/apiv2/oauth/token", s.main);
    let mut req = s
        .http
        .post(&url)
        .basic_auth(client, Some(&s.secrets[client]))
        .form(&[
            ("grant_type", "password"),
            ("username", user),
            ("password", PW),
        ]);
    if let Some((k, htu)) = dpop {
        req = req.header("dpop", proof(k, "POST", htu, None));
    }
    let a = answer(req.send().await.unwrap()).await;
    assert_eq!(a.status, 200, "{}", a.json);
    a.json["access_token"].as_str().unwrap().to_owned()
}

fn key() -> ProofKey {
    let mut seed = [0u8; 32];
    seed[..16].copy_from_slice(&rand_bytes());
    ProofKey::ed25519(seed)
}

fn rand_bytes() -> [u8; 16] {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let c = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) as u128;
    (n ^ (c << 64) ^ u128::from(std::process::id())).to_le_bytes()
}

fn proof(key: &ProofKey, htm: &str, htu: &str, token: Option<&str>) -> String {
    let jti = hex_of(&rand_bytes());
    key.proof(&ProofClaims {
        htm,
        htu,
        jti: &jti,
        iat: now(),
        access_token: token,
        nonce: None,
    })
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A caller: a bound token and its key.
struct Caller {
    token: String,
    key: ProofKey,
}

impl Admin {
    /// The console's sign-in of `user` (origin and proof as the console sends them).
    async fn sign_in_raw(
        &self,
        user: &str,
        pw: &str,
        origin: Option<&str>,
        key: Option<&ProofKey>,
    ) -> Answer {
        let url = format!("{}/apiv2/oauth/token", self.url);
        let mut req = self.http.post(&url).form(&[
            ("grant_type", "password"),
            ("client_id", "admin-console"),
            ("username", user),
            ("password", pw),
        ]);
        if let Some(o) = origin {
            req = req.header("origin", o);
        }
        if let Some(k) = key {
            req = req.header("dpop", proof(k, "POST", &url, None));
        }
        answer(req.send().await.unwrap()).await
    }

    async fn sign_in(&self, user: &str) -> Caller {
        self.sign_in_with(user, PW).await
    }

    /// [`Admin::sign_in`] with the password `pw`.
    async fn sign_in_with(&self, user: &str, pw: &str) -> Caller {
        let key = key();
        let a = self
            .sign_in_raw(user, pw, Some(&self.url), Some(&key))
            .await;
        assert_eq!(a.status, 200, "{user}: {}", a.json);
        Caller {
            token: a.json["access_token"].as_str().unwrap().to_owned(),
            key,
        }
    }

    /// `method path` as `caller`, with `body` (JSON) and `if_match`.
    async fn call(
        &self,
        caller: &Caller,
        method: &str,
        path: &str,
        body: Option<Value>,
        if_match: Option<&str>,
    ) -> Answer {
        let path_only = path.split('?').next().unwrap();
        let url = format!("{}{path}", self.url);
        let htu = format!("{}{path_only}", self.url);
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut req = self
            .http
            .request(m, &url)
            .header("authorization", format!("DPoP {}", caller.token))
            .header(
                "dpop",
                proof(&caller.key, method, &htu, Some(&caller.token)),
            );
        if let Some(b) = body {
            req = req.json(&b);
        }
        if let Some(t) = if_match {
            req = req.header("if-match", t);
        }
        let a = answer(req.send().await.unwrap()).await;
        assert_admin_headers(&a);
        a
    }

    async fn get(&self, caller: &Caller, path: &str) -> Value {
        let a = self.call(caller, "GET", path, None, None).await;
        assert_eq!(a.status, 200, "GET {path}: {}", a.json);
        a.json
    }

    /// The audit trail as the API gives it, newest first.
    async fn audit(&self, root: &Caller) -> Vec<Value> {
        self.get(root, "/apiv2/admin/audit?limit=500").await["items"]
            .as_array()
            .unwrap()
            .clone()
    }
}

fn assert_admin_headers(a: &Answer) {
    assert_eq!(a.headers["cache-control"], "no-store");
    assert_eq!(a.headers["x-content-type-options"], "nosniff");
    assert_eq!(a.headers["referrer-policy"], "no-referrer");
    let csp = a.headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert!(!a.headers.contains_key("set-cookie"));
}

/// `route`'s path with ids that exist.
fn path_of(r: &Route) -> String {
    r.path
        .replace("clients/{id}", "clients/idle")
        .replace("{name}", "nobody")
        .replace("{id}", "none")
}

#[tokio::test]
async fn every_route_and_role_answers_as_the_table_says() {
    let s = start();
    let mut callers = Vec::new();
    for role in Role::ALL.map(Some).into_iter().chain([None]) {
        callers.push((role, s.sign_in(&user_of(role)).await));
    }
    for r in ROUTES {
        for (role, caller) in &callers {
            let roles: Vec<Role> = role.iter().copied().collect();
            if r.op == Op::KeyRotate && r.allows(&roles) {
                // Allowed, it rotates: the audit test below does it.
                continue;
            }
            let body = (r.method == "POST").then(|| json!({}));
            let a = s.call(caller, r.method, &path_of(r), body, None).await;
            let cell = format!("{} as {:?}: {} {}", r.label(), role, a.status, a.json);
            if !r.allows(&roles) {
                assert_eq!(a.status, 403, "{cell}");
                assert_eq!(a.json["error"], "insufficient_scope", "{cell}");
            } else if r.method == "GET" {
                assert_eq!(a.status, 200, "{cell}");
            } else {
                // Allowed, then stopped before any write: no If-Match, or a bad body.
                assert!([400, 404, 428].contains(&a.status.as_u16()), "{cell}");
            }
        }
    }
    let me = s.get(&callers[0].1, "/apiv2/admin/me").await;
    assert_eq!(me["user"], "admin-clients");
    assert_eq!(me["client"], "admin-console");
    assert!(me["routes"]
        .as_array()
        .unwrap()
        .contains(&json!("POST /apiv2/admin/clients/{id}/activate")));
}

/// The event of `action` on `target` newest in `events`, by `user` through the console.
fn event<'e>(events: &'e [Value], action: &str, target: &str) -> Option<&'e Value> {
    events
        .iter()
        .find(|e| e["action"] == action && e["target"] == target)
}

#[tokio::test]
async fn every_mutating_route_writes_an_audit_event_with_before_and_after() {
    let s = start();
    let root = s.sign_in("root").await;
    let set = issue(&s, &["--grants", "password,client_credentials"]);
    let vendor_id = set["client_id"].as_str().unwrap().to_owned();
    let mut done = Vec::new();
    for r in ROUTES.iter().filter(|r| r.mutating) {
        let (action, target, status) = match r.op {
            Op::ClientImport => {
                let body = json!({"statement": set["software_statement"]});
                let a = s.call(&root, "POST", r.path, Some(body), None).await;
                assert_eq!(a.json["item"]["state"], "pending", "{}", a.json);
                ("client.import", vendor_id.clone(), a.status)
            }
            Op::ClientActivate => {
                let path = format!("/apiv2/admin/clients/{vendor_id}");
                let tag = s.get(&root, &path).await["etag"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                let body = json!({"grants": ["password", "client_credentials"]});
                let a = s
                    .call(
                        &root,
                        "POST",
                        &format!("{path}/activate"),
                        Some(body),
                        Some(&tag),
                    )
                    .await;
                assert_eq!(a.json["item"]["state"], "active", "{}", a.json);
                ("client.activate", vendor_id.clone(), a.status)
            }
            Op::ClientNarrow => {
                let path = format!("/apiv2/admin/clients/{vendor_id}");
                let tag = s.get(&root, &path).await["etag"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                let body = json!({"grants": ["client_credentials"]});
                let a = s
                    .call(
                        &root,
                        "POST",
                        &format!("{path}/narrow"),
                        Some(body),
                        Some(&tag),
                    )
                    .await;
                assert_eq!(
                    a.json["item"]["grants"],
                    json!(["client_credentials"]),
                    "{}",
                    a.json
                );
                ("client.update", vendor_id.clone(), a.status)
            }
            Op::ClientDeactivate => {
                let tag = s.get(&root, "/apiv2/admin/clients/app").await["etag"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                let a = s
                    .call(
                        &root,
                        "POST",
                        "/apiv2/admin/clients/app/deactivate",
                        Some(json!({})),
                        Some(&tag),
                    )
                    .await;
                assert_eq!(a.json["item"]["state"], "inactive", "{}", a.json);
                ("client.deactivate", "app".to_owned(), a.status)
            }
            Op::UserDisable | Op::UserEnable => {
                let verb = if r.op == Op::UserDisable {
                    "disable"
                } else {
                    "enable"
                };
                let users = s.get(&root, "/apiv2/admin/users?q=nobody").await;
                let tag = users["items"][0]["etag"].as_str().unwrap().to_owned();
                let path = format!("/apiv2/admin/users/nobody/{verb}");
                let a = s
                    .call(&root, "POST", &path, Some(json!({})), Some(&tag))
                    .await;
                (
                    if verb == "disable" {
                        "user.disable"
                    } else {
                        "user.enable"
                    },
                    "nobody".to_owned(),
                    a.status,
                )
            }
            Op::KeyRotate => {
                let a = s.call(&root, "POST", r.path, Some(json!({})), None).await;
                ("keys.publish", "keys".to_owned(), a.status)
            }
            Op::SessionRevoke => {
                let (id, status) = revoke_a_session(&s, &root).await;
                ("session.revoke", id, status)
            }
            other => panic!("a mutating route this test does not know: {other:?}"),
        };
        assert!(status.is_success(), "{}: {status}", r.label());
        let events = s.audit(&root).await;
        let e = event(&events, action, &target).unwrap_or_else(|| {
            panic!(
                "{}: no audit event {action} {target}: {events:?}",
                r.label()
            )
        });
        assert_eq!(e["actor"], "root", "{e}");
        assert_eq!(e["client"], "admin-console", "{e}");
        assert_eq!(e["address"], "127.0.0.1", "{e}");
        assert!(!e["before"].is_null() || r.op == Op::ClientImport, "{e}");
        assert!(!e["after"].is_null(), "{e}");
        done.push(r.op);
    }
    assert_eq!(done.len(), ROUTES.iter().filter(|r| r.mutating).count());
}

/// A password grant at the main listener: its access and refresh tokens.
async fn tokens_of(s: &Admin, client: &str, user: &str) -> (String, String) {
    let a = answer(
        s.http
            .post(format!("{}/apiv2/oauth/token", s.main))
            .basic_auth(client, Some(&s.secrets[client]))
            .form(&[
                ("grant_type", "password"),
                ("username", user),
                ("password", PW),
            ])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.json);
    let token = |name: &str| a.json[name].as_str().unwrap().to_owned();
    (token("access_token"), token("refresh_token"))
}

/// Starts two sessions of `admin-audit`, revokes one through the API (after a stale `If-Match`
/// refused), and checks what it did: gone from the list, its refresh token refused, the other
/// session untouched, a second revocation a conflict. Its id and the revocation's status.
async fn revoke_a_session(s: &Admin, root: &Caller) -> (String, reqwest::StatusCode) {
    let (at, rt) = tokens_of(s, "other", "admin-audit").await;
    let (kept_at, kept) = tokens_of(s, "ops", "admin-audit").await;
    let list = s.get(root, "/apiv2/admin/sessions?user=admin-audit").await;
    let items = list["items"].as_array().unwrap();
    assert_eq!(items.len(), 2, "{list}");
    // By page: the cursor of the first leads to the second, the last says there is no more.
    let one = s
        .get(root, "/apiv2/admin/sessions?user=admin-audit&limit=1")
        .await;
    let next = one["next"].as_str().unwrap();
    let two = s
        .get(
            root,
            &format!("/apiv2/admin/sessions?user=admin-audit&limit=1&after={next}"),
        )
        .await;
    assert_eq!([&one["items"][0], &two["items"][0]], [&items[0], &items[1]]);
    assert!(two["next"].is_null(), "{two}");
    let item = items
        .iter()
        .find(|i| i["client"] == "other")
        .unwrap()
        .clone();
    assert_eq!(item["user"], "admin-audit", "{item}");
    assert_eq!(item["last_used"], item["created"], "{item}");
    let id = item["id"].as_str().unwrap().to_owned();
    let path = format!("/apiv2/admin/sessions/{id}/revoke");
    let stale = s
        .call(root, "POST", &path, Some(json!({})), Some("\"0\""))
        .await;
    assert_eq!(stale.status, 412, "{}", stale.json);
    let tag = item["etag"].as_str().unwrap();
    let a = s
        .call(root, "POST", &path, Some(json!({})), Some(tag))
        .await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert!(a.json["item"]["revoked_at"].is_u64(), "{}", a.json);
    let again = a.json["item"]["etag"].as_str().unwrap();
    let twice = s
        .call(root, "POST", &path, Some(json!({})), Some(again))
        .await;
    assert_eq!(twice.status, 409, "{}", twice.json);
    assert_eq!(twice.json["error"], "conflict");
    let list = s.get(root, "/apiv2/admin/sessions?user=admin-audit").await;
    assert_eq!(list["items"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["items"][0]["client"], "ops", "{list}");
    // Its access token with it; the other session's stays active.
    for (client, token, active) in [("other", &at, false), ("ops", &kept_at, true)] {
        let i = post(
            &format!("{}/apiv2/oauth/introspect", s.main),
            Some((client, &s.secrets[client])),
            &[("token", token)],
        )
        .await;
        assert_eq!(i.json["active"], active, "{client}: {}", i.json);
    }
    for (client, token, status) in [("other", &rt, 400), ("ops", &kept, 200)] {
        let a = answer(
            s.http
                .post(format!("{}/apiv2/oauth/token", s.main))
                .basic_auth(client, Some(&s.secrets[client]))
                .form(&[("grant_type", "refresh_token"), ("refresh_token", token)])
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(a.status, status, "{client}: {}", a.json);
    }
    (id, a.status)
}
