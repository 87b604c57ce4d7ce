//! The third outside probe's finding at the filter, through the real stack: a second token
//! behind `Bearer` and a separator other than a space never reaches the upstream beside a valid
//! token in the other header, in HTTP/1.1 and HTTP/2. The directory's findings are in
//! `directory_probe`.

use crate::edge::client_token;
use crate::stack;
use reqwest::header::HeaderValue;

#[tokio::test]
async fn a_token_behind_bearer_and_another_separator_is_refused_not_passed_on() {
    let Some((_tmp, s)) = stack(&[]).await else {
        return;
    };
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
