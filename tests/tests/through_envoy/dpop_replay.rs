//! The memory of used DPoP proofs through the real stack, at the edge (each filter) and at the
//! issuer: one client flooding it with proofs dated ahead under several keys, all landing in
//! one shard, never gets another client's bound request refused; and no proof passes twice
//! across a restart of Envoy or of the issuer.

use super::dpop::{bound_token, dpop_header, find_url, now, token_url, token_with, with};
use crate::stack;
use e2e::Stack;
use serde_json::json;
use shared::dpop::sign::{ProofClaims, ProofKey};
use shared::dpop::MAX_AHEAD_SECONDS;

/// The replay memory of the probe: 1,000 proofs.
const ENTRIES: usize = 1_000;

/// The flood's proof window: longer than the flood takes on a loaded machine.
const FLOOD_WINDOW_SECONDS: u64 = 300;

/// How the edge answered one proof of the flood.
#[derive(Clone, Copy)]
enum Flood {
    Passed = 0,
    /// 429: its key holds its share.
    Busy = 1,
    /// 401: no newer than a proof of its key the full shard forgot.
    Forgotten = 2,
}

fn flood_answer(r: reqwest::Response) -> Flood {
    match r.status().as_u16() {
        200 => Flood::Passed,
        429 => {
            assert_eq!(r.headers()["retry-after"], "1");
            Flood::Busy
        }
        401 => {
            let www = r.headers()["www-authenticate"].to_str().unwrap();
            assert!(
                www.contains("older than this server can vouch for"),
                "{www}"
            );
            Flood::Forgotten
        }
        other => panic!("a flood proof answered {other}"),
    }
}

/// Whether the proof `jti` of `key` lands in the first shard of the native filter (16, by the
/// id's first byte) and the first bucket of the Wasm filter.
fn in_the_first_shard(key: &ProofKey, jti: &str) -> bool {
    let id = shared::dpop::replay_id(&key.jkt(), jti);
    let wasm_buckets = (ENTRIES / 128).max(1);
    id[0].is_multiple_of(16) && shared::dpop::replay::bucket_of(&id, wasm_buckets) == 0
}

/// Proofs by `key` for `url` with `token`'s hash, dated `ahead` seconds from now, each of them
/// in the first shard.
fn shard_proofs(key: &ProofKey, url: &str, token: &str, ahead: u64, n: usize) -> Vec<String> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let i = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let jti = format!("flood-{}-{i}", std::process::id());
        if in_the_first_shard(key, &jti) {
            out.push(key.proof(&ProofClaims {
                htm: "POST",
                htu: url,
                jti: &jti,
                iat: now() + ahead,
                access_token: Some(token),
                nonce: None,
            }));
        }
    }
    out
}

async fn send(s: &Stack, token: &str, proof: &str) -> reqwest::Response {
    s.client()
        .post(find_url(s))
        .headers(with("authorization", "DPoP", token, &[proof]))
        .body("{}")
        .send()
        .await
        .unwrap()
}

/// The probe's attack, with five keys of one client: the flood is answered 200, 429 (its keys
/// over their share) or 401 (its oldest proofs forgotten when the shard filled, its key then
/// waiting out its floor), never 503, and another client's bound requests in the same shard
/// all pass meanwhile. Deterministic at any speed: each key's proofs are made at once (one
/// `iat`, so one expiry) and the window outlasts the flood, so none expires meanwhile. The
/// first key sends all its proofs alone (past its share: 429); the other four then take turns
/// until the shard is full, and a key that loses its oldest proof has its next one refused as
/// no newer (401).
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn one_client_flooding_one_shard_never_refuses_another() {
    let (_tmp, mut s) = stack(&[]).await;
    s.restart_envoy_edited(|cfg| {
        cfg["dpop"]["replay_entries"] = json!(ENTRIES);
        cfg["dpop"]["proof_window_seconds"] = json!(FLOOD_WINDOW_SECONDS);
    })
    .unwrap();
    s.dpop_ready().await;
    let url = find_url(&s);
    let honest = ProofKey::es256([0x5a; 32]).unwrap();
    let honest_token = bound_token(&s, &honest).await;
    let mut flooders = Vec::new();
    for k in 0..5u8 {
        let key = ProofKey::ed25519([0x60 + k; 32]);
        let token = bound_token(&s, &key).await;
        // Dated as far ahead as a proof may be, less the second the Wasm filter's clock may lag
        // (it reads the time once a tick).
        let proofs = shard_proofs(&key, &url, &token, MAX_AHEAD_SECONDS - 1, 100);
        flooders.push((token, proofs));
    }
    let mut tally = [0usize; 3];
    let (alone, turns) = flooders.split_at(1);
    for proof in &alone[0].1 {
        tally[flood_answer(send(&s, &alone[0].0, proof).await) as usize] += 1;
    }
    for i in 0..100 {
        for (token, proofs) in turns {
            tally[flood_answer(send(&s, token, &proofs[i]).await) as usize] += 1;
        }
        if i % 20 == 0 {
            for p in shard_proofs(&honest, &url, &honest_token, 0, 2) {
                let r = send(&s, &honest_token, &p).await;
                assert_eq!(
                    r.status(),
                    200,
                    "the honest client, after {i} turns of the flood"
                );
            }
        }
    }
    let [passed, busy, forgotten] = tally;
    let c = s.counters().await.unwrap();
    assert!(
        passed > 0 && busy > 0 && forgotten > 0,
        "{passed} passed, {busy} over their key's share, {forgotten} forgotten"
    );
    assert!(c["dpop_key_busy"] >= 1 && c["dpop_too_old"] >= 1, "{c:?}");
    assert_eq!(c.get("dpop_replay_busy").copied().unwrap_or(0), 0, "{c:?}");
    assert!(s.stop());
}

/// A proof accepted just before Envoy restarts is refused after it (both filters), as too old
/// for the new memory; a proof made after the restart passes once the few seconds a proof may
/// be dated ahead have passed.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn no_proof_passes_twice_across_an_envoy_restart() {
    let (_tmp, mut s) = stack(&[]).await;
    s.dpop_ready().await;
    let key = ProofKey::es256([0x5b; 32]).unwrap();
    let t = bound_token(&s, &key).await;
    let url = find_url(&s);
    let used = shard_proofs(&key, &url, &t, MAX_AHEAD_SECONDS - 1, 1).remove(0);
    assert_eq!(send(&s, &t, &used).await.status(), 200);
    assert_eq!(send(&s, &t, &used).await.status(), 401, "a replay");
    s.restart_envoy().unwrap();
    let r = send(&s, &t, &used).await;
    assert_eq!(r.status(), 401, "replayed after the restart");
    let www = r.headers()["www-authenticate"].to_str().unwrap().to_owned();
    assert!(www.contains("invalid_dpop_proof"), "{www}");
    let c = s.counters().await.unwrap();
    assert_eq!(c["dpop_too_old"], 1, "{c:?}");
    // Each try is a proof the filter remembers: a few a second.
    let every = std::time::Duration::from_millis(250);
    let passes = e2e::wait::until_some_every(every, e2e::wait::LONG, async || {
        let fresh = shard_proofs(&key, &url, &t, 0, 1).remove(0);
        match send(&s, &t, &fresh).await.status().as_u16() {
            200 => Some(()),
            401 => None,
            other => panic!("{other}"),
        }
    });
    assert!(passes.await.is_some(), "never passes again");
    assert!(s.stop());
}

/// At the issuer on the embedded store: a proof dated ahead, used for a token before a restart,
/// is refused after it.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn no_proof_gets_a_token_twice_across_an_issuer_restart() {
    let (_tmp, mut s) = stack(&[]).await;
    s.dpop_ready().await;
    let key = ProofKey::es256([0x5c; 32]).unwrap();
    let used = key.proof(&ProofClaims {
        htm: "POST",
        htu: &token_url(&s),
        jti: "restart-1",
        iat: now() + MAX_AHEAD_SECONDS - 1,
        access_token: None,
        nonce: None,
    });
    assert_eq!(token_with(&s, dpop_header(&used)).await.0, 200);
    s.stop_issuer(0).unwrap();
    s.start_issuer_again(0).unwrap();
    let (status, _, v) = token_with(&s, dpop_header(&used)).await;
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["error"], "invalid_dpop_proof", "{v}");
    assert!(s.stop());
}
