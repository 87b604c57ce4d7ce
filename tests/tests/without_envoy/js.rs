//! The browser/Node module against tokens from the real issuer and the shared vectors: Node's own
//! test runner on the Node package (its DPoP proofs then checked here with the token crate's
//! checker, `crate::js_dpop`), `npm install` of it into an empty folder, and headless Chromium
//! loading the web package from a page served on 127.0.0.1.
//!
//! `cargo xtask test` sets MMS_JS_NODE and MMS_JS_WEB (the packages), MMS_CHROMIUM and the
//! variables of [`e2e::Tools`].

use base64::Engine as _;
use e2e::{free_port, provision, start_issuer, Tools};
use serde_json::{json, Value};
use shared::token;
use std::path::{Path, PathBuf};
use std::process::Command;
use warp::Filter;

pub(crate) struct Js {
    pub(crate) node_pkg: PathBuf,
    pub(crate) web_pkg: PathBuf,
    pub(crate) chromium: PathBuf,
    pub(crate) tools: Tools,
}

/// The packages, Chromium and the tools, or the test fails saying which is missing.
pub(crate) fn js() -> Js {
    let part = |n: &str| e2e::needed_for_test(e2e::env_path(n));
    Js {
        node_pkg: part("MMS_JS_NODE"),
        web_pkg: part("MMS_JS_WEB"),
        chromium: part("MMS_CHROMIUM"),
        tools: Tools::for_test(),
    }
}

fn expect(t: &str) -> Value {
    let b = token::inspect(t).unwrap();
    let id = &b.identity;
    let jkt = b
        .cnf
        .map(|c| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(c));
    json!({
        "version": if b.cnf.is_some() { token::BOUND_VERSION } else { token::VERSION },
        "bound": b.cnf.is_some(),
        "jkt": jkt,
        "keyId": b.kid,
        "tokenId": b.jti_hex(),
        "issuedAtMs": b.iat * 1000,
        "expiresAtMs": b.exp * 1000,
        "client": b.client,
        "subjectKind": id.kind.as_str(),
        "subject": if id.subject.is_empty() { Value::Null } else { json!(id.subject) },
        "roles": id.roles,
        "claims": id.claims.iter().map(|c| json!({"type": c.typ, "value": c.value})).collect::<Vec<_>>(),
        "actors": b.act.as_ref().map(|c| c.actors.clone()),
        "actorOrigin": b.act.as_ref().map(|c| c.origin.clone()),
    })
}

async fn grant(url: &str, secret: &str, form: &[(&str, &str)]) -> Value {
    let r = reqwest::Client::new()
        .post(format!("{url}/apiv2/oauth/token"))
        .basic_auth(e2e::demo::CLIENT, Some(secret))
        .form(form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json().await.unwrap()
}

/// The answers of every grant from the issuer at `url`: password, refresh, client
/// credentials, impersonation by claims and by the obsolete pair.
async fn every_grant(url: &str, secret: &str) -> [Value; 5] {
    let (user, pw) = (e2e::demo::USER, e2e::demo::PASSWORD);
    let password = grant(
        url,
        secret,
        &[
            ("grant_type", "password"),
            ("username", user),
            ("password", pw),
        ],
    )
    .await;
    let refreshed = grant(
        url,
        secret,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", password["refresh_token"].as_str().unwrap()),
        ],
    )
    .await;
    let client = grant(url, secret, &[("grant_type", "client_credentials")]).await;
    let claims = grant(
        url,
        secret,
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_claims", "upn=zoë@corp, group=ops"),
        ],
    )
    .await;
    let legacy = grant(
        url,
        secret,
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_as", "carol"),
            ("roles", "admin,auditor"),
        ],
    )
    .await;
    [password, refreshed, client, claims, legacy]
}

/// Tokens of every grant from the real issuer, one of them expired, with their native inspection.
pub(crate) async fn fixture(tools: &Tools, dir: &Path) -> Value {
    let data = dir.join("data");
    let secret = provision(tools, dir, &data).unwrap();
    let (mut short, url) = start_issuer(
        tools,
        &data,
        free_port(),
        &["--access-ttl", "1"],
        &dir.join("issuer1.log"),
    )
    .unwrap();
    let expired = grant(&url, &secret, &[("grant_type", "client_credentials")]).await
        ["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(short.stop());
    let (mut issuer, url) =
        start_issuer(tools, &data, free_port(), &[], &dir.join("issuer2.log")).unwrap();
    let [password, refreshed, client, claims, legacy] = every_grant(&url, &secret).await;
    assert!(issuer.stop());
    let exp = token::inspect(&expired).unwrap().exp;
    e2e::wait::until_second(exp + 1).await;
    let tokens: Vec<Value> = [
        ("password", &password),
        ("refreshed", &refreshed),
        ("client", &client),
        ("impersonated claims", &claims),
        ("impersonated legacy", &legacy),
    ]
    .iter()
    .map(|(name, answer)| {
        let t = answer["access_token"].as_str().unwrap();
        json!({"name": name, "token": t, "expect": expect(t)})
    })
    .collect();
    let fresh = password["access_token"].as_str().unwrap();
    let vectors: Value = serde_json::from_str(
        &std::fs::read_to_string(e2e::root().join("shared/test_vectors/tokens.json")).unwrap(),
    )
    .unwrap();
    let long = "A".repeat(5000);
    let truncated = &fresh[..fresh.len() - 1];
    json!({
        "tokens": tokens,
        "expired": {"token": expired},
        "fresh": {"token": fresh},
        "vectors": vectors,
        "malformed": ["", "   ", "abc", "mmat1.", "mmat1.!!!.x", format!("Bearer {fresh}"), "mmat2.AAAA.BBBB", long, truncated],
    })
}

#[tokio::test]
#[ignore = "needs the JS packages and Chromium: `cargo xtask test` runs it"]
async fn node_package() {
    let js = js();
    let tmp = tempfile::tempdir().unwrap();
    let mut fx = fixture(&js.tools, tmp.path()).await;
    let target = crate::js_dpop::ProofTarget::new(fx["fresh"]["token"].as_str().unwrap());
    fx["dpop"] = target.json();
    let fx_path = tmp.path().join("fixture.json");
    std::fs::write(&fx_path, fx.to_string()).unwrap();
    let proofs_path = tmp.path().join("proofs.json");
    let out = Command::new("node")
        .arg("--test")
        .arg(e2e::root().join("tests/js/node.test.mjs"))
        .env("MMS_JS_NODE", &js.node_pkg)
        .env("MMS_JS_FIXTURE", &fx_path)
        .env("MMS_JS_PROOFS", &proofs_path)
        .output()
        .expect("node runs");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "node --test failed:\n{text}");
    assert!(
        text.contains("# pass 8") && text.contains("# fail 0"),
        "{text}"
    );
    // Node's WebCrypto has both curves: three proofs each, every one good for the Rust checker.
    let proofs: Value =
        serde_json::from_str(&std::fs::read_to_string(&proofs_path).unwrap()).unwrap();
    assert_eq!(
        target.check(&proofs),
        ["ES256", "ES256", "ES256", "EdDSA", "EdDSA", "EdDSA"]
    );

    step_installed_with_npm_it_is_used_as_a_user_would(&js, &tmp.path().join("app"), &fx);
}

/// Step: `npm install ./dist/js/node` in an empty folder `app`, then used as a user would,
/// with its types declared.
fn step_installed_with_npm_it_is_used_as_a_user_would(js: &Js, app: &Path, fx: &Value) {
    std::fs::create_dir(app).unwrap();
    let npm = Command::new("npm")
        .current_dir(app)
        .args([
            "install",
            "--install-links",
            "--no-audit",
            "--no-fund",
            "--offline",
        ])
        .arg(&js.node_pkg)
        .output()
        .expect("npm runs");
    assert!(
        npm.status.success(),
        "npm install: {}",
        String::from_utf8_lossy(&npm.stderr)
    );
    assert!(
        app.join("node_modules/mms-token-inspect/mms_token_bg.wasm")
            .exists(),
        "installed as a copy"
    );
    let fresh = fx["fresh"]["token"].as_str().unwrap();
    let script = "const { inspectToken } = require('mms-token-inspect'); const i = inspectToken(process.argv[1]); \
                  console.log(JSON.stringify({ subject: i.subject, kind: i.subjectKind, expired: i.expired, date: i.expiresAt instanceof Date }));";
    let run = Command::new("node")
        .current_dir(app)
        .args(["-e", script, fresh])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let seen: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(
        seen,
        json!({"subject": e2e::demo::USER, "kind": "user", "expired": false, "date": true})
    );
    let dts =
        std::fs::read_to_string(app.join("node_modules/mms-token-inspect/mms_token.d.ts")).unwrap();
    assert!(
        dts.contains("export interface TokenInfo")
            && dts.contains("expiresAt: Date;")
            && dts.contains("subjectKind: SubjectKind;")
    );
    assert!(!dts.contains(": any"), "{dts}");
}

pub(crate) fn chromium_dump(chromium: &Path, url: &str, profile: &Path) -> String {
    let out = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--dump-dom", url])
        .output()
        .expect("chromium runs");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

pub(crate) fn element_text(dom: &str, id: &str) -> String {
    let open = format!("id=\"{id}\">");
    let start = dom
        .find(&open)
        .unwrap_or_else(|| panic!("no #{id} in:\n{dom}"))
        + open.len();
    let end = start + dom[start..].find("</").unwrap();
    dom[start..end]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[tokio::test]
#[ignore = "needs the JS packages and Chromium: `cargo xtask test` runs it"]
async fn browser_package() {
    let js = js();
    let tmp = tempfile::tempdir().unwrap();
    let fx = fixture(&js.tools, tmp.path()).await;
    let pages = e2e::root().join("tests/js");
    let fx_text = fx.to_string();
    let routes = warp::path("pkg")
        .and(warp::fs::dir(js.web_pkg.clone()))
        .or(warp::path("web").and(warp::fs::dir(js.web_pkg.clone())))
        .or(warp::path("example").and(warp::fs::dir(e2e::root().join("filter-wasm/js/example"))))
        .or(warp::path("fixture.json").map(move || {
            warp::reply::with_header(
                fx_text.clone(),
                warp::http::header::CONTENT_TYPE,
                warp::http::HeaderValue::from_static("application/json"),
            )
        }))
        .or(warp::path::end().and(warp::fs::file(pages.join("browser.html"))))
        .or(warp::path("browser.mjs").and(warp::fs::file(pages.join("browser.mjs"))))
        .or(warp::path("common.mjs").and(warp::fs::file(pages.join("common.mjs"))))
        .map(warp::Reply::into_response)
        .boxed();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { warp::serve(routes).incoming(listener).run().await });

    step_the_test_page_passes_every_check(&js, tmp.path(), addr, &fx).await;
    step_the_example_page_shows_a_token(&js, tmp.path(), addr, &fx).await;
    server.abort();
}

/// Step: the test page in Chromium passes every check, as many as the fixture holds.
async fn step_the_test_page_passes_every_check(
    js: &Js,
    tmp: &Path,
    addr: std::net::SocketAddr,
    fx: &Value,
) {
    let chromium = js.chromium.clone();
    let profile = tmp.join("profile");
    let url = format!("http://{addr}/");
    let dom = tokio::task::spawn_blocking(move || chromium_dump(&chromium, &url, &profile))
        .await
        .unwrap();
    let results: Value = serde_json::from_str(&element_text(&dom, "results"))
        .unwrap_or_else(|e| panic!("{e}: {dom}"));
    assert_eq!(results["failures"], json!([]), "{results}");
    let vectors = fx["vectors"]["valid"].as_array().unwrap().len()
        + fx["vectors"]["invalid"].as_array().unwrap().len();
    let bound = fx["vectors"]["valid"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["cnf"].is_string())
        .count();
    assert!(bound >= 2, "the vectors hold bound tokens");
    let expected_checks =
        5 * 4 + 2 + vectors + bound + 1 + fx["malformed"].as_array().unwrap().len();
    assert_eq!(results["checks"], expected_checks, "{results}");
    assert!(
        results["userAgent"].as_str().unwrap().contains("Chrome"),
        "{results}"
    );
}

/// Step: the example page, as a user opens it with a token, and with a bound token.
async fn step_the_example_page_shows_a_token(
    js: &Js,
    tmp: &Path,
    addr: std::net::SocketAddr,
    fx: &Value,
) {
    let fresh = fx["fresh"]["token"].as_str().unwrap();
    let (chromium, profile) = (js.chromium.clone(), tmp.join("profile2"));
    let url = format!("http://{addr}/example/?token={fresh}");
    let dom = tokio::task::spawn_blocking(move || chromium_dump(&chromium, &url, &profile))
        .await
        .unwrap();
    assert_eq!(element_text(&dom, "subject"), e2e::demo::USER, "{dom}");
    assert_eq!(element_text(&dom, "kind"), "user");
    assert_eq!(element_text(&dom, "claims"), "email=demo@example.com");
    assert_eq!(element_text(&dom, "binding"), "bearer");
    assert!(element_text(&dom, "left").ends_with(" s"), "{dom}");
    assert_eq!(element_text(&dom, "error"), "");

    // A bound token shows its binding.
    let bound = fx["vectors"]["valid"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["cnf"].is_string())
        .unwrap();
    let body = token::inspect(bound["token"].as_str().unwrap()).unwrap();
    let jkt = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(body.cnf.unwrap());
    let (chromium, profile) = (js.chromium.clone(), tmp.join("profile3"));
    let url = format!(
        "http://{addr}/example/?token={}",
        bound["token"].as_str().unwrap()
    );
    let dom = tokio::task::spawn_blocking(move || chromium_dump(&chromium, &url, &profile))
        .await
        .unwrap();
    assert_eq!(
        element_text(&dom, "binding"),
        format!("DPoP, key thumbprint {jkt}"),
        "{dom}"
    );
}
