//! DPoP proofs made by the JS module, checked with the token crate's own proof checker
//! (`shared::dpop::check_proof`, what the issuer and both filters run): the Node suite's proofs
//! (`crate::js::node_package` hands them here) and, in headless Chromium, proofs under the key the
//! page keeps in IndexedDB, whose private half cannot be exported and which comes back after the
//! browser is closed and opened again on the same profile.

use crate::js::js;
use e2e::browser::{report_route, run_page, Reports};
use serde_json::{json, Value};
use shared::dpop::{self, check_proof, DpopError, Expect, NonceCheck, NONCE_SLOT_SECONDS};
use shared::key::{Key, KeyRing};
use std::collections::HashSet;
use std::path::Path;
use warp::Filter;

/// What the JS suites make proofs for (`proofRequests` in tests/js/common.mjs), and the key ring
/// their server nonce is made under.
pub(crate) struct ProofTarget {
    ring: KeyRing,
    url: String,
    token_url: String,
    access_token: String,
    nonce: String,
}

impl ProofTarget {
    pub(crate) fn new(access_token: &str) -> Self {
        let key = Key::new(7, [0x5a; 32]);
        let nonce = dpop::nonce_for(&key, e2e::unix_now(), NONCE_SLOT_SECONDS);
        Self {
            ring: KeyRing::new(vec![key], Some(7)).unwrap(),
            url: "https://media.example.com:8443/apiv2/MediaService/Find".into(),
            token_url: "https://auth.example.com/apiv2/oauth/token".into(),
            access_token: access_token.into(),
            nonce,
        }
    }

    /// The fixture's `dpop` member.
    pub(crate) fn json(&self) -> Value {
        json!({
            "url": self.url,
            "tokenUrl": self.token_url,
            "accessToken": self.access_token,
            "nonce": self.nonce,
        })
    }

    fn expect<'a>(&'a self, entry: &'a Value, method: &'a str) -> Expect<'a> {
        let nonce_check = if entry["nonce"].is_string() {
            NonceCheck::Required {
                ring: &self.ring,
                window: NONCE_SLOT_SECONDS,
            }
        } else {
            NonceCheck::Off
        };
        Expect {
            method,
            url: entry["url"].as_str().unwrap(),
            access_token: entry["accessToken"].as_str(),
            now: e2e::unix_now(),
            window_seconds: 60,
            nonce_check,
        }
    }

    /// Checks every proof the JS made (`[{algorithm, thumbprint, proof, method, url,
    /// accessToken?, nonce?}]`) as a server would, and that each fails when one thing about the
    /// request differs; returns their algorithms in order.
    pub(crate) fn check(&self, proofs: &Value) -> Vec<String> {
        let mut jtis = HashSet::new();
        let mut algorithms = Vec::new();
        for entry in proofs.as_array().unwrap() {
            let proof = entry["proof"].as_str().unwrap();
            let method = entry["method"].as_str().unwrap().to_ascii_uppercase();
            let expect = self.expect(entry, &method);
            let good = check_proof(proof, &expect).unwrap_or_else(|e| panic!("{e}: {entry}"));
            assert_eq!(good.jkt_b64(), entry["thumbprint"], "{entry}");
            assert!(jtis.insert(good.jti), "a jti used twice: {entry}");
            let other_url = "https://media.example.com/apiv2/MediaService/Other";
            let wrong = [
                (
                    Expect {
                        url: other_url,
                        ..expect
                    },
                    DpopError::UrlMismatch,
                ),
                (
                    Expect {
                        method: "DELETE",
                        ..expect
                    },
                    DpopError::MethodMismatch,
                ),
                (
                    Expect {
                        now: expect.now + 3600,
                        ..expect
                    },
                    DpopError::Stale,
                ),
            ];
            for (e, error) in wrong {
                assert_eq!(check_proof(proof, &e), Err(error), "{entry}");
            }
            let token = Expect {
                access_token: Some("mmat2.other"),
                ..expect
            };
            let expected = if entry["accessToken"].is_string() {
                DpopError::AthMismatch
            } else {
                DpopError::MissingAth
            };
            assert_eq!(check_proof(proof, &token), Err(expected), "{entry}");
            if !entry["nonce"].is_string() {
                let nonce = Expect {
                    nonce_check: NonceCheck::Required {
                        ring: &self.ring,
                        window: NONCE_SLOT_SECONDS,
                    },
                    ..expect
                };
                assert_eq!(check_proof(proof, &nonce), Err(DpopError::NonceRequired));
            }
            algorithms.push(entry["algorithm"].as_str().unwrap().to_owned());
        }
        algorithms
    }
}

/// One headless Chromium run of the DPoP page on `profile`; its report, without failures.
async fn open(chromium: &Path, url: String, profile: &Path, reports: &mut Reports) -> Value {
    let log = profile.with_extension("log");
    let limit = std::time::Duration::from_secs(30);
    let results = run_page(chromium, &url, profile, reports, limit, &log, &[])
        .await
        .unwrap();
    assert_eq!(results["failures"], json!([]), "{results}");
    results
}

#[tokio::test]
#[ignore = "needs the JS packages and Chromium: `cargo xtask test` runs it"]
async fn browser_proofs() {
    let js = js();
    let tmp = tempfile::tempdir().unwrap();
    let target = ProofTarget::new("mmat2.a-token-the-page-holds");
    let dpop_json = target.json().to_string();
    let pages = e2e::root().join("tests/js");
    let (report, mut reports) = report_route();
    let routes = report
        .or(warp::path("pkg").and(warp::fs::dir(js.web_pkg.clone())))
        .or(warp::path("dpop.json").map(move || {
            warp::reply::with_header(
                dpop_json.clone(),
                warp::http::header::CONTENT_TYPE,
                warp::http::HeaderValue::from_static("application/json"),
            )
        }))
        .or(warp::path("dpop.html").and(warp::fs::file(pages.join("dpop.html"))))
        .or(warp::path("dpop.mjs").and(warp::fs::file(pages.join("dpop.mjs"))))
        .or(warp::path("common.mjs").and(warp::fs::file(pages.join("common.mjs"))))
        .map(warp::Reply::into_response)
        .boxed();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move { warp::serve(routes).incoming(listener).run().await });
    let profile = tmp.path().join("profile");
    let page = format!("http://{addr}/dpop.html");

    let first = open(&js.chromium, page.clone(), &profile, &mut reports).await;
    assert_eq!(first["algorithm"], "ES256", "{first}");
    assert_eq!(first["extractable"], false, "{first}");
    assert_eq!(
        first["exportRefused"], true,
        "exportKey of the private key rejects: {first}"
    );
    assert!(first["userAgent"].as_str().unwrap().contains("Chrome"));
    let algorithms = target.check(&first["proofs"]);
    assert_eq!(algorithms[..3], ["ES256", "ES256", "ES256"], "{first}");
    // Ed25519 is optional: where WebCrypto has it, its proofs pass too.
    let ed25519 = first["ed25519"] == true;
    assert_eq!(algorithms.len(), if ed25519 { 6 } else { 3 }, "{first}");
    eprintln!("Ed25519 in this Chromium: {}", first["ed25519"]);

    // The browser closed and opened again on the same profile: the key came back from IndexedDB.
    let second = open(&js.chromium, page.clone(), &profile, &mut reports).await;
    assert_eq!(second["thumbprint"], first["thumbprint"], "{second}");
    target.check(&second["proofs"]);

    // Forgotten (sign-out): the next open makes another key.
    let third = open(
        &js.chromium,
        format!("{page}?forget"),
        &profile,
        &mut reports,
    )
    .await;
    assert_ne!(third["thumbprint"], first["thumbprint"], "{third}");
    let fourth = open(&js.chromium, page, &profile, &mut reports).await;
    assert_eq!(fourth["thumbprint"], third["thumbprint"], "{fourth}");
    server.abort();
}
