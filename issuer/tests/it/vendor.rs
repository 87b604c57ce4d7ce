//! Client credential sets issued by a vendor (docs/clients.md), through the real binary: the
//! vendor's key and sets (`issuer vendor`), the installation's trust (`[[vendor]]`), import,
//! pending, activation narrowed, a rotated secret, a revocation list, and hostile statements.

use super::vendor_life::alice_signs_in;
use super::*;
use std::os::unix::fs::PermissionsExt as _;

/// The vendor's side and the installation's configuration, in one temp dir.
pub(super) struct Vendor {
    pub(super) tmp: PathBuf,
    pub(super) key: PathBuf,
    pub(super) config: PathBuf,
}

/// Runs `issuer ARGS` with no data dir; panics unless it succeeds. Returns stdout.
pub(super) fn issuer(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "issuer {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub(super) fn keygen(out: &Path, alg: &str) -> PathBuf {
    let text = issuer(&[
        "vendor",
        "keygen",
        "--out",
        out.to_str().unwrap(),
        "--alg",
        alg,
    ]);
    assert!(text.contains("kid: "), "{text}");
    out.join("vendor-key.jwk")
}

impl Vendor {
    pub(super) fn new(tmp: &Path) -> Self {
        let key = keygen(&tmp.join("acme-keys"), "EdDSA");
        let config = tmp.join("installation.toml");
        std::fs::write(
            &config,
            "[[vendor]]\nname = \"acme\"\nkeys = \"acme-keys/vendor-keys.json\"\n",
        )
        .unwrap();
        Self {
            tmp: tmp.to_owned(),
            key,
            config,
        }
    }

    /// A credential set of `extra` (`--grants` and the rest) as JSON.
    pub(super) fn issue(&self, key: &Path, extra: &[&str]) -> Value {
        let mut args = vec![
            "vendor",
            "issue",
            "--key",
            key.to_str().unwrap(),
            "--name",
            "Acme Uploader",
        ];
        if !extra.contains(&"--expires") {
            args.extend_from_slice(&["--expires", "30d"]);
        }
        args.extend_from_slice(extra);
        serde_json::from_str(&issuer(&args)).unwrap()
    }

    /// Writes `text` to a new file of the temp dir; its path.
    pub(super) fn file(&self, name: &str, text: &str) -> String {
        let path = self.tmp.join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    }

    /// `issuer client import FILE --config …` on `dir`.
    pub(super) fn import(&self, dir: &Path, file: &str) -> std::process::Output {
        let config = self.config.to_str().unwrap();
        admin_output(dir, &["client", "import", file, "--config", config], None)
    }
}

pub(super) fn stdout_of(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(super) async fn client_credentials(s: &Server, id: &str, secret: &str) -> Answer {
    post(
        &s.token_url(),
        Some((id, secret)),
        &[("grant_type", "client_credentials")],
    )
    .await
}

#[test]
fn the_vendor_commands_open_no_data_dir_and_keep_the_key_private() {
    let tmp = tempfile::tempdir().unwrap();
    let key = keygen(&tmp.path().join("k"), "ES256");
    let mode = std::fs::metadata(&key).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    let set: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("k/vendor-keys.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(set["keys"][0]["alg"], "ES256");
    assert!(set["keys"][0].get("d").is_none(), "{set}");
    let again = Command::new(BIN)
        .args(["vendor", "keygen", "--out"])
        .arg(tmp.path().join("k"))
        .output()
        .unwrap();
    assert!(!again.status.success(), "a key is never written over");
    let v = Vendor {
        tmp: tmp.path().to_owned(),
        key,
        config: PathBuf::new(),
    };
    let set = v.issue(
        &v.key,
        &[
            "--grants",
            "password,refresh_token",
            "--impersonation",
            "legacy",
        ],
    );
    assert!(set["client_secret"].as_str().unwrap().len() >= 22);
    assert!(set["client_id"]
        .as_str()
        .unwrap()
        .starts_with("acme-uploader-"));
    let statement = set["software_statement"].as_str().unwrap();
    assert!(!statement.contains(set["client_secret"].as_str().unwrap()));
    let list = issuer(&[
        "vendor",
        "revoke",
        "--key",
        v.key.to_str().unwrap(),
        "a",
        "b",
    ]);
    assert_eq!(list.trim().split('.').count(), 3);
    let entries: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert_eq!(entries.len(), 1, "only the key's folder was made");
    let bad = Command::new(BIN)
        .args(["vendor", "issue", "--key"])
        .arg(&v.key)
        .args(["--name", "x", "--grants", "implicit", "--expires", "2d"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown grant"));
}

#[tokio::test]
async fn an_imported_set_is_pending_until_activated_narrowed() {
    let f = fixture();
    let v = Vendor::new(f._tmp.path());
    let set = v.issue(
        &v.key,
        &[
            "--grants",
            "password,refresh_token,client_credentials",
            "--impersonation",
            "claims",
        ],
    );
    let (id, secret) = (
        set["client_id"].as_str().unwrap(),
        set["client_secret"].as_str().unwrap(),
    );
    let s = Server::start(&f.dir, &[]);
    let file = v.file("statement.jws", set["software_statement"].as_str().unwrap());
    let out = stdout_of(&v.import(&f.dir, &file));
    assert!(out.contains("pending"), "{out}");
    let again = stdout_of(&v.import(&f.dir, &file));
    assert!(again.contains("held already"), "{again}");

    let pending = admin(&f.dir, &["client", "list", "--pending"], None);
    assert!(
        pending.contains(id) && pending.contains("acme"),
        "{pending}"
    );
    assert!(
        pending.contains("Acme Uploader") && pending.contains("claims"),
        "{pending}"
    );
    assert!(!pending.contains("app "), "{pending}");

    let a = client_credentials(&s, id, secret).await;
    assert_error(&a, 400, "unauthorized_client");
    assert!(a.json["error_description"]
        .as_str()
        .unwrap()
        .contains("awaits activation"));
    assert_error(
        &client_credentials(&s, id, "mmcs1.wrong").await,
        401,
        "invalid_client",
    );

    let wide = admin_output(
        &f.dir,
        &[
            "client",
            "activate",
            id,
            "--grants",
            "password,client_credentials",
        ],
        None,
    );
    assert!(wide.status.success(), "within the statement");
    admin(&f.dir, &["client", "deactivate", id], None);
    admin(
        &f.dir,
        &[
            "client",
            "activate",
            id,
            "--grants",
            "client_credentials",
            "--no-impersonation",
        ],
        None,
    );
    let a = client_credentials(&s, id, secret).await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert_error(
        &alice_signs_in(&s, id, secret).await,
        400,
        "unauthorized_client",
    );
    let a = post(
        &s.token_url(),
        Some((id, secret)),
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_claims", "upn=a@b"),
        ],
    )
    .await;
    assert_error(&a, 400, "unauthorized_client");

    // A set allowing client_credentials only is never widened by activation.
    let narrow = v.issue(&v.key, &["--grants", "client_credentials"]);
    let file = v.file("narrow.jws", narrow["software_statement"].as_str().unwrap());
    stdout_of(&v.import(&f.dir, &file));
    let nid = narrow["client_id"].as_str().unwrap();
    let widened = admin_output(
        &f.dir,
        &["client", "activate", nid, "--grants", "password"],
        None,
    );
    assert!(!widened.status.success());
    assert!(String::from_utf8_lossy(&widened.stderr).contains("never widens"));

    // `issuer apply` neither widens a vendor's client nor prunes it.
    let wider = v.file(
        "wider.toml",
        &format!("[[client]]\nid = \"{nid}\"\ngrants = [\"password\"]\nactive = false\n"),
    );
    let out = admin_output(&f.dir, &["apply", &wider], None);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("never widens"),
        "{out:?}"
    );
    let only_app = v.file(
        "app.toml",
        "[[client]]\nid = \"app\"\ngrants = [\"password\", \"client_credentials\"]\nimpersonate = true\n",
    );
    stdout_of(&admin_output(
        &f.dir,
        &["apply", &only_app, "--prune"],
        None,
    ));
    let list = admin(&f.dir, &["client", "list"], None);
    assert!(list.contains(id) && list.contains(nid), "{list}");
}

#[tokio::test]
async fn a_rotated_secret_overlaps_and_a_revocation_list_ends_the_client() {
    let f = fixture();
    let v = Vendor::new(f._tmp.path());
    let first = v.issue(&v.key, &["--grants", "client_credentials"]);
    let id = first["client_id"].as_str().unwrap();
    let s = Server::start(&f.dir, &[]);
    let file = v.file("first.jws", first["software_statement"].as_str().unwrap());
    stdout_of(&v.import(&f.dir, &file));
    admin(&f.dir, &["client", "activate", id], None);
    std::thread::sleep(Duration::from_millis(1100));
    let second = v.issue(
        &v.key,
        &["--grants", "client_credentials", "--client-id", id],
    );
    let file = v.file("second.jws", second["software_statement"].as_str().unwrap());
    let out = stdout_of(&v.import(&f.dir, &file));
    assert!(out.contains("newer statement"), "{out}");
    for set in [&first, &second] {
        let a = client_credentials(&s, id, set["client_secret"].as_str().unwrap()).await;
        assert_eq!(a.status, 200, "{}", a.json);
    }

    let list = issuer(&["vendor", "revoke", "--key", v.key.to_str().unwrap(), id]);
    let file = v.file("revoked.jws", &list);
    let out = stdout_of(&v.import(&f.dir, &file));
    assert!(out.contains("revoked by its vendor"), "{out}");
    let secret = second["client_secret"].as_str().unwrap();
    assert_error(
        &client_credentials(&s, id, secret).await,
        401,
        "invalid_client",
    );
    let again = v.import(
        &f.dir,
        &v.file("again.jws", second["software_statement"].as_str().unwrap()),
    );
    assert!(String::from_utf8_lossy(&again.stderr).contains("unapproved_software_statement"));
    let trail = admin(&f.dir, &["audit"], None);
    for action in [
        "client.import",
        "client.activate",
        "client.vendor_revoke",
        "client.refused",
    ] {
        assert!(trail.contains(action), "{action}: {trail}");
    }
}

#[test]
fn hostile_statements_are_refused_audited_and_change_nothing() {
    let f = fixture();
    let v = Vendor::new(f._tmp.path());
    let other = keygen(&f._tmp.path().join("mallory-keys"), "EdDSA");
    let before = admin(&f.dir, &["client", "list", "--json"], None);
    let untrusted = v.issue(&other, &["--grants", "client_credentials"]);
    let good = v.issue(&v.key, &["--grants", "client_credentials"]);
    let jws = good["software_statement"].as_str().unwrap();
    let mut parts: Vec<&str> = jws.split('.').collect();
    let forged_claims = untrusted["software_statement"]
        .as_str()
        .unwrap()
        .split('.')
        .nth(1)
        .unwrap();
    parts[1] = forged_claims;
    let taken = v.issue(
        &v.key,
        &["--grants", "client_credentials", "--client-id", "app"],
    );
    let cases = [
        (
            untrusted["software_statement"].as_str().unwrap().to_owned(),
            "unapproved_software_statement",
        ),
        (parts.join("."), "invalid_software_statement"),
        (
            taken["software_statement"].as_str().unwrap().to_owned(),
            "unapproved_software_statement",
        ),
        ("x".repeat(70_000), "invalid_software_statement"),
        (
            "eyJhbGciOiJub25lIn0.e30.".to_owned(),
            "invalid_software_statement",
        ),
    ];
    for (n, (text, error)) in cases.iter().enumerate() {
        let out = v.import(&f.dir, &v.file(&format!("hostile{n}.jws"), text));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(error),
            "{n}: {stderr}"
        );
    }
    assert_eq!(admin(&f.dir, &["client", "list", "--json"], None), before);
    let trail = admin(&f.dir, &["audit"], None);
    assert_eq!(
        trail.matches("client.refused").count(),
        cases.len(),
        "{trail}"
    );

    // A key set holding the private key is refused whole, naming the vendor.
    let leaked = std::fs::read_to_string(&v.key).unwrap();
    std::fs::write(
        f._tmp.path().join("acme-keys/vendor-keys.json"),
        format!("{{\"keys\":[{leaked}]}}"),
    )
    .unwrap();
    let out = v.import(&f.dir, &v.file("good.jws", jws));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("\"acme\"") && stderr.contains("private"),
        "{stderr}"
    );
}

async fn register(s: &Server, body: &str) -> Answer {
    let resp = reqwest::Client::new()
        .post(format!("{}/apiv2/oauth/register", s.url))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    answer(resp).await
}

fn registration_of(set: &Value) -> String {
    json_body(set["software_statement"].as_str().unwrap())
}

fn json_body(statement: &str) -> String {
    serde_json::json!({ "software_statement": statement }).to_string()
}

#[tokio::test]
async fn clients_register_themselves_pending_when_registration_is_on() {
    let f = fixture();
    let v = Vendor::new(f._tmp.path());
    let set = v.issue(&v.key, &["--grants", "client_credentials"]);
    let off = Server::start(&f.dir, &["--config", v.config.to_str().unwrap()]);
    let a = register(&off, &registration_of(&set)).await;
    assert_eq!(a.status, 404, "off unless registration = true: {}", a.json);
    drop(off);

    let mut text = std::fs::read_to_string(&v.config).unwrap();
    text.insert_str(0, "registration = true\n");
    std::fs::write(&v.config, &text).unwrap();
    let s = Server::start(&f.dir, &["--config", v.config.to_str().unwrap()]);
    let metadata: Value = reqwest::get(format!("{}/.well-known/oauth-authorization-server", s.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(metadata["registration_endpoint"]
        .as_str()
        .unwrap()
        .ends_with("/apiv2/oauth/register"));
    let id = set["client_id"].as_str().unwrap();
    for _ in 0..2 {
        let a = register(&s, &registration_of(&set)).await;
        assert_eq!(a.status, 201, "{}", a.json);
        assert_oauth_headers(&a);
        assert_eq!(
            (a.json["client_id"].as_str(), a.json["status"].as_str()),
            (Some(id), Some("pending"))
        );
        assert_eq!(
            a.json["grant_types"],
            serde_json::json!(["client_credentials"])
        );
    }
    let secret = set["client_secret"].as_str().unwrap();
    let a = client_credentials(&s, id, secret).await;
    assert_error(&a, 400, "unauthorized_client");
    admin(&f.dir, &["client", "activate", id], None);
    assert_eq!(client_credentials(&s, id, secret).await.status, 200);

    // Refusals: RFC 7591 bodies, nothing stored.
    let other = keygen(&f._tmp.path().join("mallory-keys"), "EdDSA");
    let untrusted = v.issue(&other, &["--grants", "client_credentials"]);
    let a = register(&s, &registration_of(&untrusted)).await;
    assert_error(&a, 400, "unapproved_software_statement");
    let a = register(&s, &json_body("eyJhbGciOiJIUzI1NiJ9.e30.c2ln")).await;
    assert_error(&a, 400, "invalid_software_statement");
    let a = register(&s, "{}").await;
    assert_error(&a, 400, "invalid_software_statement");
    let list = admin(&f.dir, &["client", "list", "--json"], None);
    assert!(
        !list.contains(untrusted["client_id"].as_str().unwrap()),
        "{list}"
    );

    // SIGHUP: the vendor no longer trusted.
    std::fs::write(&v.config, "registration = true\n").unwrap();
    let log = f.dir.with_extension("log");
    crate::reload::hup_and_wait(s.proc.as_ref().unwrap(), &log, "reload done", 1);
    let fresh = v.issue(&v.key, &["--grants", "client_credentials"]);
    let a = register(&s, &registration_of(&fresh)).await;
    assert_error(&a, 400, "unapproved_software_statement");

    // A flood from one address: 429 within the minute's budget.
    let mut statuses = Vec::new();
    for _ in 0..12 {
        statuses.push(register(&s, "{}").await.status.as_u16());
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    let trail = admin(&f.dir, &["audit"], None);
    assert!(trail.contains("registration from 127.0.0.1"), "{trail}");
}

/// Imports vendor `acme`'s client `acme-1` into `store` at `t`, its statement expiring at
/// `t + 100`, and activates it.
pub(crate) async fn an_active_vendor_client(store: &dyn issuer::store::Store, t: u64) {
    use issuer::admin::{execute, VendorImport};
    use issuer::vendor::{Impersonation, Statement, VendorGrant, Verified};
    let statement = Statement {
        client_id: "acme-1".into(),
        client_name: "Acme".into(),
        software_id: "acme".into(),
        client_secret_hash: issuer::passwords::hash_password("mmcs1.secret-of-acme"),
        grant_types: vec![VendorGrant::ClientCredentials],
        impersonation: Impersonation::None,
        iat: t,
        exp: t + 100,
    };
    let verified = Verified {
        vendor: "acme".into(),
        kid: "k".into(),
        statement,
    };
    let import = VendorImport::of(verified, "statement text");
    execute(store, &issuer::admin::Command::ClientImport(import), t)
        .await
        .unwrap();
    let activate = issuer::admin::Command::ClientActivate {
        id: "acme-1".into(),
        grants: None,
        no_impersonation: false,
    };
    execute(store, &activate, t).await.unwrap();
}

#[tokio::test]
async fn an_expired_statement_deactivates_its_client_and_revokes_its_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let app = socketless_app(tmp.path(), Default::default()).await;
    let t = now();
    let store = app.store.as_ref();
    an_active_vendor_client(store, t).await;
    assert_eq!(app.expire_vendor_clients(t + 99).await.unwrap(), 0);
    assert_eq!(app.expire_vendor_clients(t + 100).await.unwrap(), 1);
    let rec = store.client("acme-1").await.unwrap().unwrap();
    assert!(!rec.active && rec.deactivated_at == Some(t + 100));
    let revoked = store.revocations(0, t + 100, usize::MAX).await.unwrap();
    assert!(revoked.entries.iter().any(|r| r.what
        == issuer::store::revocation::Revoked::Client {
            id: "acme-1".into()
        }));
    let trail = store.audit_since(0, 100).await.unwrap();
    assert!(trail
        .iter()
        .any(|e| e.actor == "statement expiry" && e.target == "acme-1"));
    assert_eq!(app.expire_vendor_clients(t + 200).await.unwrap(), 0, "once");
}

#[tokio::test]
async fn a_watched_revocation_file_deactivates_its_vendors_clients_at_sighup() {
    let f = fixture();
    let v = Vendor::new(f._tmp.path());
    let mut text = std::fs::read_to_string(&v.config).unwrap();
    text.push_str("revocations = \"acme-revoked.jws\"\n");
    std::fs::write(&v.config, &text).unwrap();
    let set = v.issue(&v.key, &["--grants", "client_credentials"]);
    let id = set["client_id"].as_str().unwrap();
    let secret = set["client_secret"].as_str().unwrap();
    let s = Server::start(&f.dir, &["--config", v.config.to_str().unwrap()]);
    stdout_of(&v.import(
        &f.dir,
        &v.file("set.jws", set["software_statement"].as_str().unwrap()),
    ));
    admin(&f.dir, &["client", "activate", id], None);
    assert_eq!(client_credentials(&s, id, secret).await.status, 200);

    // Another vendor's list in the file: refused, audited, nothing changes.
    let other = keygen(&f._tmp.path().join("mallory-keys"), "EdDSA");
    let forged = issuer(&["vendor", "revoke", "--key", other.to_str().unwrap(), id]);
    v.file("acme-revoked.jws", &forged);
    let log = f.dir.with_extension("log");
    crate::reload::hup_and_wait(s.proc.as_ref().unwrap(), &log, "revocation file read", 1);
    assert_eq!(client_credentials(&s, id, secret).await.status, 200);

    let list = issuer(&["vendor", "revoke", "--key", v.key.to_str().unwrap(), id]);
    v.file("acme-revoked.jws", &list);
    crate::reload::hup_and_wait(s.proc.as_ref().unwrap(), &log, "revocation file read", 2);
    assert_error(
        &client_credentials(&s, id, secret).await,
        401,
        "invalid_client",
    );
    let trail = admin(&f.dir, &["audit"], None);
    assert!(
        trail.contains("revocation file") && trail.contains("client.vendor_revoke"),
        "{trail}"
    );
}
