//! From the embedded store to PostgreSQL and back, losing nothing: a data dir's backup restored
//! into a fresh PostgreSQL (`issuer restore --store URL --kek-file FILE`), two issuers serving on
//! it, then its backup (`issuer backup --store URL`) restored into a new data dir. At each step a
//! token minted before the move still verifies, the refresh chain keeps rotating, the revoked
//! token stays revoked, and the client and the user sign in with the same secrets; and a real
//! Envoy given the moved store's plugin configuration accepts the tokens minted before the move.
//! And a restore into a database that holds data is refused and changes nothing.

use e2e::envoy::{self, Ports};
use e2e::issuer::add_client;
use e2e::postgres::PgCluster;
use e2e::{demo, issuer_admin, issuer_admin_on, provision, start_issuer, start_issuer_on};
use e2e::{ensure_tls, start_upstream, Proc, StoreArgs, Tools};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// The tokens of the demo client and user, taken before the move.
struct Minted {
    /// A password grant's answer: its access token verifies after the move.
    signed_in: Value,
    /// The refresh token at the head of that family's chain.
    refresh: String,
    /// An access token revoked before the move.
    revoked: String,
    /// A client credentials grant's access token.
    client_token: String,
}

/// A request to the issuer at `base`, as the demo client: the status and the JSON answer.
async fn post(base: &str, secret: &str, path: &str, form: &[(&str, &str)]) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}/apiv2/oauth/{path}"))
        .basic_auth(demo::CLIENT, Some(secret))
        .form(form)
        .send()
        .await
        .expect("an answer");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// A token grant that must succeed.
async fn grant(base: &str, secret: &str, form: &[(&str, &str)]) -> Value {
    let (status, body) = post(base, secret, "token", form).await;
    assert_eq!(status, 200, "{base}: {form:?}: {body}");
    body
}

async fn sign_in(base: &str, secret: &str) -> Value {
    let form = [
        ("grant_type", "password"),
        ("username", demo::USER),
        ("password", demo::PASSWORD),
    ];
    grant(base, secret, &form).await
}

/// Whether the issuer at `base` finds the access token `token` active.
async fn active(base: &str, secret: &str, token: &str) -> bool {
    let (status, body) = post(base, secret, "introspect", &[("token", token)]).await;
    assert_eq!(status, 200, "{base}: {body}");
    body["active"] == true
}

fn access(v: &Value) -> String {
    v["access_token"]
        .as_str()
        .expect("an access token")
        .to_owned()
}

/// Mints the tokens the move must keep, at the issuer at `base`.
async fn mint(base: &str, secret: &str) -> Minted {
    let signed_in = sign_in(base, secret).await;
    let refresh = signed_in["refresh_token"].as_str().unwrap().to_owned();
    let doomed = sign_in(base, secret).await;
    let (status, body) = post(base, secret, "revoke", &[("token", &access(&doomed))]).await;
    assert_eq!(status, 200, "{body}");
    let client_token = access(&grant(base, secret, &[("grant_type", "client_credentials")]).await);
    let mut m = Minted {
        signed_in,
        refresh,
        revoked: access(&doomed),
        client_token,
    };
    check(&[base], secret, &mut m, "before the move").await;
    m
}

/// At each issuer of `bases`: the tokens minted before verify, the revoked one does not, the
/// refresh chain rotates (at each issuer in turn), the user and the client sign in again.
async fn check(bases: &[&str], secret: &str, m: &mut Minted, when: &str) {
    for base in bases {
        assert!(
            active(base, secret, &access(&m.signed_in)).await,
            "{when}: {base}: the access token minted before is not active"
        );
        assert!(
            active(base, secret, &m.client_token).await,
            "{when}: {base}: the client's token is not active"
        );
        assert!(
            !active(base, secret, &m.revoked).await,
            "{when}: {base}: the revoked token is active"
        );
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", m.refresh.as_str()),
        ];
        let next = grant(base, secret, &form).await;
        m.refresh = next["refresh_token"].as_str().unwrap().to_owned();
        let again = sign_in(base, secret).await;
        assert!(
            active(base, secret, &access(&again)).await,
            "{when}: {base}"
        );
        grant(base, secret, &[("grant_type", "client_credentials")]).await;
    }
}

/// Starts Envoy (the shipped full-stack configuration, the tools' filter) in `dir` in front of the
/// issuer on `issuer` with the plugin configuration of `store`, and checks that every token minted
/// before the move reaches the media service through it; returns Envoy, stopped when dropped.
async fn accepted_at_envoy(
    tools: &Tools,
    store: &StoreArgs,
    dir: &Path,
    issuer: &str,
    m: &Minted,
) -> Proc {
    let port = issuer.rsplit(':').next().unwrap().parse().unwrap();
    let ports = Ports {
        listener: e2e::free_port(),
        issuer: port,
        media: e2e::free_port(),
    };
    let upstream = start_upstream(ports.media).await.unwrap();
    let pem = ensure_tls(dir).unwrap();
    tools.install_filter(dir).unwrap();
    let origin = format!("https://localhost:{}", ports.listener);
    let args = ["keys", "filter-config", "--public-origin", &origin];
    let cfg = issuer_admin_on(tools, store, &args, None).unwrap();
    let yaml = envoy::render_full_stack(tools, ports, &cfg).unwrap();
    let path = envoy::write_config(dir, "envoy.yaml", &yaml).unwrap();
    let proc =
        envoy::start_envoy(tools, dir, &path, ports.listener, 1, &dir.join("envoy.log")).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(pem.as_bytes()).unwrap())
        .resolve("localhost", ([127, 0, 0, 1], ports.listener).into())
        .build()
        .unwrap();
    for token in [access(&m.signed_in), m.client_token.clone()] {
        let r = client
            .post(format!(
                "https://localhost:{}/apiv2/MediaService/Find",
                ports.listener
            ))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "a token minted before the move, at Envoy");
    }
    let forged = format!("{}x", access(&m.signed_in));
    let r = client
        .post(format!(
            "https://localhost:{}/apiv2/MediaService/Find",
            ports.listener
        ))
        .bearer_auth(forged)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        401,
        "Envoy verifies, it does not wave tokens through"
    );
    upstream.abort();
    proc
}

/// A KEK file (0600) in `dir`.
fn kek_file(dir: &Path) -> PathBuf {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join("kek");
    e2e::write_private(&path, format!("{hex}\n").as_bytes()).unwrap();
    path
}

fn serve(tools: &Tools, store: &StoreArgs, log: &Path) -> (Proc, String) {
    start_issuer_on(tools, store, e2e::free_port(), &[], log).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Envoy and PostgreSQL: `cargo xtask test` runs it"]
async fn a_data_dir_moves_to_postgres_and_back_losing_nothing() {
    let tools = Tools::for_test();
    let pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, data) = (tmp.path(), tmp.path().join("data"));
    let secret = provision(&tools, dir, &data).unwrap();
    let (mut first, base) =
        start_issuer(&tools, &data, e2e::free_port(), &[], &dir.join("redb.log")).unwrap();
    let mut minted = mint(&base, &secret).await;
    first.stop();

    let backup = dir.join("from-redb.backup");
    let to = backup.display().to_string();
    issuer_admin(&tools, &data, &["backup", "--to", &to], None).unwrap();
    let kek = kek_file(dir);
    let store = StoreArgs::postgres(&pg.url(), &kek);
    let out = issuer_admin_on(&tools, &store, &["restore", "--from", &to], None).unwrap();
    assert!(out.contains("into the PostgreSQL store"), "{out}");

    let (mut one, a) = serve(&tools, &store, &dir.join("pg-1.log"));
    let (mut two, b) = serve(&tools, &store, &dir.join("pg-2.log"));
    check(&[&a, &b], &secret, &mut minted, "on PostgreSQL").await;
    let envoy_dir = dir.join("envoy");
    std::fs::create_dir_all(&envoy_dir).unwrap();
    let envoy = accepted_at_envoy(&tools, &store, &envoy_dir, &a, &minted).await;
    drop(envoy);

    // Backed up while both serve: one snapshot.
    let back = dir.join("from-pg.backup");
    let back_to = back.display().to_string();
    let out = issuer_admin_on(&tools, &store, &["backup", "--to", &back_to], None).unwrap();
    assert!(out.contains("PostgreSQL store"), "{out}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&back).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the backup file is {mode:o}");
    one.stop();
    two.stop();

    let again = dir.join("data-again");
    issuer_admin(&tools, &again, &["restore", "--from", &back_to], None).unwrap();
    let (mut last, base) =
        start_issuer(&tools, &again, e2e::free_port(), &[], &dir.join("back.log")).unwrap();
    check(&[&base], &secret, &mut minted, "back in a data dir").await;
    last.stop();
}

/// Every row of the issuer's tables, as one text to compare.
fn fingerprint(pg: &PgCluster) -> String {
    let tables = [
        "clients",
        "users",
        "signing_keys",
        "sealed_secrets",
        "refresh_family_records",
        "revocations",
        "edges",
        "audit",
        "settings",
    ];
    tables
        .iter()
        .map(|t| {
            let sql = format!("SELECT count(*), md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), '')) FROM {t} t");
            format!("{t}: {}", pg.psql(&sql).unwrap())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Envoy and PostgreSQL: `cargo xtask test` runs it"]
async fn a_restore_into_a_database_that_holds_data_is_refused_and_changes_nothing() {
    let tools = Tools::for_test();
    let pg = PgCluster::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let (dir, data) = (tmp.path(), tmp.path().join("data"));
    provision(&tools, dir, &data).unwrap();
    let backup = dir.join("backup").display().to_string();
    issuer_admin(&tools, &data, &["backup", "--to", &backup], None).unwrap();

    let kek = kek_file(dir);
    let store = StoreArgs::postgres(&pg.url(), &kek);
    add_client(&tools, &store, "already-here", &[]).unwrap();
    let before = fingerprint(&pg);
    let refused = issuer_admin_on(&tools, &store, &["restore", "--from", &backup], None)
        .expect_err("a restore over data");
    let refused = refused.to_string();
    assert!(
        refused.contains("not empty") && refused.contains("1 client"),
        "{refused}"
    );
    assert_eq!(
        fingerprint(&pg),
        before,
        "the refused restore changed the database"
    );
}
