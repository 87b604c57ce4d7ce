//! Edge sync when things change or go wrong: a key rotated and retired without touching Envoy, the
//! issuer stopped and started, and a feed answering garbage.

use crate::edge::{
    access, call, client_token, counters, edge_stack, password, refused_everywhere, revoke,
};
use e2e::{demo, wait, Stack};
use serde_json::{json, Value};
use shared::token;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// The counter `name` now.
async fn counter(s: &Stack, name: &str) -> u64 {
    counters(s).await.get(name).copied().unwrap_or(0)
}

/// Until the counter `name` has grown by at least `by`.
async fn counter_grows(s: &Stack, name: &str, by: u64) {
    let start = counter(s, name).await;
    counter_reaches(s, name, start + by).await;
}

/// Until the counter `name` is at least `target` (the Wasm filter hands its counts to Envoy once
/// a second, the native one at once).
async fn counter_reaches(s: &Stack, name: &str, target: u64) {
    let reached = wait::until(wait::LONG, async || counter(s, name).await >= target);
    assert!(reached.await, "{name} stayed below {target}\n{}", s.logs());
}

/// A token of the demo user, and another one revoked and refused at both workers.
async fn good_and_revoked(s: &Stack) -> (String, String) {
    let good = access(&password(s, demo::USER, demo::PASSWORD).await);
    let revoked = access(&password(s, demo::USER, demo::PASSWORD).await);
    revoke(s, &revoked).await;
    refused_everywhere(s, &revoked, "revoked token").await;
    (good, revoked)
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn keys_rotate_and_retire_without_touching_envoy() {
    let (_tmp, s) = edge_stack().await;
    let envoy_pid = s.pids().1;
    let old = client_token(&s).await;
    // Published first (5 s by default), then signing: no token is refused meanwhile.
    let out = s.admin(&["keys", "rotate"], None).unwrap();
    assert!(out.contains("key 2 is published now"), "{out}");
    let new = wait::until_some(wait::LONG, async || {
        let t = client_token(&s).await;
        assert_eq!(call(&s, &t).await.0, 200, "no valid token is refused");
        assert_eq!(call(&s, &old).await.0, 200, "the old key still verifies");
        (token::inspect(&t).unwrap().kid == 2).then_some(t)
    });
    let new = new.await.expect("key 2 never signed");
    // Retired by hand: the old key stops verifying at every worker, the new one goes on.
    let out = s.admin(&["keys", "retire", "1"], None).unwrap();
    assert!(out.contains("key 1 is retired"), "{out}");
    refused_everywhere(&s, &old, "a token of a retired key").await;
    assert_eq!(call(&s, &new).await.0, 200);
    assert_eq!(s.pids().1, envoy_pid, "Envoy was never restarted");
    assert!(s.stop());
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn an_unreachable_issuer_leaves_the_last_state_in_force() {
    let (_tmp, mut s) = edge_stack().await;
    let (good, revoked) = good_and_revoked(&s).await;

    s.stop_issuer(0).unwrap();
    counter_grows(&s, "edge_sync_failed", 6).await;
    for _ in 0..8 {
        assert_eq!(call(&s, &good).await.0, 200, "valid tokens still pass");
        assert_eq!(call(&s, &revoked).await.0, 401, "revoked ones stay refused");
    }
    // The age gauge is the last writer's (any VM's): it reaches 2 s within a few polls.
    let age_shown = wait::until(wait::LONG, async || {
        let c = counters(&s).await;
        c.get("edge_sync_age_seconds").copied().unwrap_or(0) >= 2
    });
    assert!(age_shown.await, "the state's age is not shown");
    let log = std::fs::read_to_string(s.dir.join("envoy.log")).unwrap();
    assert!(log.contains("mms_auth: edge sync failed"), "{log}");

    s.start_issuer_again(0).unwrap();
    // Each poller's first poll after the restart is answered (then held: it waits for news).
    counter_grows(&s, "edge_sync_ok", s.edge_pollers()).await;
    let later = access(&password(&s, demo::USER, demo::PASSWORD).await);
    revoke(&s, &later).await;
    refused_everywhere(&s, &later, "revoked after the restart").await;
    assert_eq!(call(&s, &good).await.0, 200);
    let log = std::fs::read_to_string(s.dir.join("envoy.log")).unwrap();
    assert!(log.contains("mms_auth: edge sync resumed"), "{log}");
    assert!(s.stop());
}

/// What the impostor feed answers.
#[derive(Clone)]
enum Hostile {
    Status(u16),
    Garbage,
    Huge,
    /// A valid-looking answer older than what the filter holds.
    Stale(String),
    /// A full snapshot without the revocations: accepted, and still takes nothing back.
    Empty(String),
}

fn answer(mode: &Hostile) -> warp::http::Response<Vec<u8>> {
    let (status, body) = match mode {
        Hostile::Status(code) => (*code, b"{}".to_vec()),
        Hostile::Garbage => (200, b"<html>\x00\xffnot a feed</html>".to_vec()),
        Hostile::Huge => (200, vec![b' '; 10 << 20]),
        Hostile::Stale(v) => (
            200,
            json!({"cursor": 0, "keys_version": v, "revoked": []})
                .to_string()
                .into_bytes(),
        ),
        Hostile::Empty(v) => (
            200,
            json!({"cursor": 0, "keys_version": v, "full": true, "revoked": []})
                .to_string()
                .into_bytes(),
        ),
    };
    warp::http::Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(body)
        .unwrap()
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn hostile_feed_answers_change_nothing() {
    use warp::Filter as _;
    let (_tmp, mut s) = edge_stack().await;
    let (good, revoked) = good_and_revoked(&s).await;
    let edge_secret = s.edge_secret.clone().unwrap();
    let feed: Value = reqwest::Client::new()
        .get(format!("{}/apiv2/oauth/edge", s.issuer_url()))
        .basic_auth(demo::EDGE_CLIENT, Some(edge_secret))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let version = feed["keys_version"].as_str().unwrap().to_owned();

    // An impostor takes the issuer's port.
    s.stop_issuer(0).unwrap();
    let mode = Arc::new(Mutex::new(Hostile::Status(500)));
    let served = mode.clone();
    let route = warp::any().map(move || answer(&served.lock().unwrap()));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", s.ports.issuer))
        .await
        .unwrap();
    let impostor = tokio::spawn(warp::serve(route).incoming(listener).run());

    let check = |what: &'static str| {
        let (s, good, revoked) = (&s, good.clone(), revoked.clone());
        async move {
            for _ in 0..6 {
                assert_eq!(call(s, &good).await.0, 200, "{what}: valid tokens pass");
                assert_eq!(
                    call(s, &revoked).await.0,
                    401,
                    "{what}: revoked stays refused"
                );
            }
        }
    };
    for (m, what) in [
        (Hostile::Status(500), "500"),
        (Hostile::Status(401), "401"),
        (Hostile::Garbage, "garbage"),
        (Hostile::Huge, "10 MiB"),
        (Hostile::Stale(version.clone()), "a stale cursor"),
    ] {
        *mode.lock().unwrap() = m;
        let ok = counters(&s).await.get("edge_sync_ok").copied();
        counter_grows(&s, "edge_sync_failed", 3).await;
        assert_eq!(
            counters(&s).await.get("edge_sync_ok").copied(),
            ok,
            "{what}"
        );
        check(what).await;
    }
    *mode.lock().unwrap() = Hostile::Empty(version);
    counter_grows(&s, "edge_sync_ok", 3).await;
    check("a snapshot without the revocation").await;
    impostor.abort();
    assert!(s.stop());
}

/// A protected call on a connection of its own: the status, `WWW-Authenticate` and `Retry-After`.
async fn call_with_retry_after(s: &Stack, token: Option<&str>) -> (u16, String, Option<String>) {
    let http = s
        .client_builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let mut req = http.get(format!("{}/apiv2/MediaService/Find", s.url()));
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    let r = req.send().await.unwrap();
    let header = |name: &str| {
        r.headers()
            .get(name)
            .map(|v| v.to_str().unwrap_or("").to_owned())
    };
    let (www, retry) = (
        header("www-authenticate").unwrap_or_default(),
        header("retry-after"),
    );
    (r.status().as_u16(), www, retry)
}

/// Finding 3 of the outside probe: an Envoy (re)started while the feed is unreachable has no
/// revocation at all; it must not accept what it cannot know to be unrevoked.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn an_envoy_started_while_the_issuer_is_down_refuses_until_its_first_answer() {
    let (_tmp, mut s) = edge_stack().await;
    let (good, revoked) = good_and_revoked(&s).await;
    s.stop_issuer(0).unwrap();
    assert_eq!(
        call(&s, &revoked).await.0,
        401,
        "the running Envoy keeps it"
    );

    s.restart_envoy_without_waiting().unwrap();
    let unsynced = counter(&s, "unsynced").await;
    for _ in 0..8 {
        let (status, www, retry) = call_with_retry_after(&s, Some(&revoked)).await;
        assert_ne!(
            status, 200,
            "a revoked token passed an Envoy started while the issuer was down"
        );
        assert_eq!(status, 503, "{www}");
        assert!(www.contains("temporarily_unavailable"), "{www}");
        assert_eq!(retry.as_deref(), Some("1"));
        assert_eq!(call_with_retry_after(&s, Some(&good)).await.0, 503);
        let (missing, _, _) = call_with_retry_after(&s, None).await;
        assert_eq!(missing, 401, "no token is still 401");
    }
    counter_reaches(&s, "unsynced", unsynced + 16).await;
    // Logged at the next tick (each second) after the refusals.
    let envoy_log = || std::fs::read_to_string(s.dir.join("envoy.log")).unwrap();
    let logged = wait::until(wait::LONG, async || {
        envoy_log().contains("mms_auth: no good answer from edge sync yet")
    });
    assert!(logged.await, "{}", envoy_log());

    s.start_issuer_again(0).unwrap();
    let back = Instant::now();
    s.wait_for_edge_sync().unwrap();
    eprintln!(
        "every filter VM had its first answer {:?} after the issuer came back",
        back.elapsed()
    );
    refused_everywhere(&s, &revoked, "revoked before the restart").await;
    for _ in 0..8 {
        assert_eq!(call(&s, &good).await.0, 200);
    }
    let c = s.counters().await.unwrap();
    assert_eq!(
        c["edge_sync_first_ok"],
        s.edge_pollers(),
        "one per poller (Wasm: two workers, the main thread; native: one)"
    );
    assert!(s.stop());
}

/// Finding 6 of the outside probe: after a restore from a backup, the store numbers revocations
/// again from the backup's last one, so an edge whose cursor is ahead must not skip those it
/// never saw.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_revocation_recorded_after_a_restore_reaches_an_edge_whose_cursor_is_ahead() {
    let (_tmp, mut s) = edge_stack().await;
    s.admin(&["user", "add", "bob"], Some("bob-password"))
        .unwrap();
    s.admin(&["user", "add", "carol"], Some("carol-password"))
        .unwrap();
    let bob = access(&password(&s, "bob", "bob-password").await);
    assert_eq!(call(&s, &bob).await.0, 200);
    // The backup, `issuer backup` through the running issuer's admin socket.
    let backup = s.dir.join("issuer.backup");
    s.admin(&["backup", "--to", backup.to_str().unwrap()], None)
        .unwrap();
    // Five revocations the edge takes in: its cursor is five ahead of the backup's.
    let mut last = String::new();
    for _ in 0..5 {
        last = access(&password(&s, demo::USER, demo::PASSWORD).await);
        revoke(&s, &last).await;
    }
    refused_everywhere(&s, &last, "the fifth revocation").await;

    // The restore, and six revocations recorded before the issuer serves again: bob's first,
    // numbered where the edge has already been.
    s.stop_issuer(0).unwrap();
    std::fs::remove_dir_all(&s.data).unwrap();
    s.admin(&["restore", "--from", backup.to_str().unwrap()], None)
        .unwrap();
    s.admin(&["user", "disable", "bob"], None).unwrap();
    for _ in 0..5 {
        s.admin(&["user", "disable", "carol"], None).unwrap();
        s.admin(&["user", "enable", "carol"], None).unwrap();
    }
    s.start_issuer_again(0).unwrap();

    let introspected: Value = s
        .client()
        .post(format!("{}/apiv2/oauth/introspect", s.url()))
        .basic_auth(demo::CLIENT, Some(&s.secret))
        .form(&[("token", bob.as_str())])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(introspected["active"], false, "the issuer knows bob is out");
    let refused = wait::until(wait::LONG, async || call(&s, &bob).await.0 == 401);
    assert!(
        refused.await,
        "the disabled user's token is still accepted at the edge after the issuer came back \
         from the restore\n{}",
        s.logs()
    );
    refused_everywhere(&s, &bob, "bob, disabled after the restore").await;
    assert!(s.stop());
}
