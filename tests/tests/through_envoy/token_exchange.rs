//! Token exchange through the real stack, with either filter: a chain of three services acting
//! for the demo user, the upstream seeing the chain (never the caller's own `x-auth-actors`), a
//! path whose rule refuses delegated calls, expiry bounded by the subject token, and the
//! revocation of the middle actor refused at every worker for every token exchanged through it.

use crate::edge::{access, call, edge_stack, password, refused_everywhere, token_as};
use e2e::{demo, Stack};
use serde_json::Value;
use shared::grant::{ACCESS_TOKEN_TYPE, TOKEN_EXCHANGE};
use shared::token;

/// Adds and activates a client with `args`; its secret.
fn service(s: &Stack, id: &str, args: &[&str]) -> String {
    let mut all = vec!["client", "add", id];
    all.extend_from_slice(args);
    let out = s.admin(&all, None).unwrap();
    s.admin(&["client", "activate", id], None).unwrap();
    out.lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .expect("secret printed")
        .to_owned()
}

/// `client` exchanging `subject` through Envoy: the new access token.
async fn exchange(s: &Stack, client: (&str, &str), subject: &str) -> String {
    let form = [
        ("grant_type", TOKEN_EXCHANGE),
        ("subject_token", subject),
        ("subject_token_type", ACCESS_TOKEN_TYPE),
    ];
    access(&token_as(s, client, &form).await)
}

/// A call to `path` with `token` and a planted `X-Auth-Actors`: the status and the upstream's
/// echo of the identity it saw.
async fn call_at(s: &Stack, path: &str, token: &str) -> (u16, Value) {
    let r = s
        .client()
        .get(format!("{}{path}", s.url()))
        .header("authorization", format!("Bearer {token}"))
        .header("x-auth-actors", "admin")
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_chain_of_three_services_through_envoy() {
    let (_tmp, mut s) = edge_stack().await;
    let up = service(&s, "uploader", &["--exchange-from", demo::CLIENT]);
    let tr = service(&s, "transcoder", &["--exchange-from", "uploader"]);
    let me = service(&s, "media", &["--exchange-from", "transcoder"]);
    let user = access(&password(&s, demo::USER, demo::PASSWORD).await);
    let t1 = exchange(&s, ("uploader", &up), &user).await;
    let t2 = exchange(&s, ("transcoder", &tr), &t1).await;
    let t3 = exchange(&s, ("media", &me), &t2).await;

    // Expiry bounded by the subject token.
    let exp = |t: &str| token::inspect(t).unwrap().exp;
    assert!(exp(&t3) <= exp(&t2) && exp(&t2) <= exp(&t1) && exp(&t1) <= exp(&user));

    // The upstream sees the chain, and only the filter's.
    let (status, seen) = call_at(&s, "/apiv2/MediaService/Find", &t3).await;
    assert_eq!(status, 200, "{seen}");
    let id = &seen["identity"];
    assert_eq!(id["x-auth-actors"], "media,transcoder,uploader", "{seen}");
    assert_eq!(id["x-auth-actor-origin"], demo::CLIENT, "{seen}");
    assert_eq!(id["x-auth-subject"], demo::USER, "{seen}");
    assert_eq!(id["x-auth-client"], "media", "{seen}");
    let (_, plain) = call_at(&s, "/apiv2/MediaService/Find", &user).await;
    assert!(plain["identity"].get("x-auth-actors").is_none(), "{plain}");

    // A path whose rule refuses delegated calls.
    s.restart_envoy_edited(|cfg| {
        cfg["delegation"] = serde_json::json!(["/apiv2/AdminService/ refuse"]);
    })
    .unwrap();
    let (status, body) = call_at(&s, "/apiv2/AdminService/Users", &t3).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"], "insufficient_scope", "{body}");
    assert_eq!(call_at(&s, "/apiv2/AdminService/Users", &user).await.0, 200);
    assert_eq!(call_at(&s, "/apiv2/MediaService/Find", &t3).await.0, 200);

    // Revoking the middle actor refuses every token exchanged through it, at every worker.
    s.admin(&["client", "deactivate", "transcoder"], None)
        .unwrap();
    refused_everywhere(&s, &t3, "exchanged through the revoked actor").await;
    refused_everywhere(&s, &t2, "issued to the revoked actor").await;
    assert_eq!(call(&s, &t1).await.0, 200, "made before the middle actor");
}
