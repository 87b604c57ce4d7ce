//! Hostile input through the real stack (Envoy with the filter, and the issuer behind it). Each
//! case's expected answer is documented in `docs/hostile-input.md`; no client mistake may produce a
//! 5xx, and the filter's VM must survive all of it.

use crate::edge::client_token;
use crate::sign_in::sign_in;
use crate::stack;
use e2e::raw::http_get;
use e2e::Tools;
use e2e::{demo, Stack};
use reqwest::header::HeaderValue;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn token_call(
    s: &Stack,
    content_type: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> (StatusCode, String) {
    let mut req = s
        .client()
        .post(format!("{}/apiv2/oauth/token", s.url()))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .body(body);
    if let Some(ct) = content_type {
        req = req.header("content-type", ct);
    }
    let r = req.send().await.unwrap();
    (r.status(), r.text().await.unwrap_or_default())
}

const FORM: Option<&str> = Some("application/x-www-form-urlencoded");

async fn valid_token(s: &Stack) -> String {
    let (status, body) = token_call(s, FORM, "grant_type=client_credentials").await;
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v["access_token"].as_str().unwrap().to_owned()
}

/// The filter still works after whatever came before (its VM did not trap).
async fn filter_alive(s: &Stack, token: &str) {
    let r = s
        .client()
        .post(format!("{}/apiv2/MediaService/Find", s.url()))
        .bearer_auth(token)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "the filter stopped working");
}

/// A hostile body at the token endpoint: (case, content type, body, status, error code).
type BodyCase = (
    &'static str,
    Option<&'static str>,
    Vec<u8>,
    u16,
    &'static str,
);

/// Bodies the issuer refuses for their size or encoding, each with its status and error code.
fn oversized_or_misencoded_bodies() -> Vec<BodyCase> {
    let many_params = (0..1500)
        .map(|i| format!("p{i}=1"))
        .collect::<Vec<_>>()
        .join("&");
    let huge_claims = format!(
        "grant_type=client_credentials&impersonate_claims={}",
        vec!["t%3Dv"; 2000].join("%2C")
    );
    vec![
        (
            "40 KiB body (the issuer's limit is 16 KiB)",
            FORM,
            vec![b'a'; 40 << 10],
            413,
            "invalid_request",
        ),
        (
            "1500 parameters",
            FORM,
            format!("grant_type=client_credentials&{many_params}").into_bytes(),
            400,
            "invalid_request",
        ),
        (
            "invalid UTF-8",
            FORM,
            b"grant_type=client_credentials&x=%FF%FE".to_vec(),
            400,
            "invalid_request",
        ),
        (
            "raw invalid UTF-8",
            FORM,
            b"grant_type=client_credentials&x=\xff\xfe".to_vec(),
            400,
            "invalid_request",
        ),
        (
            "2000 impersonation claims",
            FORM,
            huge_claims.into_bytes(),
            400,
            "invalid_request",
        ),
    ]
}

/// Bodies the issuer refuses for what they say or how they are typed.
fn malformed_bodies() -> Vec<BodyCase> {
    vec![
        (
            "NUL in grant_type",
            FORM,
            b"grant_type=client%00_credentials".to_vec(),
            400,
            "unsupported_grant_type",
        ),
        (
            "NUL in username",
            FORM,
            b"grant_type=password&username=de%00mo&password=x".to_vec(),
            400,
            "invalid_request",
        ),
        (
            "JSON content type",
            Some("application/json"),
            br#"{"grant_type":"client_credentials"}"#.to_vec(),
            400,
            "invalid_request",
        ),
        (
            "no content type",
            None,
            b"grant_type=client_credentials".to_vec(),
            400,
            "invalid_request",
        ),
        (
            "binary garbage",
            FORM,
            (0..=255u8).cycle().take(4096).collect(),
            400,
            "invalid_request",
        ),
    ]
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn hostile_bodies_at_the_token_endpoint() {
    let (_tmp, s) = stack(&[]).await;
    let cases = oversized_or_misencoded_bodies()
        .into_iter()
        .chain(malformed_bodies());
    for (name, ct, body, status, error) in cases {
        let (got, text) = token_call(&s, ct, body).await;
        assert_eq!(got.as_u16(), status, "{name}: {text}");
        assert!(
            text.contains(&format!("\"error\":\"{error}\"")),
            "{name}: {text}"
        );
    }
    step_envoy_and_the_route_refuse_the_rest(&s).await;
    // Nothing here was a server error, and no secret reached the issuer's log.
    let log = std::fs::read_to_string(s.dir.join("issuer.log")).unwrap();
    assert!(
        !log.contains(&s.secret) && !log.contains(demo::PASSWORD),
        "a secret was logged"
    );
    assert!(
        !log.contains("internal error"),
        "a client mistake was logged as an internal error:\n{log}"
    );
    assert!(s.stop());
}

/// Step: what Envoy and the token route refuse before the issuer reads a body: bodies over
/// Envoy's limit, other methods, a repeated `Authorization`.
async fn step_envoy_and_the_route_refuse_the_rest(s: &Stack) {
    // Over Envoy's 64 KiB limit for token requests: Envoy answers 413 itself.
    for size in [1 << 20, 8 << 20] {
        let (got, text) = token_call(s, FORM, vec![b'a'; size]).await;
        assert_eq!(got.as_u16(), 413, "{size} bytes: {text}");
    }
    for method in [
        Method::GET,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::OPTIONS,
        Method::HEAD,
    ] {
        let r = s
            .client()
            .request(method.clone(), format!("{}/apiv2/oauth/token", s.url()))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405, "{method}");
        assert_eq!(r.headers()["allow"], "POST", "{method}");
    }
    let r = s
        .client()
        .post(format!("{}/apiv2/oauth/token", s.url()))
        .header("authorization", "Basic YTpi")
        .header("authorization", "Basic YzpK")
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        401,
        "repeated Authorization at the token endpoint"
    );
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn hostile_headers_at_the_filter() {
    let (_tmp, s) = stack(&[]).await;
    let token = valid_token(&s).await;
    let find = format!("{}/apiv2/MediaService/Find", s.url());
    let send =
        |req: reqwest::RequestBuilder| async move { req.send().await.map(|r| r.status().as_u16()) };
    // Invalid UTF-8 in the token header: refused, and the VM survives.
    let bad = reqwest::header::HeaderValue::from_bytes(b"Bearer \xff\xfe\xfd").unwrap();
    assert_eq!(
        send(s.client().post(&find).header("authorization", bad))
            .await
            .unwrap(),
        400
    );
    let obs = reqwest::header::HeaderValue::from_bytes(b"Bearer mmat1.\xc3\xa9.x").unwrap();
    assert_eq!(
        send(s.client().post(&find).header("serviceauthorization", obs))
            .await
            .unwrap(),
        400
    );
    filter_alive(&s, &token).await;
    // An oversized header and too many headers are Envoy's to refuse (431), before the filter.
    let big = "A".repeat(100 * 1024);
    let status = send(
        s.client()
            .post(&find)
            .header("authorization", format!("Bearer {big}")),
    )
    .await;
    assert!(
        matches!(status, Ok(431) | Err(_)),
        "oversized header: {status:?}"
    );
    let mut many = s.client().post(&find).bearer_auth(&token);
    for i in 0..200 {
        many = many.header(format!("x-h{i}"), "v");
    }
    assert!(matches!(send(many).await, Ok(431) | Err(_)));
    // A 64 KiB token in a header under Envoy's limit: refused as malformed by the filter.
    let long = format!("Bearer {}", "A".repeat(50 * 1024));
    assert_eq!(
        send(s.client().post(&find).header("authorization", long))
            .await
            .unwrap(),
        401
    );
    // Hundreds of comma-joined credentials.
    let joined = vec![format!("Bearer {token}"); 300].join(", ");
    assert_eq!(
        send(s.client().post(&find).header("authorization", joined))
            .await
            .unwrap(),
        400
    );
    // A long path.
    let long_path = format!("{}/apiv2/{}", s.url(), "a/".repeat(4000));
    let status = send(s.client().post(long_path)).await;
    assert!(
        matches!(status, Ok(401) | Ok(414) | Ok(431)),
        "long path: {status:?}"
    );
    filter_alive(&s, &token).await;
    let c = s.counters().await.unwrap();
    assert!(c.get("malformed").is_some_and(|n| *n >= 3), "{c:?}");
    assert!(s.stop());
}

/// Reads until the peer closes or 20 s pass; returns what arrived and how long it took.
async fn drain(mut r: impl AsyncReadExt + Unpin) -> (String, Duration) {
    let start = Instant::now();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(20), r.read_to_end(&mut buf)).await;
    (String::from_utf8_lossy(&buf).into_owned(), start.elapsed())
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn slow_clients_are_cut_off() {
    let (_tmp, s) = stack(&[]).await;
    // Through Envoy: headers never finished.
    let mut tls = s.tls_connect().await.unwrap();
    tls.write_all(
        b"POST /apiv2/MediaService/Find HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ",
    )
    .await
    .unwrap();
    // The issuer on its own: the same.
    let mut headers = tokio::net::TcpStream::connect(("127.0.0.1", s.ports.issuer))
        .await
        .unwrap();
    headers
        .write_all(b"POST /apiv2/oauth/token HTTP/1.1\r\nHost: localhost\r\nContent-Type: app")
        .await
        .unwrap();
    // A body that never arrives, to the issuer.
    let mut body = tokio::net::TcpStream::connect(("127.0.0.1", s.ports.issuer))
        .await
        .unwrap();
    body.write_all(b"POST /apiv2/oauth/token HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 100\r\n\r\ngrant").await.unwrap();
    let ((envoy, t1), (issuer, t2), (issuer_body, t3)) =
        tokio::join!(drain(tls), drain(headers), drain(body));
    assert!(
        t1 < Duration::from_secs(15),
        "Envoy kept a slow client for {t1:?}"
    );
    assert!(
        envoy.is_empty() || envoy.starts_with("HTTP/1.1 408"),
        "{envoy}"
    );
    assert!(
        t2 < Duration::from_secs(15),
        "the issuer kept a slow client for {t2:?}"
    );
    assert!(
        issuer.is_empty() || issuer.starts_with("HTTP/1.1 408"),
        "{issuer}"
    );
    assert!(
        t3 < Duration::from_secs(15),
        "the issuer waited {t3:?} for a body"
    );
    assert!(issuer_body.starts_with("HTTP/1.1 408"), "{issuer_body}");
    assert!(
        issuer_body.contains("\"error\":\"invalid_request\""),
        "{issuer_body}"
    );
    assert!(s.stop());
}

/// The first outside probe's finding 1 (high): `/apiv2/oauth/*` reached the media service without a token through
/// `envoy/minimal.yaml`, and `..;` slipped past the filter's own path parser.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn no_path_reaches_the_media_service_without_a_token() {
    let (_tmp, s) = stack(&[]).await;
    let (_minimal, port) = s.start_minimal_envoy().unwrap();
    let paths = [
        "/apiv2/oauth/anything",
        "/apiv2/oauth/token",
        "/apiv2/oauth/%2e%2e;/MediaService/Find",
        "/apiv2/oauth/..;/MediaService/Find",
        "/apiv2/oauth/%2e%2e/MediaService/Find",
    ];
    for path in paths {
        let a = http_get(port, path, &[]).await.unwrap();
        assert!(
            matches!(a.status, 400 | 401) && !a.from_media(),
            "minimal.yaml let {path} through: {a:?}"
        );
    }
    // It is checked, not closed: with a token the same paths reach the media service.
    let token = client_token(&s).await;
    let bearer = format!("Authorization: Bearer {token}");
    let a = http_get(port, "/apiv2/oauth/anything", &[&bearer])
        .await
        .unwrap();
    assert!(a.status == 200 && a.from_media(), "{a:?}");
    // The full stack routes /apiv2/oauth/ to the issuer, whatever follows; never to the media
    // service, and the filter is off on that route because Envoy's router chose it.
    for path in paths {
        let a = s.raw_get(path, &[]).await.unwrap();
        assert!(!a.from_media(), "{path} reached the media service: {a:?}");
    }
    let c = s.counters().await.unwrap();
    assert_eq!(c.get("exempt"), Some(&0), "{c:?}");
    assert!(s.stop());
}

/// The first outside probe's findings 3 and 4 (medium, low): `X_Auth_Roles` and other spellings, and `x-auth-*` names
/// beyond the seven the filter sets, reached the upstream.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn no_spelling_of_an_identity_header_reaches_the_upstream() {
    let (_tmp, s) = stack(&[]).await;
    let token = client_token(&s).await;
    let spoofed = [
        ("X_Auth_Roles", "admin"),
        ("x_auth_subject", "root"),
        ("x-auth_subject", "root"),
        ("X-Auth-Admin", "true"),
        ("x-auth-user", "root"),
        ("X-Auth-Subject-", "root"),
        ("x-auth", "root"),
    ];
    // HTTP/2 (the client's choice over TLS) and HTTP/1.1 on the wire.
    let mut req = s
        .client()
        .post(format!("{}/apiv2/MediaService/Find", s.url()))
        .bearer_auth(&token)
        .body("{}");
    for (n, v) in spoofed {
        req = req.header(n, v);
    }
    let seen: Value = req.send().await.unwrap().json().await.unwrap();
    let mut raw_headers: Vec<String> = spoofed.iter().map(|(n, v)| format!("{n}: {v}")).collect();
    raw_headers.push(format!("Authorization: Bearer {token}"));
    let raw_headers: Vec<&str> = raw_headers.iter().map(String::as_str).collect();
    let raw = s
        .raw_get("/apiv2/MediaService/Find", &raw_headers)
        .await
        .unwrap();
    let body = raw.text.split("\r\n\r\n").nth(1).unwrap_or_default();
    let raw_seen: Value = serde_json::from_str(body.trim()).unwrap_or_else(|_| panic!("{raw:?}"));
    for seen in [seen, raw_seen] {
        let mut names: Vec<&str> = seen["identity"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                "x-auth-client",
                "x-auth-expires",
                "x-auth-subject",
                "x-auth-subject-kind",
                "x-auth-token-id"
            ],
            "only the filter's own headers: {seen}"
        );
        assert_eq!(seen["identity"]["x-auth-subject"], demo::CLIENT);
    }
    assert!(s.stop());
}

/// The first outside probe's finding 6 (low): client ids and user names went to the log unquoted, so a client id could plant
/// fields, U+2028 was written raw, and a log file got ANSI colour codes.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn client_values_cannot_plant_log_fields() {
    let (_tmp, s) = stack(&[]).await;
    let evil = "evil\" client=demo-app user=demo admin=true";
    let r = s
        .client()
        .post(format!("{}/apiv2/oauth/token", s.url()))
        .basic_auth(evil, Some("x"))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // Control characters are refused before anything is logged; U+2028 is not a control.
    let line_breaker = "eve\u{2028}user=demo admin=true\"";
    assert_eq!(sign_in(&s, &s.client(), line_breaker, "x").await, 400);
    let log = std::fs::read_to_string(s.dir.join("issuer.log")).unwrap();
    assert!(
        log.contains(r#"client="evil\" client=demo-app user=demo admin=true""#),
        "{log}"
    );
    assert!(
        log.contains(r#"user="eve\u{2028}user=demo admin=true\"""#),
        "{log}"
    );
    assert!(
        !log.contains('\u{2028}') && !log.contains('\u{1b}'),
        "{log}"
    );
    assert!(s.stop());

    // JSON logs: one object per line, values as sent.
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let secret = e2e::provision(&tools, tmp.path(), &data).unwrap();
    let log = tmp.path().join("issuer.log");
    let (mut issuer, url) = e2e::start_issuer(
        &tools,
        &data,
        e2e::free_port(),
        &["--log-format", "json"],
        &log,
    )
    .unwrap();
    let http = reqwest::Client::new();
    for (id, user) in [(evil, demo::USER), (demo::CLIENT, line_breaker)] {
        let secret = if id == demo::CLIENT {
            secret.as_str()
        } else {
            "x"
        };
        http.post(format!("{url}/apiv2/oauth/token"))
            .basic_auth(id, Some(secret))
            .form(&[
                ("grant_type", "password"),
                ("username", user),
                ("password", "x"),
            ])
            .send()
            .await
            .unwrap();
    }
    assert!(issuer.stop());
    let lines: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(lines.iter().any(|l| l["client"] == evil), "{lines:?}");
    assert!(lines.iter().any(|l| l["user"] == line_breaker), "{lines:?}");
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_token_behind_bearer_and_another_separator_is_refused_not_passed_on() {
    let (_tmp, s) = stack(&[]).await;
    let valid = client_token(&s).await;
    let other = "mmat1.forged.token";
    let find = format!("{}/apiv2/MediaService/Find", s.url());
    let http1 = s.client_builder().http1_only().build().unwrap();
    let http2 = s.client();
    for (version, http) in [("HTTP/1.1", &http1), ("HTTP/2", &http2)] {
        for separator in [&b"\t"[..], b"\xc2\xa0"] {
            let smuggled = [&b"Bearer"[..], separator, other.as_bytes()].concat();
            let smuggled = HeaderValue::from_bytes(&smuggled).unwrap();
            let r = http
                .post(&find)
                .header("serviceauthorization", format!("Bearer {valid}"))
                .header("authorization", smuggled.clone())
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body = r.text().await.unwrap_or_default();
            assert_eq!(status, 400, "{version}, separator {separator:?}: {body}");
            // Alone, it is malformed too, never "no token".
            let r = http.post(&find).header("authorization", smuggled);
            assert_eq!(r.send().await.unwrap().status(), 400, "{version} alone");
        }
        let r = http.post(&find).bearer_auth(&valid).send().await.unwrap();
        assert_eq!(r.status(), 200, "{version}: the valid token alone");
    }
    assert!(s.stop());
}
