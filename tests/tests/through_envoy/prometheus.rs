//! The shipped Prometheus rules (`dist-assets/prometheus/`) loaded by a real Prometheus (Debian's,
//! `MMS_PROMETHEUS`) scraping the issuer of a demo stack (Envoy with edge sync in front) every
//! second: the target is up, every rule group is loaded and evaluates with health `ok` against
//! what the issuer serves, and the issuer's `issuer_build_info`, `issuer_ready`, edge and process
//! metrics are ingested, with no alert firing. The rules' own logic is
//! tested by `promtool test rules` (`cargo xtask test`).

use crate::edge::wait_for_sync;
use e2e::prometheus::{self, Prometheus};
use e2e::{demo, Options, Stack, Tools};
use serde_json::Value;
use std::time::Duration;

/// How long Prometheus gets to scrape and evaluate (1 s intervals).
const LIMIT: Duration = Duration::from_secs(60);

/// The first sample of an instant query's result: its labels and value.
async fn first_sample(p: &Prometheus, query: &str) -> (Value, String) {
    let data = p
        .wait_for(&format!("query?query={query}"), LIMIT, |d| {
            d["result"].as_array().is_some_and(|r| !r.is_empty())
        })
        .await
        .unwrap();
    let sample = &data["result"][0];
    let value = sample["value"][1].as_str().unwrap_or_default().to_owned();
    (sample["metric"].clone(), value)
}

/// Waits until `p` has scraped `target` (job `issuer`, health `up`) and evaluated every rule of
/// both shipped groups with health `ok`.
async fn target_up_and_rules_ok(p: &Prometheus, target: &str) {
    p.wait_for("targets", LIMIT, |d| {
        d["activeTargets"].as_array().is_some_and(|ts| {
            ts.iter().any(|t| {
                t["labels"]["instance"] == target
                    && t["labels"]["job"] == "issuer"
                    && t["health"] == "up"
            })
        })
    })
    .await
    .unwrap();
    let rules = p
        .wait_for("rules", LIMIT, |d| {
            let groups = d["groups"].as_array().cloned().unwrap_or_default();
            groups.len() >= 2
                && groups.iter().all(|g| {
                    g["rules"]
                        .as_array()
                        .is_some_and(|rs| !rs.is_empty() && rs.iter().all(|r| r["health"] == "ok"))
                })
        })
        .await
        .unwrap();
    let names: Vec<&str> = rules["groups"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|g| g["name"].as_str())
        .collect();
    assert!(
        names.contains(&"issuer.alerts") && names.contains(&"issuer.recording"),
        "{names:?}"
    );
}

#[tokio::test]
#[ignore = "needs Envoy and Prometheus: `cargo xtask test` runs it"]
async fn prometheus_scrapes_the_demo_stack_with_the_shipped_rules() {
    let tools = Tools::for_test();
    let binary = prometheus::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        edge_sync: true,
        ..Options::default()
    };
    let s = Stack::start(&tmp.path().join("stack"), &tools, &opts)
        .await
        .unwrap();
    wait_for_sync(&s).await;
    // Some traffic for the recording rules, through Envoy.
    let sign_in = [
        ("grant_type", "password"),
        ("username", demo::USER),
        ("password", demo::PASSWORD),
    ];
    let token_url = format!("{}/apiv2/oauth/token", s.url());
    e2e::issuer::token(&s.client(), &token_url, &s.secret, &sign_in).await;
    let port = s.ports.issuer;

    let target = format!("127.0.0.1:{port}");
    let p = Prometheus::start(
        &binary,
        &tmp.path().join("prometheus"),
        std::slice::from_ref(&target),
    )
    .await
    .unwrap();
    target_up_and_rules_ok(&p, &target).await;
    let (labels, value) = first_sample(&p, "issuer_build_info").await;
    assert_eq!(value, "1", "{labels}");
    for label in ["version", "revision", "rustc"] {
        assert!(
            labels[label].as_str().is_some_and(|v| !v.is_empty()),
            "{label}: {labels}"
        );
    }
    assert_eq!(first_sample(&p, "issuer_ready").await.1, "1");
    let (_, edges) = first_sample(&p, "issuer_edges > 0").await;
    assert!(edges.parse::<f64>().unwrap() >= 1.0, "{edges}");
    let (_, rss) = first_sample(&p, "process_resident_memory_bytes").await;
    assert!(rss.parse::<f64>().unwrap() > 1e6, "{rss}");
    let (_, rate) = first_sample(&p, "issuer:oauth_requests:rate5m").await;
    assert!(rate.parse::<f64>().is_ok(), "{rate}");
    // No alert fires on a healthy issuer.
    let alerts = p.api("alerts").await.unwrap();
    let firing: Vec<&Value> = alerts["alerts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["state"] == "firing")
        .collect();
    assert!(firing.is_empty(), "{firing:?}");
    // Prometheus is stopped by its pid when `p` drops, and its folder goes with `tmp`.
    drop(p);
    assert!(s.stop());
}
