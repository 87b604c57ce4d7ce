//! A page in headless Chromium, served through Envoy from the API's own origin, gets a bound
//! (DPoP) token from the token endpoint with a proof by its non-extractable WebCrypto key, makes
//! protected calls through Envoy (edge sync, the filter of `MMS_FILTER`) with a fresh proof each,
//! and hands its token over; that token sent from outside the page (a proof by another key, as
//! `Bearer`, with no proof) is refused every time, while a bearer token from outside passes.
//!
//! The page (`tests/js/dpop_browser.html`) is served by a small server of this test behind an
//! Envoy route of its own, `/dpop-page/`, on which the filter is disabled (the way the shipped
//! configuration exempts the issuer's routes), so the page, the token endpoint and the API share
//! one origin and no CORS is involved. Chromium is told to accept the stack's self-signed
//! certificate.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use e2e::browser::{report_route, run_page, Reports};
use e2e::{demo, Options, Stack, Tools};
use serde_json::{json, Value};
use shared::dpop::sign::{ProofClaims, ProofKey};
use std::path::PathBuf;
use std::time::Duration;
use warp::Filter;

/// The path prefix of the page's route.
const PAGE_PREFIX: &str = "/dpop-page/";

/// The web package and Chromium, or the test fails saying which is missing.
fn browser_tools() -> (PathBuf, PathBuf) {
    let part = |n: &str| e2e::needed_for_test(e2e::env_path(n));
    (part("MMS_JS_WEB"), part("MMS_CHROMIUM"))
}

/// The rendered Envoy configuration with a route `/dpop-page/` to the page server on `port`,
/// the filter disabled on it, ahead of every shipped route.
fn with_page_route(yaml: &str, port: u16) -> anyhow::Result<String> {
    let filter = if yaml.contains("- name: envoy.filters.http.dynamic_modules") {
        "envoy.filters.http.dynamic_modules"
    } else {
        "envoy.filters.http.wasm"
    };
    let first_route = "              - match: { prefix: \"/apiv2/oauth/edge\" }\n";
    let clusters = "\n  clusters:\n";
    anyhow::ensure!(
        yaml.contains(first_route) && yaml.contains(clusters),
        "unexpected shape of the shipped configuration"
    );
    let route = format!(
        "              - match: {{ prefix: \"{PAGE_PREFIX}\" }}\n                route: {{ cluster: dpop_page }}\n                typed_per_filter_config:\n                  {filter}:\n                    \"@type\": type.googleapis.com/envoy.config.route.v3.FilterConfig\n                    disabled: true\n"
    );
    let cluster = format!(
        "  - name: dpop_page\n    type: STATIC\n    load_assignment:\n      cluster_name: dpop_page\n      endpoints:\n      - lb_endpoints:\n        - endpoint:\n            address:\n              socket_address: {{ address: 127.0.0.1, port_value: {port} }}\n"
    );
    Ok(yaml
        .replacen(first_route, &format!("{route}{first_route}"), 1)
        .replacen(clusters, &format!("{clusters}{cluster}"), 1))
}

/// A protected call from outside the page with these headers: status and `WWW-Authenticate`.
async fn outside_call(s: &Stack, headers: &[(&str, String)]) -> (u16, String) {
    let mut req = s
        .client()
        .post(format!("{}/apiv2/MediaService/Find", s.url()))
        .header("content-type", "application/json")
        .body("{}");
    for (name, value) in headers {
        req = req.header(*name, value);
    }
    let r = req.send().await.unwrap();
    let challenge = r
        .headers()
        .get_all("www-authenticate")
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect::<Vec<_>>()
        .join(" | ");
    (r.status().as_u16(), challenge)
}

/// Serves the page and the web package under `/dpop-page/` on a free port, with the demo client's
/// credentials in `config.json`; the server, the port and the page's reports.
async fn serve_page(s: &Stack, web_pkg: PathBuf) -> (tokio::task::JoinHandle<()>, u16, Reports) {
    let pages = e2e::root().join("tests/js");
    let config = json!({
        "client": demo::CLIENT,
        "secret": s.secret,
        "username": demo::USER,
        "password": demo::PASSWORD,
    })
    .to_string();
    let (report, reports) = report_route();
    let routes = warp::path("dpop-page")
        .and(
            report
                .or(warp::path::end().and(warp::fs::file(pages.join("dpop_browser.html"))))
                .or(warp::path("dpop_browser.mjs")
                    .and(warp::fs::file(pages.join("dpop_browser.mjs"))))
                .or(warp::path("pkg").and(warp::fs::dir(web_pkg)))
                .or(warp::path("config.json").map(move || {
                    warp::reply::with_header(
                        config.clone(),
                        warp::http::header::CONTENT_TYPE,
                        warp::http::HeaderValue::from_static("application/json"),
                    )
                })),
        )
        .map(warp::Reply::into_response)
        .boxed();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move { warp::serve(routes).incoming(listener).run().await });
    (server, port, reports)
}

/// Checks what the page saw: a non-extractable key, a bound token from the token endpoint, and
/// protected calls that passed bound to that key. Returns the token.
fn check_page(s: &Stack, seen: &Value) -> String {
    assert_eq!(seen["failures"], json!([]), "{seen}");
    assert_eq!(seen["secureContext"], true, "{seen}");
    assert_eq!(seen["extractable"], false, "{seen}");
    assert_eq!(seen["exportRefused"], true, "{seen}");

    // The token endpoint, through Envoy, bound the token to the page's key.
    assert_eq!(seen["grantStatus"], 200, "{seen}\n{}", s.logs());
    assert_eq!(seen["answer"]["token_type"], "DPoP", "{seen}");
    let token = seen["answer"]["access_token"].as_str().unwrap().to_owned();
    let thumbprint = seen["thumbprint"].as_str().unwrap();
    assert_eq!(
        seen["inspected"],
        json!({"version": 2, "bound": true, "jkt": thumbprint}),
        "{seen}"
    );
    let cnf = shared::token::inspect(&token).unwrap().cnf.unwrap();
    assert_eq!(URL_SAFE_NO_PAD.encode(cnf), thumbprint);

    // Its protected calls passed, and the upstream learnt that they were bound, to which key.
    let calls = seen["calls"].as_array().unwrap();
    assert_eq!(calls.len(), 3);
    for call in calls {
        assert_eq!(call["status"], 200, "{call}\n{}", s.logs());
        let identity = &call["body"]["identity"];
        assert_eq!(identity["x-auth-binding"], "dpop", "{call}");
        assert_eq!(identity["x-auth-jkt"], thumbprint, "{call}");
        assert_eq!(identity["x-auth-subject"], demo::USER, "{call}");
    }
    token
}

/// The page's token sent from outside it: refused every way, while a bearer token passes.
async fn check_outside(s: &Stack, token: &str) {
    let htu = format!("{}/apiv2/MediaService/Find", s.url());
    let jti = format!("outside-{}", e2e::unix_now());
    let foreign = ProofKey::es256([0x42; 32]).unwrap().proof(&ProofClaims {
        htm: "POST",
        htu: &htu,
        jti: &jti,
        iat: e2e::unix_now(),
        access_token: Some(token),
        nonce: None,
    });
    // What each refusal must say: a DPoP challenge with an error under the DPoP scheme, and
    // `invalid_token` for a bound token presented as Bearer (never a downgrade).
    let dpop = ("authorization", format!("DPoP {token}"));
    let bearer = format!("Bearer {token}");
    let attempts = [
        (
            "a proof by another key",
            vec![dpop.clone(), ("dpop", foreign)],
            "DPoP ",
        ),
        (
            "as Bearer",
            vec![("authorization", bearer.clone())],
            "error=\"invalid_token\"",
        ),
        (
            "as Bearer in the alternative header",
            vec![("serviceauthorization", bearer)],
            "error=\"invalid_token\"",
        ),
        ("with no proof", vec![dpop], "DPoP "),
    ];
    for (what, headers, says) in attempts {
        let (status, challenge) = outside_call(s, &headers).await;
        assert_eq!(status, 401, "{what}: {challenge}");
        assert!(challenge.contains(says), "{what}: {challenge}");
        assert!(challenge.contains("error="), "{what}: {challenge}");
    }

    // Outside the page is not refused as such: a bearer token of the same client passes.
    let answer: Value = s
        .client()
        .post(format!("{}/apiv2/oauth/token", s.url()))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["token_type"], "Bearer", "{answer}");
    let bearer = answer["access_token"].as_str().unwrap();
    let (status, challenge) =
        outside_call(s, &[("authorization", format!("Bearer {bearer}"))]).await;
    assert_eq!(status, 200, "{challenge}");
}

#[tokio::test]
#[ignore = "needs Envoy and Chromium: `cargo xtask test` runs it"]
async fn page_through_envoy() {
    let tools = Tools::for_test();
    let (web_pkg, chromium) = browser_tools();
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        edge_sync: true,
        ..Options::default()
    };
    let mut s = Stack::start(&tmp.path().join("stack"), &tools, &opts)
        .await
        .unwrap();
    let (server, port, mut reports) = serve_page(&s, web_pkg).await;
    s.restart_envoy_yaml_edited(|yaml| with_page_route(&yaml, port))
        .unwrap();
    s.dpop_ready().await;

    let page = format!("{}{PAGE_PREFIX}", s.url());
    let seen = run_page(
        &chromium,
        &page,
        &tmp.path().join("profile"),
        &mut reports,
        Duration::from_secs(60),
        &tmp.path().join("chromium.log"),
        &["--ignore-certificate-errors"],
    )
    .await
    .unwrap_or_else(|e| panic!("{e:#}\n{}", s.logs()));
    let token = check_page(&s, &seen);
    check_outside(&s, &token).await;
    server.abort();
}
