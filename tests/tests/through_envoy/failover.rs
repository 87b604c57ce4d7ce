//! PostgreSQL failover under load: two issuers on the multi-host URL of a primary and its
//! synchronous streaming standby (`target_session_attrs=read-write`) behind the shipped Envoy
//! with edge sync, 32 clients refreshing; every process of the primary SIGKILLed mid-load, the
//! standby promoted. Nothing acknowledged is lost, no family forks, the clients see only 200 or
//! 503 with `Retry-After`, both issuers serve again without a restart, and edge sync goes on. And
//! a primary demoted in place (read-only, still answering) leaves no connection in the pools.

use crate::edge::{access, call, password, refused_everywhere, revoke, wait_for_sync};
use crate::feed_wait::{metrics, metrics_until, sample};
use e2e::alive;
use e2e::failover::Target;
use e2e::failover::{acknowledged, family_of, missing, stored_families, Load, Outcome, Stored};
use e2e::{demo, wait, Options, Stack, Tools, ISSUER_ROLE};
use std::time::{Duration, Instant};

/// Clients with a family of their own.
const OWN: usize = 24;
/// Families refreshed by several clients in lockstep, and how many each: 24 + 2 × 4 = 32.
const SHARED: [usize; 2] = [4, 4];
/// Rotations before the kill, and after the promotion, before the load stops.
const ROTATIONS: usize = 200;

/// The refresh token of a new family of the demo user, signed in at `token_url`.
async fn sign_in(http: &reqwest::Client, token_url: &str, secret: &str) -> String {
    let form = [
        ("grant_type", "password"),
        ("username", demo::USER),
        ("password", demo::PASSWORD),
    ];
    let r = http
        .post(token_url)
        .basic_auth(demo::CLIENT, Some(secret))
        .form(&form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: serde_json::Value = r.json().await.unwrap();
    v["refresh_token"].as_str().unwrap().to_owned()
}

/// Rotations among `answers` sent at or after `from`.
fn rotations_since(load: &Load, from: Instant) -> usize {
    let answers = load.answers();
    answers
        .iter()
        .filter(|a| a.at >= from && matches!(a.outcome, Outcome::Rotated(_)))
        .count()
}

/// Until `load` has made `n` rotations since `from`.
async fn until_rotations(load: &Load, from: Instant, n: usize) {
    let rotated = wait::until(wait::LONG, async || rotations_since(load, from) >= n).await;
    let made = rotations_since(load, from);
    assert!(rotated, "the load stalled: {made} rotations of {n}");
}

/// Rotates `token` at one issuer directly until it answers 200, every other answer a 503: the
/// successor.
async fn serves_again(target: &Target, token: &str) -> String {
    let url = &target.token_urls[0];
    let served = wait::until_some(wait::LONG, async || {
        let r = target
            .http
            .post(url)
            .basic_auth(&target.client_id, Some(&target.secret))
            .form(&[("grant_type", "refresh_token"), ("refresh_token", token)])
            .send()
            .await
            .unwrap();
        let status = r.status();
        if status == 200 {
            let v: serde_json::Value = r.json().await.unwrap();
            return Some(v["refresh_token"].as_str().unwrap().to_owned());
        }
        assert_eq!(status, 503, "{url}: {:?}", r.text().await);
        None
    });
    served
        .await
        .unwrap_or_else(|| panic!("{url} does not serve again after the promotion"))
}

/// Two issuers on the multi-host URL of a primary and its synchronous standby, behind Envoy (with
/// edge sync if asked), in a temp dir kept by the guard.
async fn standby_stack(edge_sync: bool) -> (tempfile::TempDir, Stack) {
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        postgres: true,
        standby: true,
        edge_sync,
        ..Options::default()
    };
    let stack = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    (tmp, stack)
}

/// The load's target, through Envoy or at one issuer's `token_url`.
fn target(s: &Stack, http: reqwest::Client, token_url: String) -> Target {
    Target {
        http,
        token_urls: vec![token_url],
        client_id: demo::CLIENT.into(),
        secret: s.secret.clone(),
    }
}

/// The issuers' ports.
fn issuer_ports(s: &Stack) -> Vec<u16> {
    std::iter::once(s.ports.issuer)
        .chain(s.more_issuers.iter().copied())
        .collect()
}

/// One family per issuer, refreshed at that issuer directly to see it serve again.
async fn probes(s: &Stack) -> Vec<(Target, String)> {
    let mut probes = Vec::new();
    for port in issuer_ports(s) {
        let url = format!("http://127.0.0.1:{port}/apiv2/oauth/token");
        let target = target(s, reqwest::Client::new(), url);
        let first = sign_in(&target.http, &target.token_urls[0], &s.secret).await;
        probes.push((target, first));
    }
    probes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Envoy and PostgreSQL: `cargo xtask test` runs it"]
async fn a_killed_primary_fails_over_to_its_synchronous_standby_under_load() {
    let (_tmp, mut s) = standby_stack(true).await;
    wait_for_sync(&s).await;
    let http = s.client();
    let token_url = format!("{}/apiv2/oauth/token", s.url());
    let mut families = Vec::new();
    for clients in std::iter::repeat_n(1, OWN).chain(SHARED) {
        families.push((sign_in(&http, &token_url, &s.secret).await, clients));
    }
    let probes = probes(&s).await;
    let started = Instant::now();
    let load = Load::start(
        &target(&s, http, token_url),
        families,
        started + Duration::from_secs(60),
    );
    until_rotations(&load, started, ROTATIONS).await;
    let promoted = step_kill_the_primary_and_promote_the_standby(&mut s, &load).await;
    // Both issuers serve again, without a restart.
    let mut probe_heads = Vec::new();
    for (target, token) in &probes {
        probe_heads.push(serves_again(target, token).await);
        eprintln!(
            "{} serves again {:?} after the promotion",
            target.token_urls[0],
            promoted.elapsed()
        );
    }
    until_rotations(&load, promoted, ROTATIONS).await;
    let (answers, last) = load.finish().await.unwrap();
    let unavailable = step_only_200_or_503_with_retry_after(&s, &answers);
    assert!(unavailable > 0, "the failover went unseen");
    step_no_family_forked(&mut s, &answers, &last, &probe_heads).await;
    step_edge_sync_goes_on(&s).await;
    assert!(s.stop());
}

/// Step: the primary's host dies, every process of it at once; every rotation acknowledged
/// by then is on the standby, which is promoted. When it was promoted.
async fn step_kill_the_primary_and_promote_the_standby(s: &mut Stack, load: &Load) -> Instant {
    let (primary, standby) = s.postgres_pair().unwrap();
    let killed_at = Instant::now();
    let killed = tokio::task::block_in_place(|| primary.kill()).unwrap();
    assert!(killed.len() > 3, "postmaster and its children: {killed:?}");
    assert!(killed.iter().all(|p| !alive(*p)), "{killed:?}");
    // The clients see the outage (503 with Retry-After) before the standby is promoted.
    let outage_seen = wait::until(wait::LONG, async || {
        load.answers().iter().any(|a| {
            a.at >= killed_at && matches!(a.outcome, Outcome::Unavailable { retry_after: true })
        })
    });
    assert!(outage_seen.await, "no 503 after the kill\n{}", s.logs());
    let acked = acknowledged(&load.answers(), Instant::now());
    tokio::task::block_in_place(|| standby.promote()).unwrap();
    let promoted = Instant::now();
    let stored = stored_families(standby).unwrap();
    assert_eq!(missing(&acked, &stored), vec![], "acknowledged, then lost");
    assert!(!acked.is_empty());
    promoted
}

/// Step: every answer is 200 (the successor of the token presented) or 503 with
/// `Retry-After`; how many were 503.
fn step_only_200_or_503_with_retry_after(s: &Stack, answers: &[e2e::failover::Answer]) -> usize {
    let mut unavailable = 0;
    for a in answers {
        match &a.outcome {
            Outcome::Rotated(g) => assert_eq!(*g, a.presented + 1, "{a:?}"),
            Outcome::Unavailable { retry_after: true } => unavailable += 1,
            other => panic!("{other:?} for {a:?}\n{}", s.logs()),
        }
    }
    let rotated = answers.len() - unavailable;
    eprintln!("{rotated} rotations, {unavailable} answers 503 with Retry-After");
    unavailable
}

/// Step: no fork: every family stands in the store exactly where its clients last saw it.
async fn step_no_family_forked(
    s: &mut Stack,
    answers: &[e2e::failover::Answer],
    last: &[String],
    probe_heads: &[String],
) {
    let (_, standby) = s.postgres_pair().unwrap();
    let stored = stored_families(standby).unwrap();
    let acked = acknowledged(answers, Instant::now());
    let mut expected = std::collections::HashMap::new();
    for head in last {
        let (family, generation) = family_of(head).unwrap();
        assert_eq!(
            acked.get(&family),
            Some(&generation),
            "the last answer of {family}"
        );
        expected.insert(family, generation);
    }
    expected.extend(probe_heads.iter().map(|h| family_of(h).unwrap()));
    assert_eq!(expected.len(), OWN + SHARED.len() + probe_heads.len());
    for (family, generation) in &expected {
        let want = Stored {
            generation: *generation,
            revoked: false,
        };
        assert_eq!(stored.get(family), Some(&want), "family {family}");
    }
}

/// Step: both issuers listen for each other's changes again, on the promoted standby, and edge
/// sync goes on, the edges waiting on the issuers: a revocation made after the failover is
/// refused at Envoy, and it ended a wait with news.
async fn step_edge_sync_goes_on(s: &Stack) {
    let ports = issuer_ports(s);
    for port in &ports {
        let what = format!("issuer {port} is not listening");
        metrics_until(*port, wait::LONG, &what, |m| {
            sample(m, "issuer_feed_listening", "") == 1
        })
        .await;
    }
    let token = access(&password(s, demo::USER, demo::PASSWORD).await);
    assert_eq!(call(s, &token).await.0, 200);
    revoke(s, &token).await;
    refused_everywhere(s, &token, "revoked after the failover").await;
    let mut woken = 0;
    for port in &ports {
        woken += sample(&metrics(*port).await, "issuer_feed_waits_total", "news");
    }
    assert!(woken > 0, "no wait ended with news");
}

/// Connections of the issuers' database role ([`ISSUER_ROLE`]) to `pg`, but for a commit left
/// waiting for the synchronous standby that was promoted (`wait_event` `SyncRep`): it committed
/// on the old primary before it was demoted and waits for an acknowledgement that will never
/// come, whether or not its client is still there (PostgreSQL notices a client gone during that
/// wait only with `client_connection_check_interval`, which the issuer does not set: CockroachDB
/// has no such setting). The issuer abandons such a connection after its bound and answers 503
/// (`issuer::store::Unreachable::Unanswered`); the load rotating again shows the pools serve
/// without it.
fn app_connections(pg: &e2e::postgres::PgCluster) -> u64 {
    let out = pg
        .psql(&format!(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = '{ISSUER_ROLE}' \
             AND backend_type = 'client backend' AND wait_event IS DISTINCT FROM 'SyncRep'"
        ))
        .unwrap();
    out.trim().parse().unwrap()
}

/// The old primary is demoted in place (read-only, still answering) instead of killed, and the
/// standby promoted: the case where pools kept read-only connections
/// (<https://github.com/keycloak/keycloak/issues/24493>). Every answer is 200 or 503 with
/// Retry-After, never a 500; the load rotates again; and no connection to the old primary is
/// left in the issuers' pools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Envoy and PostgreSQL: `cargo xtask test` runs it"]
async fn a_primary_demoted_in_place_leaves_no_connection_in_the_pools() {
    let (_tmp, mut s) = standby_stack(false).await;
    let http = s.client();
    let token_url = format!("{}/apiv2/oauth/token", s.url());
    let mut families = Vec::new();
    for _ in 0..8 {
        families.push((sign_in(&http, &token_url, &s.secret).await, 1));
    }
    let started = Instant::now();
    let load = Load::start(
        &target(&s, http, token_url),
        families,
        started + Duration::from_secs(60),
    );
    until_rotations(&load, started, 100).await;
    let (primary, standby) = s.postgres_pair().unwrap();
    assert!(app_connections(primary) > 0, "the issuers use the primary");
    tokio::task::block_in_place(|| primary.set_read_only()).unwrap();
    tokio::task::block_in_place(|| standby.promote()).unwrap();
    let promoted = Instant::now();
    until_rotations(&load, promoted, 100).await;
    let recovered = promoted.elapsed();
    // The pools hold no connection to the read-only old primary (they are dropped, not reused).
    let drained = wait::until(wait::LONG, async || app_connections(primary) == 0);
    assert!(
        drained.await,
        "connections left on the old primary: {}",
        primary
            .psql(&format!(
                "SELECT state, wait_event, application_name, left(query, 60), now() - state_change \
                 FROM pg_stat_activity WHERE usename = '{ISSUER_ROLE}'"
            ))
            .unwrap()
    );
    let drained = promoted.elapsed();
    let (answers, _) = load.finish().await.unwrap();
    let unavailable = step_only_200_or_503_with_retry_after(&s, &answers);
    eprintln!(
        "demoted in place: 100 rotations again {recovered:?} after the promotion, no connection \
         on the old primary after {drained:?}; {} answers, {unavailable} of them 503",
        answers.len()
    );
    assert!(s.stop());
}
