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

pub(super) fn es() -> ProofKey {
    ProofKey::es256([0x11; 32]).unwrap()
}

pub(super) fn ed() -> ProofKey {
    ProofKey::ed25519([0x22; 32])
}

pub(super) fn now() -> u64 {
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
pub(super) fn proof(
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
pub(super) fn hostile(
    key: &ProofKey,
    url: &str,
    token: Option<&str>,
    header: Value,
    claims: Value,
) -> String {
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

pub(super) fn token_url(s: &Stack) -> String {
    format!("{}/apiv2/oauth/token", s.url())
}

pub(super) fn find_url(s: &Stack) -> String {
    format!("{}/apiv2/MediaService/Find", s.url())
}

/// A client credentials token request through Envoy with these extra headers.
pub(super) async fn token_with(s: &Stack, headers: HeaderMap) -> (StatusCode, HeaderMap, Value) {
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

pub(super) fn dpop_header(proof: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert("dpop", HeaderValue::from_str(proof).unwrap());
    h
}

/// A bound token for `key`, from the real issuer through Envoy.
pub(super) async fn bound_token(s: &Stack, key: &ProofKey) -> String {
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
pub(super) async fn call(s: &Stack, headers: HeaderMap) -> (StatusCode, String, Value) {
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

pub(super) fn with(scheme_header: &str, scheme: &str, token: &str, proofs: &[&str]) -> HeaderMap {
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

/// Who verifies the Wasm filter's ES256 proofs: the host (Envoy's BoringSSL, through
/// `verify_signature`, when it answers the known answer rightly: this Envoy does) and the
/// module's own code, which `"dpop": {"es256_verifier": "module"}` forces. The DPoP tests here
/// run on both; the native filter verifies with `ring` either way, and runs them twice alike.
pub(super) const ES256_PATHS: [&str; 2] = ["auto", "module"];

/// (Re)starts the stack's Envoy with ES256 proofs verified on `path` ([`ES256_PATHS`]) and
/// waits until proofs pass; for the Wasm filter, checks that its VMs counted the path they took
/// (the log line that says it is at info, below this Envoy's log level).
pub(super) async fn use_es256_path(s: &mut Stack, path: &str) {
    s.restart_envoy_edited(|c| c["dpop"]["es256_verifier"] = json!(path))
        .unwrap();
    s.dpop_ready().await;
    if let e2e::Filter::Wasm = s.tools.filter {
        let c = s.counters().await.unwrap();
        let (took, other) = match path {
            "module" => ("dpop_es256_module", "dpop_es256_host"),
            _ => ("dpop_es256_host", "dpop_es256_module"),
        };
        assert!(c.get(took).copied().unwrap_or(0) > 0, "{path}: {c:?}");
        assert_eq!(c.get(other).copied().unwrap_or(0), 0, "{path}: {c:?}");
    }
}

pub(super) fn refused(status: StatusCode, www: &str, code: &str) -> bool {
    status == 401 && www.contains(&format!("error=\"{code}\""))
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_bound_token_passes_only_with_a_fresh_proof_by_its_key() {
    let (_tmp, mut s) = stack(&[]).await;
    for path in ES256_PATHS {
        use_es256_path(&mut s, path).await;
        a_bound_token_passes_only_with_a_fresh_proof_on(&s).await;
    }
    assert!(s.stop());
}

async fn a_bound_token_passes_only_with_a_fresh_proof_on(s: &Stack) {
    for key in [es(), ed()] {
        let t = bound_token(s, &key).await;
        let good = proof(&key, "POST", &find_url(s), Some(&t), None);
        let (status, _, seen) = call(s, with("authorization", "DPoP", &t, &[&good])).await;
        assert_eq!(status, 200, "{seen}\n{}", s.logs());
        assert_eq!(seen["identity"]["x-auth-binding"], "dpop", "{seen}");
        assert_eq!(seen["identity"]["x-auth-jkt"], key.jkt_b64());
        assert_eq!(seen["dpop_forwarded"], false, "the proof stays at the edge");
        // The same proof again, on new connections (so at every worker): refused each time.
        for _ in 0..6 {
            let (status, www, _) =
                call_with(&s.client(), s, with("authorization", "DPoP", &t, &[&good])).await;
            assert!(
                refused(status, &www, "invalid_dpop_proof"),
                "{status} {www}"
            );
            assert!(
                www.starts_with("DPoP ") && www.contains("algs=\"ES256 EdDSA\""),
                "{www}"
            );
        }
        let p = proof(&key, "POST", &find_url(s), Some(&t), None);
        let (status, _, _) = call(s, with("serviceauthorization", "DPoP", &t, &[&p])).await;
        assert_eq!(status, 200, "the alternative header");
        // Never as a bearer token, with or without a proof, in either header.
        for header in ["authorization", "serviceauthorization"] {
            let p = proof(&key, "POST", &find_url(s), Some(&t), None);
            for proofs in [vec![], vec![p.as_str()]] {
                let (status, www, _) = call(s, with(header, "Bearer", &t, &proofs)).await;
                assert!(
                    refused(status, &www, "invalid_token"),
                    "{header}: {status} {www}"
                );
            }
        }
    }
    let bearer = token_with(s, HeaderMap::new()).await.2["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let p = proof(&es(), "POST", &find_url(s), Some(&bearer), None);
    let (status, www, _) = call(s, with("authorization", "DPoP", &bearer, &[&p])).await;
    assert!(
        refused(status, &www, "invalid_token") && www.starts_with("DPoP "),
        "{www}"
    );
    let c = s.counters().await.unwrap();
    assert_eq!(c["dpop_allowed"], 4, "{c:?}");
    assert_eq!(c["dpop_replayed"], 12, "{c:?}");
    assert_eq!(c["bound_as_bearer"], 8, "{c:?}");
    assert_eq!(c["unbound_as_dpop"], 1, "{c:?}");
}

/// Proofs well signed and wrong in one way each; every one refused by the filter, and the token
/// still works with a good proof afterwards.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn every_hostile_proof_is_refused_at_the_edge() {
    let (_tmp, mut s) = stack(&[]).await;
    for path in ES256_PATHS {
        use_es256_path(&mut s, path).await;
        every_hostile_proof_is_refused_on(&s).await;
    }
    assert!(s.stop());
}

async fn every_hostile_proof_is_refused_on(s: &Stack) {
    let key = es();
    let t = bound_token(s, &key).await;
    let url = find_url(s);
    let tk = Some(t.as_str());
    let good = proof(&key, "POST", &url, tk, None);
    let mut cases = hostile_cases(&key, &url, tk);
    cases.extend(hostile_signatures(&key, &url, tk, &good));
    for (what, p) in &cases {
        let (status, www, _) = call(s, with("authorization", "DPoP", &t, &[p])).await;
        assert!(
            refused(status, &www, "invalid_dpop_proof"),
            "{what}: {status} {www}"
        );
    }
    let two = [good.as_str(), good.as_str()];
    let (status, www, _) = call(s, with("authorization", "DPoP", &t, &two)).await;
    assert!(
        refused(status, &www, "invalid_dpop_proof"),
        "two headers: {status} {www}"
    );
    // Bytes that are not UTF-8: Envoy or the filter refuses, never the upstream.
    let mut raw = with("authorization", "DPoP", &t, &[]);
    raw.insert("dpop", HeaderValue::from_bytes(b"eyJ\xff\xfe.x.y").unwrap());
    let (status, _, _) = call(s, raw).await;
    assert!(status.is_client_error(), "not UTF-8: {status}");
    // Accepted: the other `s` of a signature (WebCrypto makes both, BoringSSL and the module
    // take both).
    let p = proof(&key, "POST", &url, tk, None);
    let high = resigned(&p, |sig| {
        let s = n_minus(&sig[32..].try_into().unwrap());
        sig[32..].copy_from_slice(&s);
    });
    let (status, www, _) = call(s, with("authorization", "DPoP", &t, &[&high])).await;
    assert_eq!(status, 200, "the other s: {www}");
    // Accepted: the query and fragment ignored, scheme and host in any case (RFC 3986).
    let upper = url.replacen("https://", "HTTPS://", 1);
    for htu in [format!("{url}?q=1#f"), upper] {
        let p = hostile(&key, &url, tk, json!({}), json!({"htu": htu}));
        let (status, www, _) = call(s, with("authorization", "DPoP", &t, &[&p])).await;
        assert_eq!(status, 200, "{htu}: {www}");
    }
    let (status, _, _) = call(s, with("authorization", "DPoP", &t, &[&good])).await;
    assert_eq!(status, 200, "no refusal spent the good proof");
    let c = s.counters().await.unwrap();
    // Each case and the two headers; the bytes that are not UTF-8 too, unless Envoy refused them.
    assert!(c["dpop_invalid"] > cases.len() as u64, "{c:?}");
}

/// Proofs by `key` for `url` and token `tk`, each well signed and wrong in one way (the first
/// half of the cases: the header and the claims).
fn hostile_cases(key: &ProofKey, url: &str, tk: Option<&str>) -> Vec<(&'static str, String)> {
    let private: Value = serde_json::from_str(&key.private_jwk()).unwrap();
    let other_host = url
        .replace("127.0.0.1", "evil.example.com")
        .replace("localhost", "evil.example.com");
    vec![
        (
            "alg none",
            hostile(key, url, tk, json!({"alg": "none"}), json!({})),
        ),
        (
            "HS256",
            hostile(key, url, tk, json!({"alg": "HS256"}), json!({})),
        ),
        (
            "RS256",
            hostile(key, url, tk, json!({"alg": "RS256"}), json!({})),
        ),
        (
            "private jwk",
            hostile(key, url, tk, json!({"jwk": private}), json!({})),
        ),
        (
            "RSA jwk",
            hostile(
                key,
                url,
                tk,
                json!({"jwk": {"kty": "RSA", "n": "AQAB", "e": "AQAB"}}),
                json!({}),
            ),
        ),
        (
            "Ed25519 jwk for ES256",
            hostile(
                key,
                url,
                tk,
                json!({"jwk": serde_json::from_str::<Value>(&ed().public_jwk()).unwrap()}),
                json!({}),
            ),
        ),
        (
            "typ jwt",
            hostile(key, url, tk, json!({"typ": "jwt"}), json!({})),
        ),
        (
            "htm GET",
            hostile(key, url, tk, json!({}), json!({"htm": "GET"})),
        ),
        (
            "htm post",
            hostile(key, url, tk, json!({}), json!({"htm": "post"})),
        ),
        (
            "trailing slash",
            hostile(key, url, tk, json!({}), json!({"htu": format!("{url}/")})),
        ),
        (
            "other host",
            hostile(key, url, tk, json!({}), json!({"htu": other_host})),
        ),
        (
            "http",
            hostile(
                key,
                url,
                tk,
                json!({}),
                json!({"htu": url.replacen("https:", "http:", 1)}),
            ),
        ),
        (
            "other path",
            hostile(
                key,
                url,
                tk,
                json!({}),
                json!({"htu": url.replace("Find", "Delete")}),
            ),
        ),
    ]
}

/// The other half of the cases: the signature, the key, the framing; `good` a proof that passes.
fn hostile_signatures(
    key: &ProofKey,
    url: &str,
    tk: Option<&str>,
    good: &str,
) -> Vec<(&'static str, String)> {
    vec![
        (
            "iat old",
            hostile(key, url, tk, json!({}), json!({"iat": now() - 3600})),
        ),
        (
            "iat ahead",
            hostile(key, url, tk, json!({}), json!({"iat": now() + 3600})),
        ),
        (
            "wrong ath",
            hostile(key, url, Some("mmat2.other"), json!({}), json!({})),
        ),
        ("no ath", hostile(key, url, None, json!({}), json!({}))),
        ("other key", proof(&ed(), "POST", url, tk, None)),
        (
            "oversized",
            hostile(key, url, tk, json!({}), json!({"pad": "x".repeat(9000)})),
        ),
        ("not a JWS", "not.a.jws".to_owned()),
        ("signature changed", resigned(good, |sig| sig[5] ^= 1)),
        ("r zero", resigned(good, |sig| sig[..32].fill(0))),
        (
            "s the group order",
            resigned(good, |sig| sig[32..].copy_from_slice(&N)),
        ),
        (
            "signature short",
            resigned_as(good, |sig| sig[..63].to_vec()),
        ),
        ("signature in DER", resigned_as(good, der_signature)),
        ("key off the curve", off_curve(key, url, tk)),
        ("comma-joined", format!("{good},{good}")),
    ]
}

/// The order of P-256's group, big-endian.
const N: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// `N - s`, for `0 < s < N`.
fn n_minus(s: &[u8; 32]) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut borrow = 0i16;
    for i in (0..32).rev() {
        let d = i16::from(N[i]) - i16::from(s[i]) - borrow;
        borrow = i16::from(d < 0);
        out[i] = (d + 256 * borrow) as u8;
    }
    out
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

fn unb64(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .unwrap()
}

/// `proof` with its ES256 signature bytes replaced by `change` of them.
fn resigned_as(proof: &str, change: impl FnOnce(&[u8; 64]) -> Vec<u8>) -> String {
    let (head, sig) = proof.rsplit_once('.').unwrap();
    let sig: [u8; 64] = unb64(sig).try_into().unwrap();
    format!("{head}.{}", b64(&change(&sig)))
}

/// `proof` with its ES256 signature changed in place by `change`.
fn resigned(proof: &str, change: impl FnOnce(&mut [u8; 64])) -> String {
    resigned_as(proof, |sig| {
        let mut sig = *sig;
        change(&mut sig);
        sig.to_vec()
    })
}

/// The `ECDSA-Sig-Value` DER of a raw signature, as the host takes it (never a proof's form).
fn der_signature(raw: &[u8; 64]) -> Vec<u8> {
    shared::dpop::der::es256_sig_der(raw).as_bytes().to_vec()
}

/// A proof signed by `key`, whose header's `jwk` names a point off the curve (`y` changed).
fn off_curve(key: &ProofKey, url: &str, token: Option<&str>) -> String {
    let mut jwk: Value = serde_json::from_str(&key.public_jwk()).unwrap();
    let mut y = unb64(jwk["y"].as_str().unwrap());
    y[31] ^= 1;
    jwk["y"] = json!(b64(&y));
    hostile(key, url, token, json!({ "jwk": jwk }), json!({}))
}
