//! End to end through a real Envoy loading the real `filter.wasm`, with the real issuer and a
//! media upstream that reports what reached it. Everything on 127.0.0.1; each test has its own
//! stack (ports, data dir, Envoy) in a temp dir.

use crate::stack;
use e2e::{demo, Stack};
use reqwest::StatusCode;
use serde_json::{json, Value};
use shared::token::{self, TokenBody};
use shared::Key;

/// Token endpoint through Envoy (TLS).
async fn token(s: &Stack, form: &[(&str, &str)]) -> Value {
    let r = s
        .client()
        .post(format!("{}/apiv2/oauth/token", s.url()))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(form)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["content-type"],
        "application/json;charset=UTF-8"
    );
    let v: Value = r.json().await.unwrap();
    assert!(v["access_token"].is_string(), "{v}\n{}", s.logs());
    v
}

async fn password(s: &Stack) -> Value {
    token(
        s,
        &[
            ("grant_type", "password"),
            ("username", demo::USER),
            ("password", demo::PASSWORD),
        ],
    )
    .await
}

/// A protected call with these headers: status, WWW-Authenticate, JSON body.
async fn find(s: &Stack, headers: &[(&str, &str)]) -> (StatusCode, Option<String>, Value) {
    find_at(s, "/apiv2/MediaService/Find", headers).await
}

async fn find_at(
    s: &Stack,
    path: &str,
    headers: &[(&str, &str)],
) -> (StatusCode, Option<String>, Value) {
    let mut req = s
        .client()
        .post(format!("{}{path}", s.url()))
        .header("content-type", "application/json; charset=UTF-8")
        .body("{}");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.unwrap();
    let status = r.status();
    let www = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_owned());
    let body = r.json().await.unwrap_or(Value::Null);
    (status, www, body)
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

const SPOOFED: [(&str, &str); 4] = [
    ("x-auth-subject", "admin"),
    ("x-auth-roles", "superuser"),
    ("x-auth-client", "spoofed"),
    ("x-auth-claims", "upn=admin"),
];

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn tokens_from_every_grant_pass_and_the_upstream_sees_who() {
    let (_tmp, s) = stack(&[]).await;
    step_a_user_s_tokens_pass_with_who_they_are(&s).await;
    let cc = step_a_client_s_token_passes_in_the_other_header(&s).await;
    step_impersonated_tokens_pass_as_who_they_name(&s).await;
    // The same token in both headers is one token.
    let t = bearer(cc["access_token"].as_str().unwrap());
    assert_eq!(
        find(&s, &[("authorization", &t), ("ServiceAuthorization", &t)])
            .await
            .0,
        200
    );
    let c = s.counters().await.unwrap();
    assert_eq!(c.get("allowed"), Some(&6), "{c:?}");
    assert_eq!(
        c.get("exempt"),
        Some(&0),
        "the five token requests go by the issuer's route, where the filter is off: {c:?}"
    );
    assert!(s.stop(), "a process did not stop cleanly");
}

/// Step: the password grant's token through Envoy over TLS, and the refreshed one's: the
/// upstream sees the user, client, roles, claims, token id and expiry.
async fn step_a_user_s_tokens_pass_with_who_they_are(s: &Stack) {
    let pw = password(s).await;
    let (status, _, seen) = find(
        s,
        &[(
            "authorization",
            &bearer(pw["access_token"].as_str().unwrap()),
        )],
    )
    .await;
    assert_eq!(status, 200, "{seen}\n{}", s.logs());
    assert_eq!(seen["path"], "/apiv2/MediaService/Find");
    assert_eq!(seen["identity"]["x-auth-subject"], demo::USER);
    assert_eq!(seen["identity"]["x-auth-subject-kind"], "user");
    assert_eq!(seen["identity"]["x-auth-client"], demo::CLIENT);
    assert_eq!(seen["identity"]["x-auth-roles"], "viewer,editor");
    assert_eq!(seen["identity"]["x-auth-claims"], "email=demo@example.com");
    let body = token::inspect(pw["access_token"].as_str().unwrap()).unwrap();
    assert_eq!(seen["identity"]["x-auth-token-id"], body.jti_hex());
    assert_eq!(seen["identity"]["x-auth-expires"], body.exp.to_string());
    // Refreshed.
    let refreshed = token(
        s,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", pw["refresh_token"].as_str().unwrap()),
        ],
    )
    .await;
    let (status, _, seen) = find(
        s,
        &[(
            "authorization",
            &bearer(refreshed["access_token"].as_str().unwrap()),
        )],
    )
    .await;
    assert_eq!(
        (status, seen["identity"]["x-auth-subject"].clone()),
        (StatusCode::OK, json!(demo::USER))
    );
}

/// Step: client credentials, in the alternative header. The token's answer.
async fn step_a_client_s_token_passes_in_the_other_header(s: &Stack) -> Value {
    let cc = token(s, &[("grant_type", "client_credentials")]).await;
    let (status, _, seen) = find(
        s,
        &[(
            "ServiceAuthorization",
            &bearer(cc["access_token"].as_str().unwrap()),
        )],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(seen["identity"]["x-auth-subject-kind"], "client");
    assert_eq!(seen["identity"]["x-auth-subject"], demo::CLIENT);
    cc
}

/// Step: impersonated (claims, and the obsolete pair), with a lower-case and an upper-case
/// scheme.
async fn step_impersonated_tokens_pass_as_who_they_name(s: &Stack) {
    let imp = token(
        s,
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_claims", "upn=carol@corp, group=ops"),
        ],
    )
    .await;
    let (status, _, seen) = find(
        s,
        &[(
            "authorization",
            &format!("bearer {}", imp["access_token"].as_str().unwrap()),
        )],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(seen["identity"]["x-auth-subject-kind"], "impersonation");
    assert_eq!(
        seen["identity"]["x-auth-claims"],
        "upn=carol@corp,group=ops"
    );
    assert_eq!(seen["identity"]["x-auth-client"], demo::CLIENT);
    let old = token(
        s,
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_as", "Zoë"),
            ("roles", "admin"),
        ],
    )
    .await;
    let (_, _, seen) = find(
        s,
        &[(
            "ServiceAuthorization",
            &format!("BEARER {}", old["access_token"].as_str().unwrap()),
        )],
    )
    .await;
    assert_eq!(seen["identity"]["x-auth-subject"], "Zo%C3%AB");
    assert_eq!(seen["identity"]["x-auth-roles"], "admin");
}

/// Every refusal of RFC 6750, one step each, and the filter's counters of them.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn refusals_follow_rfc_6750() {
    let (_tmp, mut s) = stack(&["--access-ttl", "1"]).await;
    // No clock skew in this Envoy, so the 1-second token expires at once.
    s.restart_envoy_edited(|cfg| cfg["clock_skew_seconds"] = json!(0))
        .unwrap();
    step_no_bearer_token_is_a_bare_challenge(&s).await;
    let valid = step_bad_tokens_are_invalid_token(&s).await;
    step_an_expired_token_says_it_expired(&s, &valid).await;
    step_more_than_one_token_is_invalid_request(&s).await;
    let c = s.counters().await.unwrap();
    assert_eq!(c.get("missing"), Some(&2), "{c:?}");
    assert_eq!(c.get("invalid"), Some(&3), "{c:?}");
    assert_eq!(c.get("malformed"), Some(&(2 + 3 + 1)), "{c:?}");
    assert_eq!(c.get("expired"), Some(&1), "{c:?}");
    assert_eq!(c.get("allowed").copied().unwrap_or(0), 0, "{c:?}");
    assert!(s.stop());
}

/// Step: no token, or another scheme: 401 with a bare `Bearer realm` challenge.
async fn step_no_bearer_token_is_a_bare_challenge(s: &Stack) {
    let missing = find(s, &[]).await;
    assert_eq!(
        (missing.0, missing.1.as_deref()),
        (StatusCode::UNAUTHORIZED, Some("Bearer realm=\"media\""))
    );
    let basic = find(s, &[("authorization", "Basic YTpi")]).await;
    assert_eq!(
        (basic.0, basic.1.as_deref()),
        (StatusCode::UNAUTHORIZED, Some("Bearer realm=\"media\""))
    );
}

/// Step: garbage, a forged token, one of another key and one of an unknown key: 401
/// `invalid_token`. A valid token, not sent.
async fn step_bad_tokens_are_invalid_token(s: &Stack) -> String {
    let valid = password(s).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let body: TokenBody = token::inspect(&valid).unwrap();
    let mut forged = valid.clone().into_bytes();
    forged[20] = if forged[20] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    let wrong_key = token::mint(&Key::new(body.kid, [0x42; 32]), &body).unwrap();
    let unknown_kid = token::mint(
        &Key::new(77, [0x42; 32]),
        &TokenBody {
            kid: 77,
            ..body.clone()
        },
    )
    .unwrap();
    let invalid = r#"Bearer realm="media", error="invalid_token", error_description="the access token is invalid""#;
    for t in [
        "not-a-token",
        "mmat1.AAAA.BBBB",
        forged.as_str(),
        wrong_key.as_str(),
        unknown_kid.as_str(),
    ] {
        let (status, www, body) = find(s, &[("authorization", &bearer(t))]).await;
        assert_eq!(
            (status, www.as_deref()),
            (StatusCode::UNAUTHORIZED, Some(invalid)),
            "{t}"
        );
        assert_eq!(
            body,
            json!({"error": "invalid_token", "error_description": "the access token is invalid"})
        );
    }
    valid
}

/// Step: the valid token, once expired by the filter's clock (which may lag a second): 401
/// `invalid_token`, "the access token expired".
async fn step_an_expired_token_says_it_expired(s: &Stack, valid: &str) {
    e2e::wait::until_second(token::inspect(valid).unwrap().exp + 2).await;
    let (status, www, body) = find(s, &[("authorization", &bearer(valid))]).await;
    assert_eq!(status, 401);
    assert_eq!(
        www.as_deref(),
        Some(
            r#"Bearer realm="media", error="invalid_token", error_description="the access token expired""#
        )
    );
    assert_eq!(body["error"], "invalid_token");
}

/// Step: more than one token (two headers, or both header names): 400 `invalid_request`; so
/// is `Bearer` with no token.
async fn step_more_than_one_token_is_invalid_request(s: &Stack) {
    let fresh = bearer(password(s).await["access_token"].as_str().unwrap());
    let other = bearer(
        token(s, &[("grant_type", "client_credentials")]).await["access_token"]
            .as_str()
            .unwrap(),
    );
    let bad_request = r#"Bearer realm="media", error="invalid_request", error_description="more than one access token""#;
    for headers in [
        vec![
            ("authorization", fresh.as_str()),
            ("authorization", other.as_str()),
        ],
        vec![
            ("authorization", fresh.as_str()),
            ("ServiceAuthorization", other.as_str()),
        ],
        vec![
            ("ServiceAuthorization", fresh.as_str()),
            ("ServiceAuthorization", fresh.as_str()),
        ],
    ] {
        let (status, www, body) = find(s, &headers).await;
        assert_eq!(
            (status, www.as_deref()),
            (StatusCode::BAD_REQUEST, Some(bad_request)),
            "{headers:?}"
        );
        assert_eq!(body["error"], "invalid_request");
    }
    let (status, _, _) = find(s, &[("authorization", "Bearer")]).await;
    assert_eq!(status, 400);
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn spoofed_identity_headers_never_reach_the_upstream() {
    let (_tmp, mut s) = stack(&[]).await;
    // A public path under /apiv2/ that the media service answers, to see the exempt case.
    s.restart_envoy_edited(|cfg| cfg["exempt_prefixes"] = json!(["/apiv2/public/"]))
        .unwrap();
    let t = bearer(
        token(&s, &[("grant_type", "client_credentials")]).await["access_token"]
            .as_str()
            .unwrap(),
    );

    let mut with_token = SPOOFED.to_vec();
    with_token.push(("authorization", &t));
    let (status, _, seen) = find(&s, &with_token).await;
    assert_eq!(status, 200);
    assert_eq!(seen["identity"]["x-auth-subject"], demo::CLIENT);
    assert_eq!(seen["identity"]["x-auth-client"], demo::CLIENT);
    assert!(
        seen["identity"].get("x-auth-roles").is_none()
            && seen["identity"].get("x-auth-claims").is_none(),
        "{seen}"
    );

    let (status, _, seen) = find_at(&s, "/apiv2/public/catalog", &SPOOFED).await;
    assert_eq!(status, 200);
    assert_eq!(seen["identity"], json!({}), "exempt path leaked: {seen}");

    let mut with_bad = SPOOFED.to_vec();
    with_bad.push(("authorization", "Bearer mmat1.forged.nope"));
    let (status, _, _) = find(&s, &with_bad).await;
    assert_eq!(status, 401, "an invalid token never reaches the upstream");
    // Path tricks do not turn a protected path into an exempt one. Sent as raw bytes: a client
    // library would resolve the dot segments itself. `..;` is a dot segment to Tomcat, Jetty and
    // Spring, and not to Envoy, so the filter exempts no path with a `;`.
    for path in [
        "/apiv2/public/../MediaService/Find",
        "/apiv2/public/%2e%2e/MediaService/Find",
        "/apiv2/public/..;/MediaService/Find",
        "/apiv2/public/%2e%2e;/MediaService/Find",
        "/apiv2/public/catalog;jsessionid=1",
    ] {
        let spoofed: Vec<String> = SPOOFED.iter().map(|(n, v)| format!("{n}: {v}")).collect();
        let spoofed: Vec<&str> = spoofed.iter().map(String::as_str).collect();
        let a = s.raw_get(path, &spoofed).await.unwrap();
        assert!(
            matches!(a.status, 400 | 401 | 404) && !a.from_media(),
            "{path} reached the upstream: {a:?}"
        );
    }
    assert!(s.stop());
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn key_rotation_keeps_old_tokens_until_their_key_retires() {
    let (_tmp, mut s) = stack(&[]).await;
    let cc = [("grant_type", "client_credentials")];
    let old = token(&s, &cc).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    // Publish key 2 first, then give Envoy the new configuration, then key 2 starts signing.
    assert!(s
        .admin(&["keys", "rotate", "--delay", "3"], None)
        .unwrap()
        .contains("key 2 is published"));
    s.restart_envoy().unwrap();
    let new = e2e::wait::until_some(e2e::wait::LONG, async || {
        let t = token(&s, &cc).await["access_token"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            find(&s, &[("authorization", &bearer(&t))]).await.0,
            200,
            "no token is refused during the rotation"
        );
        Some(t).filter(|t| token::inspect(t).unwrap().kid == 2)
    });
    let new = new.await.expect("key 2 never started signing");
    assert_eq!(
        find(&s, &[("authorization", &bearer(&old))]).await.0,
        200,
        "the old key still verifies"
    );
    let list = s.admin(&["keys", "list"], None).unwrap();
    assert!(
        list.contains("verifying") && list.contains("signing"),
        "{list}"
    );
    // Once key 1 retires it leaves the configuration, and its tokens fail.
    s.restart_envoy_edited(|cfg| {
        let keys: Vec<Value> = cfg["keys"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|k| k["kid"] != 1)
            .cloned()
            .collect();
        cfg["keys"] = Value::Array(keys);
    })
    .unwrap();
    assert_eq!(find(&s, &[("authorization", &bearer(&old))]).await.0, 401);
    assert_eq!(find(&s, &[("authorization", &bearer(&new))]).await.0, 200);
    assert!(s.stop());
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_cached_token_is_refused_once_it_expires() {
    // Tokens of 3 s, and 1 s of clock skew in this Envoy (its clock, read once a second, may be
    // a second behind the issuer's).
    let (_tmp, mut s) = stack(&["--access-ttl", "3"]).await;
    s.restart_envoy_edited(|cfg| cfg["clock_skew_seconds"] = json!(1))
        .unwrap();
    let t = password(&s).await["access_token"]
        .as_str()
        .unwrap()
        .to_owned();
    let exp = token::inspect(&t).unwrap().exp;
    for _ in 0..5 {
        assert_eq!(find(&s, &[("authorization", &bearer(&t))]).await.0, 200);
    }
    // Expired beyond the skew by the filter's clock, which may lag a second.
    e2e::wait::until_second(exp + 3).await;
    let (status, www, _) = find(&s, &[("authorization", &bearer(&t))]).await;
    assert_eq!(status, 401);
    assert!(www.unwrap().contains("the access token expired"));
    let c = s.counters().await.unwrap();
    assert_eq!((c["allowed"], c["expired"]), (5, 1), "{c:?}");
    assert!(s.stop());
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_bad_configuration_never_yields_an_open_filter() {
    let (_tmp, mut s) = stack(&[]).await;
    let err = s.restart_envoy_with(r#"{"keys": []}"#).unwrap_err();
    assert!(format!("{err:#}").contains("at least one key"), "{err:#}");
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn refused_uploads_get_their_answer_over_http2() {
    // Envoy answers as soon as the headers are refused and then resets the rest of the upload with
    // RST_STREAM(NO_ERROR) (RFC 9113 section 8.1); a compliant client keeps the answer.
    let (_tmp, s) = stack(&[]).await;
    let http = s.client();
    let body = vec![b'x'; 256 * 1024];
    for _ in 0..20 {
        let r = http
            .post(format!("{}/apiv2/MediaService/Find", s.url()))
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.version(), reqwest::Version::HTTP_2);
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["www-authenticate"], "Bearer realm=\"media\"");
    }
    assert_eq!(s.counters().await.unwrap().get("missing"), Some(&20));
    assert!(s.stop());
}

/// The native filter is built for the ABI version of the Envoy that loads it (every start checks
/// this, [`e2e::envoy::abi_check`]; here it is seen matched); the Wasm filter loads no module.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn the_native_filter_speaks_this_envoys_abi() {
    let (_tmp, s) = stack(&[]).await;
    let log = s.envoy_log();
    match s.tools.filter {
        e2e::Filter::Native(_) => {
            assert!(log.contains(e2e::envoy::ABI_MATCHED), "{log}");
        }
        e2e::Filter::Wasm => assert!(!log.contains("Dynamic module"), "{log}"),
    }
}

/// The first outside probe's finding 8 (info): the metadata named the internal address as the issuer.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn the_metadata_names_the_public_url() {
    let (_tmp, s) = stack(&[]).await;
    let m: Value = s
        .client()
        .get(format!(
            "{}/.well-known/oauth-authorization-server",
            s.url()
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(m["issuer"], s.url());
    assert_eq!(
        m["token_endpoint"],
        format!("{}/apiv2/oauth/token", s.url())
    );
    assert!(s.stop());
}
