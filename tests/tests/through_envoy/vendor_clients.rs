//! Client credential sets issued by a vendor (docs/clients.md), through the real Envoy and both
//! filters, in one scenario: the vendor's key and sets, one client registered by itself and one
//! imported, both pending and refused, activated (narrowed), their tokens accepted at the edge,
//! a secret rotated across the overlap, a statement expired, and a revocation list imported,
//! the tokens of the clients it ends refused at every Envoy worker.

use crate::edge::{access, call, refused_everywhere, token_request, wait_for_sync};
use e2e::{unix_now, Options, Stack, Tools};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Seconds the imported client's statement lives: long enough for its steps on a loaded
/// machine, short enough that the test waits little for it to expire.
const SHORT_LIFE: u64 = 20;

/// The vendor's side: its private key and the issuer binary it runs (with no data dir).
struct Vendor {
    issuer: PathBuf,
    key: PathBuf,
    dir: PathBuf,
}

impl Vendor {
    /// Makes the vendor's key in `dir` (`issuer vendor keygen`).
    fn keygen(tools: &Tools, dir: &Path) -> Self {
        let v = Self {
            issuer: tools.issuer.clone(),
            key: dir.join("acme-keys/vendor-key.jwk"),
            dir: dir.to_owned(),
        };
        let out = v.run(&["vendor", "keygen", "--out", path(&dir.join("acme-keys"))]);
        assert!(out.contains("kid: "), "{out}");
        v
    }

    /// Runs `issuer ARGS` as the vendor; its stdout.
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new(&self.issuer).args(args).output().unwrap();
        assert!(
            out.status.success(),
            "issuer {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A credential set (`issuer vendor issue`) with `extra` arguments.
    fn issue(&self, name: &str, extra: &[&str]) -> Set {
        let key = path(&self.key);
        let mut args = vec!["vendor", "issue", "--key", key, "--name", name];
        args.extend_from_slice(extra);
        let v: Value = serde_json::from_str(&self.run(&args)).unwrap();
        let text = |k: &str| v[k].as_str().unwrap().to_owned();
        Set {
            id: text("client_id"),
            secret: text("client_secret"),
            statement: text("software_statement"),
        }
    }

    /// Writes `text` to the file `name` of the vendor's folder; its path.
    fn file(&self, name: &str, text: &str) -> String {
        let file = self.dir.join(name);
        std::fs::write(&file, text).unwrap();
        path(&file).to_owned()
    }
}

struct Set {
    id: String,
    secret: String,
    statement: String,
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `secs` as RFC 3339, UTC (`--expires`).
fn rfc3339(secs: u64) -> String {
    let out = Command::new("date")
        .args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A client credentials request through Envoy: the status and the answer.
async fn cc(s: &Stack, id: &str, secret: &str) -> (u16, Value) {
    token_request(s, (id, secret), &[("grant_type", "client_credentials")]).await
}

/// A token of `set`'s client through Envoy, accepted by the filter.
async fn accepted_token(s: &Stack, id: &str, secret: &str) -> String {
    let (status, v) = cc(s, id, secret).await;
    assert_eq!(status, 200, "{id}: {v}");
    let token = access(&v);
    for _ in 0..4 {
        assert_eq!(call(s, &token).await.0, 200, "{id}: refused at the edge");
    }
    token
}

/// Pending: the right secret gets `400 unauthorized_client` saying so, a wrong one `401
/// invalid_client` with no hint.
async fn refused_while_pending(s: &Stack, set: &Set) {
    let (status, v) = cc(s, &set.id, &set.secret).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("unauthorized_client")),
        "{v}"
    );
    let why = v["error_description"].as_str().unwrap();
    assert!(why.contains("awaits activation"), "{v}");
    let (status, v) = cc(s, &set.id, "mmcs1.not-the-secret").await;
    assert_eq!(
        (status, v["error"].as_str()),
        (401, Some("invalid_client")),
        "{v}"
    );
    assert!(!v.to_string().contains("activation"), "no hint: {v}");
}

/// `POST /apiv2/oauth/register` through Envoy: the status and the answer.
async fn register(s: &Stack, statement: &str) -> (u16, Value) {
    let r = s
        .client()
        .post(format!("{}/apiv2/oauth/register", s.url()))
        .json(&serde_json::json!({ "software_statement": statement }))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// The stack: edge sync on, the installation trusting the vendor whose key `keygen` makes in
/// the stack's folder, registration on.
async fn vendor_stack() -> (tempfile::TempDir, Stack, Vendor, String) {
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let vendor = Vendor::keygen(&tools, tmp.path());
    let config = tmp.path().join("installation.toml");
    std::fs::write(
        &config,
        "registration = true\n\n[[vendor]]\nname = \"acme\"\nkeys = \"acme-keys/vendor-keys.json\"\n",
    )
    .unwrap();
    let config = path(&config).to_owned();
    let opts = Options {
        edge_sync: true,
        issuer_args: vec!["--config".into(), config.clone()],
        ..Options::default()
    };
    let s = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    wait_for_sync(&s).await;
    (tmp, s, vendor, config)
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn vendor_clients_from_issue_to_revocation_through_envoy() {
    let (_tmp, s, vendor, config) = vendor_stack().await;
    let import = |file: &str| {
        s.admin(&["client", "import", file, "--config", &config], None)
            .unwrap()
    };
    let grants = ["--grants", "password,refresh_token,client_credentials"];
    let mut wide = grants.to_vec();
    wide.extend_from_slice(&["--impersonation", "claims", "--expires", "30d"]);
    let uploader = vendor.issue("Acme Uploader", &wide);
    let exp = unix_now() + SHORT_LIFE;
    let short = ["--grants", "client_credentials", "--expires", &rfc3339(exp)];
    let viewer = vendor.issue("Acme Viewer", &short);

    // The uploader registers itself; the viewer's statement is imported. Both pending.
    for _ in 0..2 {
        let (status, v) = register(&s, &uploader.statement).await;
        assert_eq!(status, 201, "{v}");
        assert_eq!(v["client_id"], uploader.id.as_str(), "{v}");
        assert_eq!(v["status"], "pending", "{v}");
    }
    let out = import(&vendor.file("viewer.jws", &viewer.statement));
    assert!(out.contains("pending"), "{out}");
    let pending = s.admin(&["client", "list", "--pending"], None).unwrap();
    assert!(
        pending.contains(&uploader.id) && pending.contains(&viewer.id),
        "{pending}"
    );
    refused_while_pending(&s, &uploader).await;
    refused_while_pending(&s, &viewer).await;

    // Activated, the uploader narrowed to client_credentials without impersonation.
    let narrow = ["--grants", "client_credentials", "--no-impersonation"];
    let mut activate = vec!["client", "activate", uploader.id.as_str()];
    activate.extend_from_slice(&narrow);
    s.admin(&activate, None).unwrap();
    s.admin(&["client", "activate", &viewer.id], None).unwrap();
    let viewer_token = accepted_token(&s, &viewer.id, &viewer.secret).await;
    assert!(
        unix_now() < exp,
        "the viewer's statement expired before it was used"
    );
    let uploader_token = accepted_token(&s, &uploader.id, &uploader.secret).await;
    let form = [
        ("grant_type", "password"),
        ("username", e2e::demo::USER),
        ("password", e2e::demo::PASSWORD),
    ];
    let (status, v) = token_request(&s, (&uploader.id, &uploader.secret), &form).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (400, Some("unauthorized_client")),
        "narrowed: {v}"
    );

    // A rotated secret: a newer statement for the same client id, registered; both secrets work.
    e2e::wait::next_second().await;
    let mut again = grants.to_vec();
    again.extend_from_slice(&["--expires", "30d", "--client-id", &uploader.id]);
    let rotated = vendor.issue("Acme Uploader", &again);
    assert_eq!(register(&s, &rotated.statement).await.0, 201);
    let rotated_token = accepted_token(&s, &uploader.id, &rotated.secret).await;
    let first_token = accepted_token(&s, &uploader.id, &uploader.secret).await;

    // The viewer's statement expires: from then on its secret is refused, and its tokens too,
    // at every worker.
    e2e::wait::until_second(exp).await;
    refused_everywhere(
        &s,
        &viewer_token,
        "a token of a client whose statement expired",
    )
    .await;
    let (status, v) = cc(&s, &viewer.id, &viewer.secret).await;
    assert_eq!(
        (status, v["error"].as_str()),
        (401, Some("invalid_client")),
        "{v}"
    );

    // The vendor revokes the uploader: the list imported, every token of it refused at every
    // worker, both secrets refused; the demo client's tokens still pass.
    let list = vendor.run(&["vendor", "revoke", "--key", path(&vendor.key), &uploader.id]);
    let out = import(&vendor.file("revoked.jws", &list));
    assert!(out.contains("revoked by its vendor"), "{out}");
    for (token, what) in [
        (&uploader_token, "the first secret's token"),
        (&first_token, "the first secret's token in the overlap"),
        (&rotated_token, "the rotated secret's token"),
    ] {
        refused_everywhere(&s, token, &format!("revoked by the vendor: {what}")).await;
    }
    for secret in [&uploader.secret, &rotated.secret] {
        let (status, v) = cc(&s, &uploader.id, secret).await;
        assert_eq!(
            (status, v["error"].as_str()),
            (401, Some("invalid_client")),
            "{v}"
        );
    }
    let demo = crate::edge::client_token(&s).await;
    assert_eq!(call(&s, &demo).await.0, 200, "another client's token");

    let trail = s.admin(&["audit"], None).unwrap();
    for action in [
        "client.import",
        "client.activate",
        "client.deactivate",
        "client.vendor_revoke",
    ] {
        assert!(trail.contains(action), "{action}: {trail}");
    }
    assert!(s.stop());
}
