//! The error table: every client mistake gets its documented status and RFC 6749 code.

use super::*;

#[tokio::test]
async fn client_authentication_errors_are_401_invalid_client() {
    let f = fixture();
    let tmp_secret = add_client(&f.dir, "sleeper", &[]);
    admin(&f.dir, &["client", "deactivate", "sleeper"], None);
    let s = Server::start(&f.dir, &[]);
    let form = [("grant_type", "client_credentials")];
    assert_error(
        &post(&s.token_url(), None, &form).await,
        401,
        "invalid_client",
    );
    assert_error(
        &post(&s.token_url(), Some(("app", "wrong")), &form).await,
        401,
        "invalid_client",
    );
    assert_error(
        &post(&s.token_url(), Some(("nobody", &f.secret)), &form).await,
        401,
        "invalid_client",
    );
    assert_error(
        &post(&s.token_url(), Some(("sleeper", &tmp_secret)), &form).await,
        401,
        "invalid_client",
    );
    for header in ["Basic !!!", "Bearer abc", "Basic", "Basic bm9jb2xvbg=="] {
        let resp = reqwest::Client::new()
            .post(s.token_url())
            .header("authorization", header)
            .form(&form)
            .send()
            .await
            .unwrap();
        assert_error(&answer(resp).await, 401, "invalid_client");
    }
}

/// A token request's form and the error it gets.
type FormCase = (Vec<(&'static str, &'static str)>, &'static str);

/// Forms that are malformed, or name a grant the issuer does not have: `invalid_request`,
/// `unsupported_grant_type`; an empty `impersonate_claims` counts as omitted.
fn malformed_forms() -> Vec<FormCase> {
    vec![
        (vec![], "invalid_request"),
        (
            vec![("grant_type", "password"), ("username", "alice")],
            "invalid_request",
        ),
        (
            vec![
                ("grant_type", "password"),
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "alice-pw"),
            ],
            "invalid_request",
        ),
        (
            vec![
                ("grant_type", "client_credentials"),
                ("impersonate_claims", "no-equals"),
            ],
            "invalid_request",
        ),
        (
            vec![
                ("grant_type", "client_credentials"),
                ("impersonate_claims", ""),
            ],
            "ok-no-impersonation",
        ),
        (
            vec![("grant_type", "client_credentials"), ("client_secret", "x")],
            "invalid_request",
        ),
        (
            vec![
                ("grant_type", "client_credentials"),
                ("client_id", "someone-else"),
            ],
            "invalid_request",
        ),
        (
            vec![("grant_type", "authorization_code"), ("code", "x")],
            "unsupported_grant_type",
        ),
    ]
}

/// Well-formed forms whose grant is refused: `invalid_grant`.
fn refused_grants() -> Vec<FormCase> {
    vec![
        (
            vec![
                ("grant_type", "password"),
                ("username", "alice"),
                ("password", "wrong"),
            ],
            "invalid_grant",
        ),
        (
            vec![
                ("grant_type", "password"),
                ("username", "nobody"),
                ("password", "x"),
            ],
            "invalid_grant",
        ),
        (
            vec![
                ("grant_type", "password"),
                ("username", "bob"),
                ("password", "bob-pw"),
            ],
            "invalid_grant",
        ),
        (
            vec![
                ("grant_type", "refresh_token"),
                ("refresh_token", "mmrt1.unknown"),
            ],
            "invalid_grant",
        ),
    ]
}

#[tokio::test]
async fn request_errors_are_400_with_their_codes() {
    let f = fixture();
    admin(
        &f.dir,
        &["user", "add", "bob", "--role", "x"],
        Some("bob-pw"),
    );
    admin(&f.dir, &["user", "disable", "bob"], None);
    let cc_only = add_client(&f.dir, "cc-only", &["--grants", "client_credentials"]);
    let s = Server::start(&f.dir, &[]);
    let url = s.token_url();
    let cases = malformed_forms().into_iter().chain(refused_grants());
    for (form, expected) in cases {
        let a = post(&url, f.app(), &form).await;
        if expected == "ok-no-impersonation" {
            // An empty value counts as omitted (RFC 6749 3.1).
            assert_eq!(a.status, 200, "{form:?}: {}", a.json);
            continue;
        }
        assert_error(&a, 400, expected);
    }
    step_a_grant_the_client_lacks_is_unauthorized_client(&url, &cc_only).await;
    step_a_body_not_typed_as_a_form_is_invalid_request(&url, &f.secret).await;
}

/// Step: a grant not enabled for the client, or impersonation it may not do:
/// `unauthorized_client`.
async fn step_a_grant_the_client_lacks_is_unauthorized_client(url: &str, cc_only: &str) {
    let a = post(
        url,
        Some(("cc-only", cc_only)),
        &[
            ("grant_type", "password"),
            ("username", "alice"),
            ("password", "alice-pw"),
        ],
    )
    .await;
    assert_error(&a, 400, "unauthorized_client");
    let a = post(
        url,
        Some(("cc-only", cc_only)),
        &[
            ("grant_type", "client_credentials"),
            ("impersonate_as", "alice"),
        ],
    )
    .await;
    assert_error(&a, 400, "unauthorized_client");
}

/// Step: the wrong content type, or none, with valid credentials and a well-formed body:
/// `invalid_request`.
async fn step_a_body_not_typed_as_a_form_is_invalid_request(url: &str, secret: &str) {
    let resp = reqwest::Client::new()
        .post(url)
        .basic_auth("app", Some(secret))
        .header("content-type", "application/json")
        .body("grant_type=client_credentials")
        .send()
        .await
        .unwrap();
    assert_error(&answer(resp).await, 400, "invalid_request");
    let resp = reqwest::Client::new()
        .post(url)
        .basic_auth("app", Some(secret))
        .body("grant_type=client_credentials")
        .send()
        .await
        .unwrap();
    assert_error(&answer(resp).await, 400, "invalid_request");
}

#[tokio::test]
async fn method_size_and_path_errors() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let c = reqwest::Client::new();
    for method in [
        reqwest::Method::GET,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
        reqwest::Method::PATCH,
    ] {
        let a = answer(
            c.request(method.clone(), s.token_url())
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(a.status, 405, "{method}");
        assert_eq!(a.headers["allow"], "POST");
        assert_oauth_headers(&a);
    }
    let big = "a".repeat(17 * 1024);
    let resp = c
        .post(s.token_url())
        .basic_auth("app", Some(&f.secret))
        .form(&[("grant_type", "client_credentials"), ("pad", &big)])
        .send()
        .await
        .unwrap();
    let a = answer(resp).await;
    assert_eq!(a.status, 413);
    assert_oauth_headers(&a);
    // Without a Content-Length (chunked), the limit holds too.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..20).map(|_| Ok(vec![b'a'; 1024])).collect();
    let body = reqwest::Body::wrap_stream(futures_util::stream::iter(chunks));
    let resp = c
        .post(s.token_url())
        .basic_auth("app", Some(&f.secret))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let a = answer(
        c.get(format!("{}/apiv2/oauth/nothing", s.url))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(a.status, 404);
}

#[tokio::test]
async fn password_guessing_is_throttled_with_retry_after() {
    let f = fixture();
    add_user(&f.dir, "carol", "carol-pw", &[]);
    // A base wait of 5 s keeps the test clear of second boundaries.
    let s = Server::start(&f.dir, &["--login-backoff-base", "5"]);
    let guess = [
        ("grant_type", "password"),
        ("username", "carol"),
        ("password", "guess"),
    ];
    let mut throttled = None;
    for i in 0..10 {
        let a = post(&s.token_url(), f.app(), &guess).await;
        if a.status == 429 {
            throttled = Some((i, a));
            break;
        }
        assert_error(&a, 400, "invalid_grant");
    }
    let (attempt, a) = throttled.expect("throttled within 10 guesses");
    assert_eq!(attempt, 6, "five free failures, the sixth sets a wait");
    assert_error(&a, 429, "slow_down");
    let wait: u64 = a.headers["retry-after"].to_str().unwrap().parse().unwrap();
    let held_at = e2e::unix_now();
    assert!((4..=5).contains(&wait), "{wait}");
    // Even the right password waits while throttled; other users are served.
    let right = [
        ("grant_type", "password"),
        ("username", "carol"),
        ("password", "carol-pw"),
    ];
    assert_eq!(post(&s.token_url(), f.app(), &right).await.status, 429);
    assert_eq!(password_grant(&s, &f).await.status, 200);
    // The back-off is temporary: it ends when its Retry-After said (the back-off counts whole
    // seconds, as the clock reads them).
    e2e::wait::until_second(held_at + wait).await;
    assert_eq!(post(&s.token_url(), f.app(), &right).await.status, 200);
}

/// A `client_credentials` request for client `app` with `secret`, from address `from` (named by
/// `X-Forwarded-For`, which the issuer believes from its loopback peer with
/// `--trust-x-forwarded-for`, as from the shipped Envoy).
async fn client_auth_from(s: &Server, from: &str, secret: &str) -> Answer {
    let resp = reqwest::Client::new()
        .post(s.token_url())
        .header("x-forwarded-for", from)
        .basic_auth("app", Some(secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    answer(resp).await
}

/// [`client_auth_from`] again until it is not held (429), which counts nothing: the answer.
async fn until_not_held(s: &Server, from: &str, secret: &str) -> Answer {
    let answered = e2e::wait::until_some(e2e::wait::LONG, async || {
        let a = client_auth_from(s, from, secret).await;
        (a.status != 429).then_some(a)
    });
    answered.await.expect("still held")
}

fn retry_after(a: &Answer) -> u64 {
    a.headers["retry-after"].to_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn client_authentication_is_throttled_per_address() {
    let f = fixture();
    let s = Server::start(&f.dir, &["--trust-x-forwarded-for"]);
    let guesser = "192.0.2.7";
    // Ten free failures; the eleventh sets a wait of 1 s, which the twelfth meets.
    for i in 0..11 {
        let a = client_auth_from(&s, guesser, &format!("guess-{i}")).await;
        assert_error(&a, 401, "invalid_client");
    }
    let a = client_auth_from(&s, guesser, "guess").await;
    assert_error(&a, 429, "slow_down");
    assert_eq!(retry_after(&a), 1);
    // After the wait (tried until it ends: a try while held is not counted), one more failure
    // doubles it.
    let a = until_not_held(&s, guesser, "guess").await;
    assert_error(&a, 401, "invalid_client");
    let a = client_auth_from(&s, guesser, "guess").await;
    assert_error(&a, 429, "slow_down");
    assert_eq!(retry_after(&a), 2);
    // The right secret from the guesser's address waits too, at every endpoint that
    // authenticates clients.
    let a = client_auth_from(&s, guesser, &f.secret).await;
    assert_error(&a, 429, "slow_down");
    let introspect = reqwest::Client::new()
        .post(format!("{}/apiv2/oauth/introspect", s.url))
        .header("x-forwarded-for", guesser)
        .basic_auth("app", Some(&f.secret))
        .form(&[("token", "x")])
        .send()
        .await
        .unwrap();
    assert_error(&answer(introspect).await, 429, "slow_down");
    // The client itself, from another address, is served; its success frees nobody else.
    let elsewhere = client_auth_from(&s, "198.51.100.3", &f.secret).await;
    assert_eq!(elsewhere.status, 200, "{}", elsewhere.json);
    let a = client_auth_from(&s, guesser, &f.secret).await;
    assert_error(&a, 429, "slow_down");
    // The wait ends: the right secret from the guesser's address works again.
    let a = until_not_held(&s, guesser, &f.secret).await;
    assert_eq!(a.status, 200, "{}", a.json);
    // An IPv6 address counts by its /64: guesses spread over one /64 are held as one address,
    // and the next /64 is another address.
    for i in 0..11 {
        let a = client_auth_from(&s, &format!("2001:db8:1:1::{i:x}"), "guess").await;
        assert_error(&a, 401, "invalid_client");
    }
    let a = client_auth_from(&s, "2001:db8:1:1:ffff::9", &f.secret).await;
    assert_error(&a, 429, "slow_down");
    let a = client_auth_from(&s, "2001:db8:1:2::1", &f.secret).await;
    assert_eq!(a.status, 200, "{}", a.json);
}
