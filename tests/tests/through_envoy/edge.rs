//! Edge sync through a real Envoy with two workers, each VM pulling the issuer's edge feed:
//! revocations refused at both workers within 2 s, keys rotated and retired without touching
//! Envoy, an unreachable issuer, and hostile feed answers.

use e2e::{demo, wait, Options, Stack, Tools};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Instant;

pub(crate) async fn edge_stack() -> (tempfile::TempDir, Stack) {
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        edge_sync: true,
        ..Options::default()
    };
    let stack = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    wait_for_sync(&stack).await;
    (tmp, stack)
}

/// The filter's counters right now (no settling: they move once a second).
pub(crate) async fn counters(s: &Stack) -> std::collections::HashMap<String, u64> {
    s.read_counters().await.unwrap()
}

/// Until every poller (Wasm: two workers and the main thread; native: one) has had its first
/// whole answer from the feed; that each worker synced is shown where it matters, by refusals
/// at both workers.
pub(crate) async fn wait_for_sync(s: &Stack) {
    let pollers = s.edge_pollers();
    let synced = wait::until(wait::LONG, async || {
        let c = counters(s).await;
        c.get("edge_sync_first_ok").copied().unwrap_or(0) >= pollers
    });
    assert!(synced.await, "no edge sync:\n{}", s.logs());
}

/// Connections each Envoy worker has accepted on the listener.
pub(crate) fn worker_connections(s: &Stack) -> Vec<u64> {
    let (_, text) = s.envoy_admin("/stats?filter=worker_").unwrap();
    let mut per_worker: Vec<(String, u64)> = text
        .lines()
        .filter(|l| l.contains(&format!("_{}.worker_", s.ports.listener)))
        .filter_map(|l| {
            let (name, value) = l.split_once(": ")?;
            let name = name.strip_suffix(".downstream_cx_total")?;
            Some((name.to_owned(), value.trim().parse().ok()?))
        })
        .collect();
    per_worker.sort();
    per_worker.into_iter().map(|(_, n)| n).collect()
}

/// A protected call on a connection of its own (so calls spread over the workers).
pub(crate) async fn call(s: &Stack, token: &str) -> (StatusCode, String) {
    let http = s
        .client_builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let r = http
        .get(format!("{}/apiv2/MediaService/Find", s.url()))
        .header("authorization", format!("Bearer {token}"))
        .send()
        .await
        .unwrap();
    let status = r.status();
    let www = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap_or("").to_owned())
        .unwrap_or_default();
    (status, www)
}

/// Calls on fresh connections until a round of 8, which both workers took part in, is refused
/// with `invalid_token` (the revocation reached every worker; the test fails if it never does,
/// within [`wait::LONG`]). Then checks that it stays refused at both workers.
pub(crate) async fn refused_everywhere(s: &Stack, token: &str, what: &str) {
    let start = Instant::now();
    let all_refused = async || {
        let before = worker_connections(s);
        for _ in 0..8 {
            let (status, www) = call(s, token).await;
            if status != 401 || !www.contains("error=\"invalid_token\"") {
                return false;
            }
        }
        let after = worker_connections(s);
        before.iter().zip(&after).all(|(b, a)| a > b)
    };
    assert!(
        wait::until(wait::LONG, all_refused).await,
        "{what}: still accepted {:?} after the revocation\n{}",
        start.elapsed(),
        s.logs()
    );
    eprintln!("{what}: refused {:?} after the revocation", start.elapsed());
    let before = worker_connections(s);
    for _ in 0..16 {
        assert_eq!(call(s, token).await.0, 401, "{what}");
    }
    let after = worker_connections(s);
    assert_eq!(before.len(), 2, "two workers: {before:?}");
    assert!(
        before.iter().zip(&after).all(|(b, a)| a > b),
        "{what}: both workers refused ({before:?} -> {after:?})"
    );
}

/// A token request through Envoy as `client`: the status and the JSON answer (null if none).
pub(crate) async fn token_request(
    s: &Stack,
    client: (&str, &str),
    form: &[(&str, &str)],
) -> (u16, Value) {
    let r = s
        .client()
        .post(format!("{}/apiv2/oauth/token", s.url()))
        .basic_auth(client.0, Some(client.1))
        .form(form)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// [`token_request`] that must issue a token: its answer.
pub(crate) async fn token_as(s: &Stack, client: (&str, &str), form: &[(&str, &str)]) -> Value {
    let (_, v) = token_request(s, client, form).await;
    assert!(v["access_token"].is_string(), "{v}");
    v
}

/// An access token of the demo client (client credentials grant), through Envoy.
pub(crate) async fn client_token(s: &Stack) -> String {
    let cc = [("grant_type", "client_credentials")];
    access(&token_as(s, (demo::CLIENT, &s.secret), &cc).await)
}

pub(crate) async fn password(s: &Stack, user: &str, pw: &str) -> Value {
    let form = [
        ("grant_type", "password"),
        ("username", user),
        ("password", pw),
    ];
    token_as(s, (demo::CLIENT, &s.secret), &form).await
}

/// RFC 7009 revocation of `token` (access or refresh) by the demo client, through Envoy: 200.
pub(crate) async fn revoke(s: &Stack, token: &str) {
    revoke_at(s, &s.url(), token).await;
}

/// [`revoke`] at `base` (Envoy's URL, or one issuer's own).
pub(crate) async fn revoke_at(s: &Stack, base: &str, token: &str) {
    let r = s
        .client()
        .post(format!("{base}/apiv2/oauth/revoke"))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

pub(crate) fn access(v: &Value) -> String {
    v["access_token"].as_str().unwrap().to_owned()
}

/// Adds and activates a client allowed `client_credentials`; returns its secret.
pub(crate) fn add_client(s: &Stack, id: &str) -> String {
    let grants = ["--grants", "client_credentials"];
    e2e::issuer::add_client(&s.tools, &s.store, id, &grants).unwrap()
}

/// Tokens served a few times on fresh connections first, so the workers have them in their
/// cache: the demo user's (kept), one to revoke, bob's, and one of the client `other-app`.
async fn cached_tokens(s: &Stack) -> [String; 4] {
    s.admin(&["user", "add", "bob"], Some("bob-password"))
        .unwrap();
    let other_secret = add_client(s, "other-app");
    let demo_token = access(&password(s, demo::USER, demo::PASSWORD).await);
    let revoked = access(&password(s, demo::USER, demo::PASSWORD).await);
    let bob = access(&password(s, "bob", "bob-password").await);
    let cc = [("grant_type", "client_credentials")];
    let other = access(&token_as(s, ("other-app", &other_secret), &cc).await);
    for t in [&demo_token, &revoked, &bob, &other] {
        for _ in 0..6 {
            assert_eq!(call(s, t).await.0, 200);
        }
    }
    [demo_token, revoked, bob, other]
}

/// Step: reuse of a rotated refresh token after its successor was used revokes the family:
/// every access token minted with it is refused.
async fn step_reuse_revokes_the_family(s: &Stack) {
    let first = password(s, demo::USER, demo::PASSWORD).await;
    let refresh = async |t: &Value| {
        let rt = t["refresh_token"].as_str().unwrap().to_owned();
        let form = [
            ("grant_type", "refresh_token"),
            ("refresh_token", rt.as_str()),
        ];
        token_as(s, (demo::CLIENT, &s.secret), &form).await
    };
    let second = refresh(&first).await;
    let third = refresh(&second).await;
    assert_eq!(call(s, &access(&third)).await.0, 200);
    let reuse = s
        .client()
        .post(format!("{}/apiv2/oauth/token", s.url()))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", first["refresh_token"].as_str().unwrap()),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(reuse.status(), 400);
    for (i, t) in [&first, &second, &third].into_iter().enumerate() {
        let what = format!("access token {i} of a family revoked for reuse");
        refused_everywhere(s, &access(t), &what).await;
    }
}

/// Every kind of revocation reaches both Envoy workers, which refuse the tokens it covers and
/// keep serving the others: an RFC 7009 revocation, a disabled user, a deactivated client, a
/// family revoked for reuse and one revoked at the revoke endpoint.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn revocations_reach_both_workers() {
    let (_tmp, s) = edge_stack().await;
    let [demo_token, revoked, bob, other] = cached_tokens(&s).await;

    revoke(&s, &revoked).await;
    refused_everywhere(&s, &revoked, "revoked token").await;
    assert_eq!(call(&s, &demo_token).await.0, 200, "other tokens pass");

    s.admin(&["user", "disable", "bob"], None).unwrap();
    refused_everywhere(&s, &bob, "disabled user").await;

    s.admin(&["client", "deactivate", "other-app"], None)
        .unwrap();
    refused_everywhere(&s, &other, "deactivated client").await;
    assert_eq!(call(&s, &demo_token).await.0, 200, "other tokens pass");

    step_reuse_revokes_the_family(&s).await;

    // The revoke endpoint on a refresh token: the same for its family.
    let family = password(&s, demo::USER, demo::PASSWORD).await;
    revoke(&s, family["refresh_token"].as_str().unwrap()).await;
    refused_everywhere(&s, &access(&family), "revoked family").await;
    assert_eq!(call(&s, &demo_token).await.0, 200, "other tokens pass");

    let c = s.counters().await.unwrap();
    assert!(c.get("revoked").copied().unwrap_or(0) >= 7 * 24, "{c:?}");
    assert!(s.stop());
}

/// Until the edge holds every revocation recorded so far: a sentinel token revoked now is refused
/// at both workers, and the feed brings revocations in the order they were recorded.
pub(crate) async fn edge_caught_up(s: &Stack) {
    let sentinel = client_token(s).await;
    revoke(s, &sentinel).await;
    refused_everywhere(s, &sentinel, "a sentinel revoked last").await;
}

/// GET the edge feed straight from the first issuer (a loopback peer) as `client`.
pub(crate) async fn feed_direct(
    s: &Stack,
    client: (&str, &str),
    headers: &[(&str, &str)],
) -> (u16, String) {
    let mut req = reqwest::Client::new()
        .get(format!("{}/apiv2/oauth/edge", s.issuer_url()))
        .basic_auth(client.0, Some(client.1));
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// The second outside probe's finding 5 (low): the edge feed, with every key, answered through Envoy's public listener, where
/// the issuer saw Envoy's loopback address. The shipped configuration no longer routes it, and the
/// issuer refuses a feed request that came through a proxy, while the edges' own polls go on.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn the_edge_feed_is_not_served_through_a_proxy() {
    let (_tmp, s) = edge_stack().await;
    let secret = s.edge_secret.clone().unwrap();
    let through_envoy = s
        .client()
        .get(format!("{}/apiv2/oauth/edge", s.url()))
        .basic_auth(demo::EDGE_CLIENT, Some(&secret))
        .send()
        .await
        .unwrap();
    let status = through_envoy.status();
    let body = through_envoy.text().await.unwrap();
    assert_ne!(status, 200, "the feed answered through Envoy: {body}");
    assert!(!body.contains("\"keys\""), "{body}");
    // Every header that says a proxy relayed the request, each alone.
    for name in shared::edge_feed::RELAY_HEADERS {
        let header = (name, "203.0.113.9");
        let (status, body) = feed_direct(&s, (demo::EDGE_CLIENT, &secret), &[header]).await;
        assert_eq!(status, 403, "{header:?}: {body}");
        assert!(body.contains("proxy"), "{body}");
    }
    // What Envoy's own HTTP client adds to a native module's poll, had the feed's cluster
    // (`issuer_feed`) not stripped it: refused as well.
    let envoys_own = [
        ("x-envoy-internal", "true"),
        ("x-forwarded-for", "127.0.0.1"),
    ];
    let (status, body) = feed_direct(&s, (demo::EDGE_CLIENT, &secret), &envoys_own).await;
    assert_eq!(status, 403, "{body}");
    // The edges' own polls, through the `issuer_feed` cluster, still succeed: a revocation
    // reaches every worker.
    let revoked = client_token(&s).await;
    revoke(&s, &revoked).await;
    refused_everywhere(&s, &revoked, "revoked after the refused feed requests").await;
    assert_eq!(
        feed_direct(&s, (demo::EDGE_CLIENT, &secret), &[]).await.0,
        200
    );
    // The logs name users and clients: only the stack's owner reads them (an info finding).
    for log in ["issuer.log", "envoy.log"] {
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(s.dir.join(log)).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o600, "{log}");
    }
    assert!(s.stop());
}

/// The second outside probe's finding 8 (low): after `keys rotate --delay 86400`, neither `keys rotate --delay 0` nor
/// `keys retire` was accepted, so a compromised key kept verifying for up to a day. Now a new key
/// signs at once whatever is pending (the pending key is dropped), and the old one is retired at
/// every issuer and edge.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_compromised_key_is_cut_at_once_while_a_rotation_is_pending() {
    let (_tmp, s) = edge_stack().await;
    let old = access(&password(&s, demo::USER, demo::PASSWORD).await);
    assert_eq!(call(&s, &old).await.0, 200);
    let kid = |t: &str| shared::token::inspect(t).unwrap().kid;
    let old_kid = kid(&old);
    s.admin(&["keys", "rotate", "--delay", "86400"], None)
        .unwrap();
    let pending_kid = old_kid + 1;
    let out = s
        .admin(&["keys", "rotate", "--delay", "0"], None)
        .expect("an emergency rotation is accepted while one is pending");
    assert!(out.contains("now signs"), "{out}");
    let list = s.admin(&["keys", "list"], None).unwrap();
    let state_of = |list: &str, kid: u32| {
        list.lines()
            .find(|l| l.split_whitespace().next() == Some(&kid.to_string()))
            .and_then(|l| l.split_whitespace().nth(1))
            .map(str::to_owned)
    };
    assert_ne!(
        state_of(&list, pending_kid).as_deref(),
        Some("pending"),
        "{list}"
    );
    // The new key signs at once.
    let fresh = access(&password(&s, demo::USER, demo::PASSWORD).await);
    assert!(kid(&fresh) > pending_kid, "{list}");
    // The old key is cut: refused at every issuer and edge.
    s.admin(&["keys", "retire", &old_kid.to_string()], None)
        .expect("the superseded key retires");
    refused_everywhere(&s, &old, "a token of the retired key").await;
    assert_eq!(call(&s, &fresh).await.0, 200);
    // The dropped pending key never signs, and leaves the edges' ring.
    let later = s.admin(&["keys", "list"], None).unwrap();
    assert!(
        matches!(
            state_of(&later, pending_kid).as_deref(),
            None | Some("retired")
        ),
        "{later}"
    );
    assert!(s.stop());
}
