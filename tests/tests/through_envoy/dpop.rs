//! DPoP through the real stack: tokens bound by the real issuer at its token endpoint (through
//! Envoy), protected calls with proofs through Envoy to the media upstream, and every refusal
//! of the hostile list, at the issuer and at the filter (this binary runs with each
//! filter). Proofs are made by the token crate's signing half, hostile ones signed well and
//! wrong in one way.

use crate::stack;
use e2e::{demo, Stack};
use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::dpop::sign::{ProofClaims, ProofKey};

fn es() -> ProofKey {
    ProofKey::es256([0x11; 32]).unwrap()
}

fn ed() -> ProofKey {
    ProofKey::ed25519([0x22; 32])
}

fn now() -> u64 {
    e2e::unix_now()
}

fn jti() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "e2e-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A fresh, good proof for `method url`, with `token`'s hash when given.
fn proof(
    key: &ProofKey,
    method: &str,
    url: &str,
    token: Option<&str>,
    nonce: Option<&str>,
) -> String {
    key.proof(&ProofClaims {
        htm: method,
        htu: url,
        jti: &jti(),
        iat: now(),
        access_token: token,
        nonce,
    })
}

/// A proof with these claims and header fields replaced (JSON merged), signed by `key`.
fn hostile(key: &ProofKey, url: &str, token: Option<&str>, header: Value, claims: Value) -> String {
    let mut h: Value = serde_json::from_str(&key.header()).unwrap();
    let mut c: Value = serde_json::from_str(&ProofKey::claims(&ProofClaims {
        htm: "POST",
        htu: url,
        jti: &jti(),
        iat: now(),
        access_token: token,
        nonce: None,
    }))
    .unwrap();
    for (target, patch) in [(&mut h, header), (&mut c, claims)] {
        for (k, v) in patch.as_object().unwrap() {
            target[k] = v.clone();
        }
    }
    key.sign_parts(&h.to_string(), &c.to_string())
}

fn token_url(s: &Stack) -> String {
    format!("{}/apiv2/oauth/token", s.url())
}

fn find_url(s: &Stack) -> String {
    format!("{}/apiv2/MediaService/Find", s.url())
}

/// A client credentials token request through Envoy with these extra headers.
async fn token_with(s: &Stack, headers: HeaderMap) -> (StatusCode, HeaderMap, Value) {
    let r = s
        .client()
        .post(token_url(s))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .headers(headers)
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    let (status, h) = (r.status(), r.headers().clone());
    (status, h, r.json().await.unwrap_or(Value::Null))
}

fn dpop_header(proof: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("dpop", HeaderValue::from_str(proof).unwrap());
    h
}

/// A bound token for `key`, from the real issuer through Envoy.
async fn bound_token(s: &Stack, key: &ProofKey) -> String {
    let (status, _, v) = token_with(
        s,
        dpop_header(&proof(key, "POST", &token_url(s), None, None)),
    )
    .await;
    assert_eq!(status, 200, "{v}\n{}", s.logs());
    assert_eq!(v["token_type"], "DPoP", "{v}");
    let t = v["access_token"].as_str().unwrap().to_owned();
    assert_eq!(shared::token::inspect(&t).unwrap().cnf, Some(key.jkt()));
    t
}

/// A protected call through Envoy with these headers: status, WWW-Authenticate, body.
async fn call(s: &Stack, headers: HeaderMap) -> (StatusCode, String, Value) {
    call_with(&s.client(), s, headers).await
}

async fn call_with(
    http: &reqwest::Client,
    s: &Stack,
    headers: HeaderMap,
) -> (StatusCode, String, Value) {
    let r = http
        .post(find_url(s))
        .header("content-type", "application/json; charset=UTF-8")
        .headers(headers)
        .body("{}")
        .send()
        .await
        .unwrap();
    let status = r.status();
    let www = r
        .headers()
        .get("www-authenticate")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    (status, www, r.json().await.unwrap_or(Value::Null))
}

fn with(scheme_header: &str, scheme: &str, token: &str, proofs: &[&str]) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(
        reqwest::header::HeaderName::from_bytes(scheme_header.as_bytes()).unwrap(),
        HeaderValue::from_str(&format!("{scheme} {token}")).unwrap(),
    );
    for p in proofs {
        h.append("dpop", HeaderValue::from_str(p).unwrap());
    }
    h
}

fn refused(status: StatusCode, www: &str, code: &str) -> bool {
    status == 401 && www.contains(&format!("error=\"{code}\""))
}

#[tokio::test]
async fn a_bound_token_passes_only_with_a_fresh_proof_by_its_key() {
    let Some((_tmp, s)) = stack(&[]).await else {
        return;
    };
    for key in [es(), ed()] {
        let t = bound_token(&s, &key).await;
        let good = proof(&key, "POST", &find_url(&s), Some(&t), None);
        let (status, _, seen) = call(&s, with("authorization", "DPoP", &t, &[&good])).await;
        assert_eq!(status, 200, "{seen}\n{}", s.logs());
        assert_eq!(seen["identity"]["x-auth-binding"], "dpop", "{seen}");
        assert_eq!(seen["identity"]["x-auth-jkt"], key.jkt_b64());
        assert_eq!(seen["dpop_forwarded"], false, "the proof stays at the edge");
        // The same proof again, on new connections (so at every worker): refused each time.
        for _ in 0..6 {
            let (status, www, _) =
                call_with(&s.client(), &s, with("authorization", "DPoP", &t, &[&good])).await;
            assert!(
                refused(status, &www, "invalid_dpop_proof"),
                "{status} {www}"
            );
            assert!(
                www.starts_with("DPoP ") && www.contains("algs=\"ES256 EdDSA\""),
                "{www}"
            );
        }
        let p = proof(&key, "POST", &find_url(&s), Some(&t), None);
        let (status, _, _) = call(&s, with("serviceauthorization", "DPoP", &t, &[&p])).await;
        assert_eq!(status, 200, "the alternative header");
        // Never as a bearer token, with or without a proof, in either header.
        for header in ["authorization", "serviceauthorization"] {
            let p = proof(&key, "POST", &find_url(&s), Some(&t), None);
            for proofs in [vec![], vec![p.as_str()]] {
                let (status, www, _) = call(&s, with(header, "Bearer", &t, &proofs)).await;
                assert!(
                    refused(status, &www, "invalid_token"),
                    "{header}: {status} {www}"
                );
            }
        }
    }
    let bearer = token_with(&s, HeaderMap::new()).await.2["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let p = proof(&es(), "POST", &find_url(&s), Some(&bearer), None);
    let (status, www, _) = call(&s, with("authorization", "DPoP", &bearer, &[&p])).await;
    assert!(
        refused(status, &www, "invalid_token") && www.starts_with("DPoP "),
        "{www}"
    );
    let c = s.counters().await.unwrap();
    assert_eq!(c["dpop_allowed"], 4, "{c:?}");
    assert_eq!(c["dpop_replayed"], 12, "{c:?}");
    assert_eq!(c["bound_as_bearer"], 8, "{c:?}");
    assert_eq!(c["unbound_as_dpop"], 1, "{c:?}");
    assert!(s.stop());
}

/// Proofs well signed and wrong in one way each; every one refused by the filter, and the token
/// still works with a good proof afterwards.
#[tokio::test]
async fn every_hostile_proof_is_refused_at_the_edge() {
    let Some((_tmp, s)) = stack(&[]).await else {
        return;
    };
    let key = es();
    let t = bound_token(&s, &key).await;
    let url = find_url(&s);
    let tk = Some(t.as_str());
    let private: Value = serde_json::from_str(&key.private_jwk()).unwrap();
    let other_host = url
        .replace("127.0.0.1", "evil.example.com")
        .replace("localhost", "evil.example.com");
    let good = proof(&key, "POST", &url, tk, None);
    let cases: Vec<(&str, String)> = vec![
        (
            "alg none",
            hostile(&key, &url, tk, json!({"alg": "none"}), json!({})),
        ),
        (
            "HS256",
            hostile(&key, &url, tk, json!({"alg": "HS256"}), json!({})),
        ),
        (
            "RS256",
            hostile(&key, &url, tk, json!({"alg": "RS256"}), json!({})),
        ),
        (
            "private jwk",
            hostile(&key, &url, tk, json!({"jwk": private}), json!({})),
        ),
        (
            "RSA jwk",
            hostile(
                &key,
                &url,
                tk,
                json!({"jwk": {"kty": "RSA", "n": "AQAB", "e": "AQAB"}}),
                json!({}),
            ),
        ),
        (
            "Ed25519 jwk for ES256",
            hostile(
                &key,
                &url,
                tk,
                json!({"jwk": serde_json::from_str::<Value>(&ed().public_jwk()).unwrap()}),
                json!({}),
            ),
        ),
        (
            "typ jwt",
            hostile(&key, &url, tk, json!({"typ": "jwt"}), json!({})),
        ),
        (
            "htm GET",
            hostile(&key, &url, tk, json!({}), json!({"htm": "GET"})),
        ),
        (
            "htm post",
            hostile(&key, &url, tk, json!({}), json!({"htm": "post"})),
        ),
        (
            "trailing slash",
            hostile(&key, &url, tk, json!({}), json!({"htu": format!("{url}/")})),
        ),
        (
            "other host",
            hostile(&key, &url, tk, json!({}), json!({"htu": other_host})),
        ),
        (
            "http",
            hostile(
                &key,
                &url,
                tk,
                json!({}),
                json!({"htu": url.replacen("https:", "http:", 1)}),
            ),
        ),
        (
            "other path",
            hostile(
                &key,
                &url,
                tk,
                json!({}),
                json!({"htu": url.replace("Find", "Delete")}),
            ),
        ),
        (
            "iat old",
            hostile(&key, &url, tk, json!({}), json!({"iat": now() - 3600})),
        ),
        (
            "iat ahead",
            hostile(&key, &url, tk, json!({}), json!({"iat": now() + 3600})),
        ),
        (
            "wrong ath",
            hostile(&key, &url, Some("mmat2.other"), json!({}), json!({})),
        ),
        ("no ath", hostile(&key, &url, None, json!({}), json!({}))),
        ("other key", proof(&ed(), "POST", &url, tk, None)),
        (
            "oversized",
            hostile(&key, &url, tk, json!({}), json!({"pad": "x".repeat(9000)})),
        ),
        ("not a JWS", "not.a.jws".to_owned()),
        ("comma-joined", format!("{good},{good}")),
    ];
    for (what, p) in &cases {
        let (status, www, _) = call(&s, with("authorization", "DPoP", &t, &[p])).await;
        assert!(
            refused(status, &www, "invalid_dpop_proof"),
            "{what}: {status} {www}"
        );
    }
    let two = [good.as_str(), good.as_str()];
    let (status, www, _) = call(&s, with("authorization", "DPoP", &t, &two)).await;
    assert!(
        refused(status, &www, "invalid_dpop_proof"),
        "two headers: {status} {www}"
    );
    // Bytes that are not UTF-8: Envoy or the filter refuses, never the upstream.
    let mut raw = with("authorization", "DPoP", &t, &[]);
    raw.insert("dpop", HeaderValue::from_bytes(b"eyJ\xff\xfe.x.y").unwrap());
    let (status, _, _) = call(&s, raw).await;
    assert!(status.is_client_error(), "not UTF-8: {status}");
    // Accepted: the query and fragment ignored, scheme and host in any case (RFC 3986).
    let upper = url.replacen("https://", "HTTPS://", 1);
    for htu in [format!("{url}?q=1#f"), upper] {
        let p = hostile(&key, &url, tk, json!({}), json!({"htu": htu}));
        let (status, www, _) = call(&s, with("authorization", "DPoP", &t, &[&p])).await;
        assert_eq!(status, 200, "{htu}: {www}");
    }
    let (status, _, _) = call(&s, with("authorization", "DPoP", &t, &[&good])).await;
    assert_eq!(status, 200, "no refusal spent the good proof");
    let c = s.counters().await.unwrap();
    // Each case and the two headers; the bytes that are not UTF-8 too, unless Envoy refused them.
    assert!(c["dpop_invalid"] > cases.len() as u64, "{c:?}");
    assert!(s.stop());
}

/// The token endpoint (through Envoy, to the real issuer): the same hostile proofs, a replay, a
/// client that requires DPoP, and that a refused proof gets no token.
#[tokio::test]
async fn the_token_endpoint_refuses_what_the_edge_refuses() {
    let Some((_tmp, s)) = stack(&[]).await else {
        return;
    };
    let key = es();
    let url = token_url(&s);
    let used = proof(&key, "POST", &url, None, None);
    assert_eq!(token_with(&s, dpop_header(&used)).await.0, 200);
    let cases: Vec<(&str, String)> = vec![
        ("replayed", used.clone()),
        (
            "alg none",
            hostile(&key, &url, None, json!({"alg": "none"}), json!({})),
        ),
        (
            "HS256",
            hostile(&key, &url, None, json!({"alg": "HS256"}), json!({})),
        ),
        (
            "private jwk",
            hostile(
                &key,
                &url,
                None,
                json!({"jwk": serde_json::from_str::<Value>(&key.private_jwk()).unwrap()}),
                json!({}),
            ),
        ),
        (
            "typ",
            hostile(&key, &url, None, json!({"typ": "JWT"}), json!({})),
        ),
        (
            "htm",
            hostile(&key, &url, None, json!({}), json!({"htm": "GET"})),
        ),
        (
            "htu",
            hostile(&key, &url, None, json!({}), json!({"htu": find_url(&s)})),
        ),
        (
            "trailing slash",
            hostile(
                &key,
                &url,
                None,
                json!({}),
                json!({"htu": format!("{url}/")}),
            ),
        ),
        (
            "iat old",
            hostile(&key, &url, None, json!({}), json!({"iat": now() - 3600})),
        ),
        (
            "iat ahead",
            hostile(&key, &url, None, json!({}), json!({"iat": now() + 3600})),
        ),
        (
            "oversized",
            hostile(
                &key,
                &url,
                None,
                json!({}),
                json!({"pad": "x".repeat(9000)}),
            ),
        ),
        ("comma-joined", format!("{used},{used}")),
    ];
    for (what, p) in &cases {
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
    // A client that requires DPoP gets nothing without a proof, a bound token with one.
    s.admin(&["client", "dpop", demo::CLIENT, "required"], None)
        .unwrap();
    let (status, _, v) = token_with(&s, HeaderMap::new()).await;
    assert_eq!(
        (status.as_u16(), v["error"].as_str()),
        (400, Some("invalid_dpop_proof")),
        "{v}"
    );
    let (status, _, v) = token_with(&s, dpop_header(&proof(&key, "POST", &url, None, None))).await;
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
    assert!(s.stop());
}

/// Nonces required at the issuer and at the edge: a proof without one is answered with one, and
/// the retry with it passes; a nonce that is not the servers' never does.
#[tokio::test]
async fn nonces_are_asked_for_and_then_accepted() {
    let Some((_tmp, mut s)) = stack(&["--dpop-nonce", "required"]).await else {
        return;
    };
    s.restart_envoy_edited(|cfg| cfg["dpop"] = json!({"require_nonce": true}))
        .unwrap();
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

/// A small replay memory fills: new proofs are answered 503 with Retry-After, never accepted
/// unrecorded.
#[tokio::test]
async fn a_full_replay_memory_answers_503() {
    let Some((_tmp, mut s)) = stack(&[]).await else {
        return;
    };
    s.restart_envoy_edited(|cfg| cfg["dpop"] = json!({"replay_entries": 1000}))
        .unwrap();
    let key = es();
    let t = bound_token(&s, &key).await;
    let http = s.client();
    let mut allowed = 0;
    for _ in 0..1_100 {
        let p = proof(&key, "POST", &find_url(&s), Some(&t), None);
        let r = http
            .post(find_url(&s))
            .headers(with("authorization", "DPoP", &t, &[&p]))
            .body("{}")
            .send()
            .await
            .unwrap();
        match r.status().as_u16() {
            200 => allowed += 1,
            503 => {
                assert_eq!(r.headers()["retry-after"], "1");
                assert!(allowed <= 1_024, "{allowed}");
                let c = s.counters().await.unwrap();
                assert!(c["dpop_replay_full"] >= 1, "{c:?}");
                assert!(s.stop());
                return;
            }
            other => panic!("{other}"),
        }
    }
    panic!("1,100 proofs accepted by a memory of 1,000");
}

/// A family started with a proof is bound: a refresh without a proof, or with another key's, is
/// refused and leaves the family usable; with the key it rotates and gives a bound token.
#[tokio::test]
async fn a_bound_refresh_token_needs_its_key() {
    let Some((_tmp, s)) = stack(&[]).await else {
        return;
    };
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
