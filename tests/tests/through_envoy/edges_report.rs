//! Which edge holds what (`issuer edges`, `issuer keys status`) and a key rotation that waits
//! for the edges (`issuer keys rotate --when-edges-ready`), through a real Envoy with two
//! workers: every VM reports in, the rotation switches only once all of them hold the new key
//! (and no valid request is refused meanwhile), a rotation whose edges cannot reach the issuer
//! times out with the old key signing, and a stopped Envoy drops off the list.

use crate::edge::{call, client_token, wait_for_sync};
use e2e::{demo, wait, Options, Stack, Tools};
use serde_json::Value;
use shared::token;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Seconds after which the issuer forgets an edge that stopped polling, in this test.
const FORGET_AFTER: u64 = 15;

/// `issuer edges --json`: one object per edge.
fn edges(s: &Stack) -> Vec<Value> {
    s.admin(&["edges", "--json"], None)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Until `issuer edges` lists `n` edges that all satisfy `ok`; fails after `within`.
async fn edges_until(
    s: &Stack,
    n: usize,
    within: Duration,
    ok: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let listed = wait::until_some(within, async || {
        let list = edges(s);
        (list.len() == n && list.iter().all(&ok)).then_some(list)
    });
    match listed.await {
        Some(list) => list,
        None => {
            let stats = s.envoy_admin("/stats?filter=mms_auth").map(|(_, t)| t);
            panic!(
                "edges: {:#?}\nenvoy stats: {stats:?}\n{}",
                edges(s),
                s.logs()
            );
        }
    }
}

/// `issuer keys status`, once it passes (fails after [`wait::LONG`], with the edges' rows).
async fn until_status_passes(s: &Stack) -> String {
    let passed = wait::until_some(wait::LONG, async || {
        match s.admin(&["keys", "status"], None) {
            Ok(out) => Some(out),
            Err(e) => {
                eprintln!("keys status failed: {e}\nedges: {:?}", edges(s));
                None
            }
        }
    });
    passed
        .await
        .unwrap_or_else(|| panic!("keys status never passed\n{}", s.logs()))
}

/// The issuer's `/metrics` once it contains `line` (its edge gauges are set at each write of
/// the reports, every 2 s).
async fn metrics_with(s: &Stack, line: &str) -> String {
    let url = format!("{}/metrics", s.issuer_url());
    let served = async || reqwest::get(&url).await.unwrap().text().await.unwrap();
    let found = wait::until_some(wait::LONG, async || {
        Some(served().await).filter(|m| m.contains(line))
    });
    match found.await {
        Some(m) => m,
        None => panic!("no {line:?} in\n{}", served().await),
    }
}

fn kid(t: &str) -> u32 {
    token::inspect(t).unwrap().kid
}

/// A token signed with key `k`: at once from the issuer that promoted it, within a reload of the
/// key ring (a second) from the others.
async fn token_signed_with(s: &Stack, k: u32) -> String {
    let signed = wait::until_some(wait::LONG, async || {
        Some(client_token(s).await).filter(|t| kid(t) == k)
    });
    signed
        .await
        .unwrap_or_else(|| panic!("key {k} does not sign"))
}

/// Calls through Envoy with fresh tokens until `done` and a token of key `last` passed; every
/// call must be accepted.
async fn traffic(s: &Stack, done: Arc<AtomicBool>, last: u32) -> (usize, Vec<u32>) {
    let (mut calls, mut kids) = (0, Vec::new());
    while !(done.load(Ordering::SeqCst) && kids.contains(&last)) {
        let t = client_token(s).await;
        let (status, www) = call(s, &t).await;
        assert_eq!(
            status,
            200,
            "a valid token (key {}) was refused: {www}",
            kid(&t)
        );
        calls += 1;
        kids.push(kid(&t));
    }
    (calls, kids)
}

#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn edges_report_in_and_a_rotation_waits_for_every_one() {
    edges_and_rotation(false).await;
}

/// The same with two issuers on one PostgreSQL: the edges' polls spread over both, and every
/// issuer and admin command sees one list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Envoy and PostgreSQL: `cargo xtask test` runs it"]
async fn on_postgresql_every_issuer_sees_every_edge() {
    edges_and_rotation(true).await;
}

/// The story of both tests above, a step each.
async fn edges_and_rotation(postgres: bool) {
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        edge_sync: true,
        postgres,
        issuer_args: vec!["--edge-forget-after".into(), FORGET_AFTER.to_string()],
        ..Options::default()
    };
    let s = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    wait_for_sync(&s).await;
    let edge = Edges {
        node: e2e::envoy::node_name(s.ports.listener),
        pollers: s.edge_pollers() as usize,
    };
    step_every_edge_reports_in(&s, &edge).await;
    let mut s = step_a_rotation_waits_for_every_edge(s, &edge).await;
    step_a_rotation_without_its_edges_times_out(&mut s, &edge).await;
    step_a_stopped_envoy_leaves_the_list(&mut s).await;
}

/// The edges of the stack's one Envoy: its node name, and how many pollers it runs.
struct Edges {
    node: String,
    pollers: usize,
}

/// Step: every poller (Wasm: a VM on each of two workers and on the main thread; native: one)
/// reports in, holding key 1 and every revocation.
async fn step_every_edge_reports_in(s: &Stack, edge: &Edges) {
    let (node, pollers) = (&edge.node, edge.pollers);
    let list = edges_until(s, pollers, wait::LONG, |e| {
        e["holds_newest_key"] == true && e["behind"] == 0
    })
    .await;
    let vms: std::collections::BTreeSet<_> = list.iter().map(|e| e["vm"].to_string()).collect();
    assert_eq!(vms.len(), pollers, "{list:#?}");
    for e in &list {
        assert_eq!(e["node"], node.as_str());
        assert_eq!(e["client"], demo::EDGE_CLIENT);
        assert_eq!(e["kids"], serde_json::json!([1]));
    }
    let table = s.admin(&["edges"], None).unwrap();
    assert_eq!(table.matches(node.as_str()).count(), pollers, "{table}");
    // Once in CI on PostgreSQL the reports said "lacks key 1" right after `issuer edges` said
    // all held it (one observation, not reproduced since): wait for the check to pass, and say
    // what the rows were meanwhile.
    let status = until_status_passes(s).await;
    assert!(
        status.contains("key 1 signs") && status.contains(&format!("{pollers} edges seen")),
        "{status}"
    );
    let served = metrics_with(s, &format!("issuer_edges {pollers}")).await;
    assert!(served.contains("issuer_edge_lag_seconds "), "{served}");
}

/// Step: a rotation that waits: key 2 signs only once every edge holds it, and no call is
/// refused meanwhile.
async fn step_a_rotation_waits_for_every_edge(s: Stack, edge: &Edges) -> Stack {
    let old = client_token(&s).await;
    let done = Arc::new(AtomicBool::new(false));
    let s = Arc::new(s);
    let load = tokio::spawn({
        let (s, done) = (s.clone(), done.clone());
        async move { traffic(&s, done, 2).await }
    });
    let rotate = ["keys", "rotate", "--when-edges-ready", "--timeout", "30"];
    let out = tokio::task::spawn_blocking({
        let s = s.clone();
        move || s.admin(&rotate, None)
    })
    .await
    .unwrap()
    .unwrap();
    done.store(true, Ordering::SeqCst);
    let (calls, kids) = tokio::time::timeout(wait::LONG, load)
        .await
        .expect("no token of key 2 passed")
        .unwrap();
    assert!(out.contains("key 2 now signs"), "{out}");
    let waited_for = out.matches(edge.node.as_str()).count();
    assert_eq!(waited_for, edge.pollers, "the edges it waited for: {out}");
    assert!(
        kids.contains(&1) && kids.contains(&2),
        "{calls} calls, keys {kids:?}"
    );
    token_signed_with(&s, 2).await;
    assert_eq!(call(&s, &old).await.0, 200, "the old key still verifies");
    // The reports of both issuers settle within a write of each (every 2 s).
    edges_until(&s, edge.pollers, wait::LONG, |e| {
        e["holds_newest_key"] == true
    })
    .await;
    eprintln!(
        "rotation waited for {} edges; {calls} calls meanwhile, none refused",
        edge.pollers
    );
    Arc::into_inner(s).unwrap()
}

/// Step: the edges cannot reach the issuer (stopped): the rotation times out, fails naming
/// them, and key 3 stays published and held; after the restart key 2 still signs. Run again
/// once the edges are back, it waits for them and switches.
async fn step_a_rotation_without_its_edges_times_out(s: &mut Stack, edge: &Edges) {
    let issuers = 1 + s.more_issuers.len();
    for i in 0..issuers {
        s.stop_issuer(i).unwrap();
    }
    let err = s
        .admin(
            &["keys", "rotate", "--when-edges-ready", "--timeout", "4"],
            None,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("timed out after 4 s") && err.contains("key 3"),
        "{err}"
    );
    let named = err.matches(edge.node.as_str()).count();
    assert_eq!(named, edge.pollers, "names every edge: {err}");
    for i in 0..issuers {
        s.start_issuer_again(i).unwrap();
    }
    let keys = s.admin(&["keys", "list"], None).unwrap();
    assert!(
        keys.lines()
            .any(|l| l.starts_with("3 ") && l.contains("held")),
        "{keys}"
    );
    assert_eq!(kid(&client_token(s).await), 2, "the old key keeps signing");
    let out = s
        .admin(
            &["keys", "rotate", "--when-edges-ready", "--timeout", "30"],
            None,
        )
        .unwrap();
    assert!(out.contains("key 3 now signs"), "{out}");
    let t = token_signed_with(s, 3).await;
    assert_eq!(call(s, &t).await.0, 200);
}

/// Step: a stopped Envoy: its edges still count right after the stop, and leave the list once
/// unseen for `--edge-forget-after`.
async fn step_a_stopped_envoy_leaves_the_list(s: &mut Stack) {
    assert!(s.stop_envoy());
    let left = s.admin(&["keys", "status"], None);
    let started = Instant::now();
    let forgotten = Duration::from_secs(FORGET_AFTER) + wait::LONG;
    edges_until(s, 0, forgotten, |_| true).await;
    eprintln!(
        "a stopped Envoy left the list after {:?}",
        started.elapsed()
    );
    assert!(
        left.is_ok(),
        "its edges still count right after the stop: {left:?}"
    );
    metrics_with(s, "issuer_edges 0").await;
}

/// After two restarts of one Envoy, `issuer edges` and the gauges count its new VMs only: each
/// replaced the VM of the same number before it, at once, instead of lagging until forgotten.
#[tokio::test]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_restarted_envoy_replaces_its_vms_at_once() {
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        edge_sync: true,
        ..Options::default()
    };
    let mut s = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    wait_for_sync(&s).await;
    let pollers = s.edge_pollers() as usize;
    let vm = |e: &Value| e["vm"].as_str().unwrap().to_owned();
    let mut before: std::collections::BTreeSet<String> =
        edges_until(&s, pollers, wait::LONG, |_| true)
            .await
            .iter()
            .map(vm)
            .collect();
    for restart in 0..2 {
        s.restart_envoy().unwrap();
        let now = edges_until(&s, pollers, wait::LONG, |e| {
            !before.contains(&vm(e)) && e["behind"] == 0
        })
        .await;
        assert_eq!(now.len(), pollers, "restart {restart}: {now:#?}");
        before.extend(now.iter().map(vm));
    }
    metrics_with(&s, &format!("issuer_edges {pollers}")).await;
    assert!(s.stop());
}
