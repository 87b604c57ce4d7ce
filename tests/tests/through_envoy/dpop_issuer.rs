//! DPoP at the token endpoint through the real stack (through Envoy, to the real issuer): the
//! hostile proofs the edge refuses, refused here too; nonces required at the issuer and at the
//! edge; and refresh token families bound to their key. The memory of used proofs is in
//! `dpop_replay.rs`.
//! Helpers in [`super::dpop`].

use super::dpop::{
    call, dpop_header, ed, es, find_url, hostile, now, proof, token_url, token_with, with,
};
use crate::stack;
use e2e::{demo, Stack};
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{json, Value};
use shared::dpop::sign::ProofKey;

/// The token endpoint (through Envoy, to the real issuer): the same hostile proofs, a replay, a
/// client that requires DPoP, and that a refused proof gets no token.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn the_token_endpoint_refuses_what_the_edge_refuses() {
    let (_tmp, s) = stack(&[]).await;
    s.dpop_ready().await;
    let key = es();
    let url = token_url(&s);
    let used = proof(&key, "POST", &url, None, None);
    assert_eq!(token_with(&s, dpop_header(&used)).await.0, 200);
    for (what, p) in &hostile_proofs(&s, &key, &url, &used) {
        let (status, _, v) = token_with(&s, dpop_header(p)).await;
        assert_eq!(
            (status.as_u16(), v["error"].as_str()),
            (400, Some("invalid_dpop_proof")),
            "{what}: {v}"
        );
    }
    let mut two = dpop_header(&proof(&key, "POST", &url, None, None));
    two.append(
        "dpop",
        HeaderValue::from_str(&proof(&key, "POST", &url, None, None)).unwrap(),
    );
    let (status, _, v) = token_with(&s, two).await;
    assert_eq!(
        (status.as_u16(), v["error"].as_str()),
        (400, Some("invalid_dpop_proof")),
        "two: {v}"
    );
    step_a_client_that_requires_dpop_gets_a_bound_token(&s, &key, &url).await;
    assert!(s.stop());
}

/// Proofs the token endpoint at `url` refuses: `used` again, and proofs by `key` wrong in one
/// way each.
fn hostile_proofs(s: &Stack, key: &ProofKey, url: &str, used: &str) -> Vec<(&'static str, String)> {
    vec![
        ("replayed", used.to_owned()),
        (
            "alg none",
            hostile(key, url, None, json!({"alg": "none"}), json!({})),
        ),
        (
            "HS256",
            hostile(key, url, None, json!({"alg": "HS256"}), json!({})),
        ),
        (
            "private jwk",
            hostile(
                key,
                url,
                None,
                json!({"jwk": serde_json::from_str::<Value>(&key.private_jwk()).unwrap()}),
                json!({}),
            ),
        ),
        (
            "typ",
            hostile(key, url, None, json!({"typ": "JWT"}), json!({})),
        ),
        (
            "htm",
            hostile(key, url, None, json!({}), json!({"htm": "GET"})),
        ),
        (
            "htu",
            hostile(key, url, None, json!({}), json!({"htu": find_url(s)})),
        ),
        (
            "trailing slash",
            hostile(key, url, None, json!({}), json!({"htu": format!("{url}/")})),
        ),
        (
            "iat old",
            hostile(key, url, None, json!({}), json!({"iat": now() - 3600})),
        ),
        (
            "iat ahead",
            hostile(key, url, None, json!({}), json!({"iat": now() + 3600})),
        ),
        (
            "oversized",
            hostile(key, url, None, json!({}), json!({"pad": "x".repeat(9000)})),
        ),
        ("comma-joined", format!("{used},{used}")),
    ]
}

/// Step: a client that requires DPoP gets nothing without a proof, a bound token with one, which
/// introspection says is bound to the key.
async fn step_a_client_that_requires_dpop_gets_a_bound_token(s: &Stack, key: &ProofKey, url: &str) {
    s.admin(&["client", "dpop", demo::CLIENT, "required"], None)
        .unwrap();
    let (status, _, v) = token_with(s, HeaderMap::new()).await;
    assert_eq!(
        (status.as_u16(), v["error"].as_str()),
        (400, Some("invalid_dpop_proof")),
        "{v}"
    );
    let (status, _, v) = token_with(s, dpop_header(&proof(key, "POST", url, None, None))).await;
    assert_eq!(
        (status.as_u16(), v["token_type"].as_str()),
        (200, Some("DPoP")),
        "{v}"
    );
    // Introspection says what the token is bound to.
    let t = v["access_token"].as_str().unwrap();
    let i: Value = s
        .client()
        .post(format!("{}/apiv2/oauth/introspect", s.url()))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[("token", t)])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(i["token_type"], "DPoP", "{i}");
    assert_eq!(i["cnf"]["jkt"], key.jkt_b64(), "{i}");
}

/// Nonces required at the issuer and at the edge: a proof without one is answered with one, and
/// the retry with it passes; a nonce that is not the servers' never does.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn nonces_are_asked_for_and_then_accepted() {
    let (_tmp, mut s) = stack(&["--dpop-nonce", "required"]).await;
    s.restart_envoy_edited(|cfg| cfg["dpop"]["require_nonce"] = json!(true))
        .unwrap();
    s.dpop_ready().await;
    let key = ed();
    let url = token_url(&s);
    let (status, headers, v) =
        token_with(&s, dpop_header(&proof(&key, "POST", &url, None, None))).await;
    assert_eq!(
        (status.as_u16(), v["error"].as_str()),
        (400, Some("use_dpop_nonce")),
        "{v}"
    );
    let nonce = headers["dpop-nonce"].to_str().unwrap().to_owned();
    let fake = "A".repeat(nonce.len());
    let (_, _, v) = token_with(
        &s,
        dpop_header(&proof(&key, "POST", &url, None, Some(&fake))),
    )
    .await;
    assert_eq!(v["error"], "use_dpop_nonce", "{v}");
    let (status, _, v) = token_with(
        &s,
        dpop_header(&proof(&key, "POST", &url, None, Some(&nonce))),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let t = v["access_token"].as_str().unwrap().to_owned();
    let find = find_url(&s);
    let p = proof(&key, "POST", &find, Some(&t), None);
    let r = s
        .client()
        .post(&find)
        .headers(with("authorization", "DPoP", &t, &[&p]))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let www = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(www.contains("error=\"use_dpop_nonce\""), "{www}");
    let edge_nonce = r.headers()["dpop-nonce"].to_str().unwrap().to_owned();
    for n in [edge_nonce.as_str(), nonce.as_str()] {
        let p = proof(&key, "POST", &find, Some(&t), Some(n));
        let (status, www, _) = call(&s, with("authorization", "DPoP", &t, &[&p])).await;
        assert_eq!(status, 200, "a nonce of the edge or of the issuer: {www}");
    }
    assert!(s.stop());
}

/// A family started with a proof is bound: a refresh without a proof, or with another key's, is
/// refused and leaves the family usable; with the key it rotates and gives a bound token.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_bound_refresh_token_needs_its_key() {
    let (_tmp, s) = stack(&[]).await;
    s.dpop_ready().await;
    let key = ed();
    let url = token_url(&s);
    let form = |grant: &[(&'static str, String)]| grant.to_vec();
    let post = |headers: HeaderMap, form: Vec<(&'static str, String)>| {
        s.client()
            .post(&url)
            .basic_auth(demo::CLIENT, Some(&s.secret))
            .headers(headers)
            .form(&form)
            .send()
    };
    let signed_in: Value = post(
        dpop_header(&proof(&key, "POST", &url, None, None)),
        form(&[
            ("grant_type", "password".into()),
            ("username", demo::USER.into()),
            ("password", demo::PASSWORD.into()),
        ]),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(signed_in["token_type"], "DPoP", "{signed_in}");
    let refresh = signed_in["refresh_token"].as_str().unwrap().to_owned();
    let grant = form(&[
        ("grant_type", "refresh_token".into()),
        ("refresh_token", refresh.clone()),
    ]);
    for (what, headers) in [
        ("no proof", HeaderMap::new()),
        (
            "another key",
            dpop_header(&proof(&es(), "POST", &url, None, None)),
        ),
    ] {
        let r = post(headers, grant.clone()).await.unwrap();
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        assert_eq!(
            (status.as_u16(), v["error"].as_str()),
            (400, Some("invalid_dpop_proof")),
            "{what}: {v}"
        );
    }
    let r = post(dpop_header(&proof(&key, "POST", &url, None, None)), grant)
        .await
        .unwrap();
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["token_type"], "DPoP",
        "the family survived the refusals: {v}"
    );
    assert_ne!(v["refresh_token"].as_str().unwrap(), refresh);
    let t = v["access_token"].as_str().unwrap();
    assert_eq!(shared::token::inspect(t).unwrap().cnf, Some(key.jkt()));
    assert!(s.stop());
}

/// Two issuers on one PostgreSQL: a proof accepted by one is a replay at the other (and at
/// itself); a fresh proof is accepted by either. Sent to each issuer directly, not through Envoy,
/// so that which issuer answers is known.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Envoy and PostgreSQL: `cargo xtask test` runs it"]
async fn a_proof_is_accepted_once_by_all_the_issuers_of_one_database() {
    let tools = e2e::Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let opts = e2e::Options {
        postgres: true,
        ..e2e::Options::default()
    };
    let s = e2e::Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    let (a, b) = (s.ports.issuer, s.more_issuers[0]);
    let key = es();
    // The proof names the token endpoint's public URL, which both issuers check it against.
    let url = token_url(&s);
    let post = |port: u16, proof: String| {
        reqwest::Client::new()
            .post(format!("http://127.0.0.1:{port}/apiv2/oauth/token"))
            .basic_auth(demo::CLIENT, Some(&s.secret))
            .headers(dpop_header(&proof))
            .form(&[("grant_type", "client_credentials")])
            .send()
    };
    let once = proof(&key, "POST", &url, None, None);
    let first: Value = post(a, once.clone()).await.unwrap().json().await.unwrap();
    assert_eq!(first["token_type"], "DPoP", "{first}");
    for (what, port) in [("at the other issuer", b), ("at the same issuer", a)] {
        let r = post(port, once.clone()).await.unwrap();
        assert_eq!(r.status(), 400, "replayed {what}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"], "invalid_dpop_proof", "replayed {what}: {v}");
    }
    let fresh = proof(&key, "POST", &url, None, None);
    let at_b: Value = post(b, fresh).await.unwrap().json().await.unwrap();
    assert_eq!(at_b["token_type"], "DPoP", "{at_b}");
    assert!(s.stop());
}
