//! A third-party OAuth client library against the issuer.

use super::*;

#[tokio::test]
async fn the_oauth2_crate_obtains_uses_and_refreshes_tokens() {
    use oauth2::basic::BasicClient;
    use oauth2::{
        ClientId, ClientSecret, RefreshToken, ResourceOwnerPassword, ResourceOwnerUsername,
        TokenResponse, TokenUrl,
    };
    let f = fixture();
    let s = Server::start(&f.dir, &[]);
    let client = BasicClient::new(ClientId::new("app".into()))
        .set_client_secret(ClientSecret::new(f.secret.clone()))
        .set_token_uri(TokenUrl::new(s.token_url()).unwrap());
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let t = client
        .exchange_password(
            &ResourceOwnerUsername::new("alice".into()),
            &ResourceOwnerPassword::new("alice-pw".into()),
        )
        .request_async(&http)
        .await
        .unwrap();
    assert_eq!(t.expires_in(), Some(Duration::from_secs(3600)));
    let rt = t.refresh_token().unwrap().clone();
    let ring = ring(&f.dir);
    assert_eq!(
        token::verify(&ring, t.access_token().secret(), now(), 0)
            .unwrap()
            .body()
            .identity
            .subject,
        "alice"
    );
    let t2 = client
        .exchange_refresh_token(&rt)
        .request_async(&http)
        .await
        .unwrap();
    assert_ne!(t2.refresh_token().unwrap().secret(), rt.secret());
    // Using the token: introspection with it as the subject.
    let i = post(
        &format!("{}/apiv2/oauth/introspect", s.url),
        f.app(),
        &[("token", t2.access_token().secret())],
    )
    .await;
    assert_eq!(i.json["username"], "alice");
    let c = client
        .exchange_client_credentials()
        .add_extra_param("impersonate_claims", "upn=zed")
        .request_async(&http)
        .await
        .unwrap();
    assert!(c.refresh_token().is_none());
    assert_eq!(
        token::verify(&ring, c.access_token().secret(), now(), 0)
            .unwrap()
            .body()
            .identity
            .claims[0]
            .value,
        "zed"
    );
    let err = client
        .exchange_refresh_token(&RefreshToken::new("mmrt1.bogus".into()))
        .request_async(&http)
        .await
        .unwrap_err();
    match err {
        oauth2::RequestTokenError::ServerResponse(r) => assert_eq!(
            r.error(),
            &oauth2::basic::BasicErrorResponseType::InvalidGrant
        ),
        other => panic!("expected invalid_grant, got {other:?}"),
    }
}
