//! Envoy hot restarted onto a new filter configuration as `docs/deploy-envoy.md` says ("A hot
//! restart"): the new file validated, the next epoch started on the same base id. Requests keep
//! flowing on their own connections throughout, the old process drains and exits by itself, and
//! the new one verifies tokens of the key the new configuration brought.

use crate::edge::client_token;
use e2e::{wait, Options, Stack, Tools};
use shared::token;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The status of a protected call with this token through Envoy at `url` (0: no answer).
async fn find(http: &reqwest::Client, url: &str, token: &str) -> u16 {
    http.post(format!("{url}/apiv2/MediaService/Find"))
        .bearer_auth(token)
        .header("content-type", "application/json; charset=UTF-8")
        .body("{}")
        .send()
        .await
        .map_or(0, |r| r.status().as_u16())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn a_hot_restart_takes_new_keys_without_refusing_a_request() {
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        hot_restart: true,
        ..Options::default()
    };
    let mut s = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    let old = client_token(&s).await;
    // Two clients call with the old token all along: one keeps its connection, one opens a new
    // connection for each call. Every call must pass, whichever process answers it.
    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicUsize::new(0));
    let load = |fresh: bool| {
        let builder = s.client_builder();
        let builder = if fresh {
            builder.pool_max_idle_per_host(0)
        } else {
            builder
        };
        let (http, url, token, stop) =
            (builder.build().unwrap(), s.url(), old.clone(), stop.clone());
        let made = made.clone();
        tokio::spawn(async move {
            let mut statuses = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                statuses.push(find(&http, &url, &token).await);
                made.fetch_add(1, Ordering::Relaxed);
                // The load's pace (a call every 20 ms per client), not a wait for anything.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            statuses
        })
    };
    let loads = [load(false), load(true)];
    let calls_grow = async |by: usize| {
        let from = made.load(Ordering::Relaxed);
        let grown = wait::until(wait::LONG, async || {
            made.load(Ordering::Relaxed) >= from + by
        });
        assert!(grown.await, "the load stalled");
    };
    calls_grow(20).await;
    let rotated = s.admin(&["keys", "rotate", "--delay", "3"], None).unwrap();
    assert!(rotated.contains("key 2 is published"), "{rotated}");
    let mut previous = s.hot_restart_envoy().unwrap();
    // The old process drains for 2 s and is told to exit after 4 s.
    let status = wait::until_some(wait::LONG, async || previous.exited());
    let status = status.await.expect("the old Envoy did not exit");
    assert!(status.success(), "the old Envoy exited with {status}");
    // Key 2 signs 3 s after the rotation; the new process verifies its tokens.
    let http = s.client();
    let new = wait::until_some(wait::LONG, async || {
        Some(client_token(&s).await).filter(|t| token::inspect(t).unwrap().kid == 2)
    });
    let new = new.await.expect("key 2 never started signing");
    assert_eq!(find(&http, &s.url(), &new).await, 200, "{}", s.logs());
    calls_grow(20).await;
    stop.store(true, Ordering::Relaxed);
    for load in loads {
        let statuses = load.await.unwrap();
        assert!(statuses.len() >= 10, "only {} calls", statuses.len());
        let refused: Vec<_> = statuses.iter().filter(|s| **s != 200).collect();
        assert!(refused.is_empty(), "refused or failed: {refused:?}");
    }
    assert_eq!(
        find(&http, &s.url(), &old).await,
        200,
        "the old key still verifies"
    );
    assert!(s.stop());
}
