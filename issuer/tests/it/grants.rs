//! The grants end to end over real HTTP: password, client credentials, and Basic credentials.

use super::*;

#[tokio::test]
async fn password_grant_issues_a_user_token_and_refresh_token() {
    let f = fixture();
    let s = Server::start(&f.dir, &["--access-ttl", "600"]);
    let a = password_grant(&s, &f).await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert_oauth_headers(&a);
    assert_eq!(a.json["token_type"], "Bearer");
    assert_eq!(a.json["expires_in"], 600);
    assert!(a.json["refresh_token"]
        .as_str()
        .unwrap()
        .starts_with("mmrt2."));
    let t = token::verify(
        &ring(&f.dir),
        a.json["access_token"].as_str().unwrap(),
        now(),
        0,
    )
    .unwrap();
    let b = t.body();
    assert_eq!(b.client, "app");
    assert_eq!(b.identity.kind, SubjectKind::User);
    assert_eq!(b.identity.subject, "alice");
    assert_eq!(b.identity.roles, ["editor", "viewer"]);
    assert_eq!(b.identity.claims[0].value, "alice@example.com");
    assert_eq!(b.exp - b.iat, 600);
}

#[tokio::test]
async fn client_credentials_grant_issues_a_client_token_without_refresh() {
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let a = post(
        &s.token_url(),
        f.app(),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.json);
    assert_oauth_headers(&a);
    assert!(a.json.get("refresh_token").is_none());
    assert_eq!(a.json["expires_in"], 3600);
    let t = token::verify(
        &ring(&f.dir),
        a.json["access_token"].as_str().unwrap(),
        now(),
        0,
    )
    .unwrap();
    assert_eq!(t.body().identity.kind, SubjectKind::Client);
    assert_eq!(t.body().client, "app");
}

#[tokio::test]
async fn basic_credentials_are_form_decoded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    admin(
        &dir,
        &["client", "add", "my app", "--secret-stdin"],
        Some("s3cr:t+%-and-long-enough"),
    );
    admin(&dir, &["client", "activate", "my app"], None);
    let s = Server::start(&dir, &[]);
    // RFC 6749 2.3.1: id and secret are form-encoded before Basic encoding.
    let a = post(
        &s.token_url(),
        Some(("my+app", "s3cr%3At%2B%25-and-long-enough")),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_eq!(a.status, 200, "{}", a.json);
    let a = post(
        &s.token_url(),
        Some(("my app", "s3cr:t+%-and-long-enough")),
        &[("grant_type", "client_credentials")],
    )
    .await;
    assert_error(&a, 401, "invalid_client");
}
