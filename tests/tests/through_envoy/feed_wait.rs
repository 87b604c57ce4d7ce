//! Edge sync that waits for news: the filters keep a poll held by the issuer, which answers as
//! soon as a revocation is recorded, through itself or (woken by PostgreSQL's `NOTIFY`) through
//! another issuer; its bound of waiting polls; an issuer stopped and started under waiting edges;
//! and a lost `LISTEN` connection. The filters here poll only once a minute where it matters, and
//! the issuers' counters show that a held poll brought the news.

use crate::edge::{client_token, feed_direct, refused_everywhere, revoke_at, wait_for_sync};
use e2e::{demo, Options, Stack, Tools};
use std::time::Duration;

/// A stack with edge sync, its issuers run with `args`; on PostgreSQL (two issuers) or redb.
async fn stack(postgres: bool, args: &[&str]) -> (tempfile::TempDir, Stack) {
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        edge_sync: true,
        postgres,
        issuer_args: args.iter().map(|a| a.to_string()).collect(),
        ..Options::default()
    };
    let s = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    wait_for_sync(&s).await;
    (tmp, s)
}

/// The Envoy configuration `yaml` with the filter polling once a minute and, if `feed_port` is
/// given, its feed cluster sending every poll to the issuer on that port.
fn slow_polls(yaml: String, first_issuer: u16, feed_port: Option<u16>) -> anyhow::Result<String> {
    let cluster = r#""cluster": "issuer_feed","#;
    anyhow::ensure!(yaml.contains(cluster), "no edge_sync block");
    let mut yaml = yaml.replace(
        cluster,
        &format!(r#"{cluster} "poll_interval_seconds": 60,"#),
    );
    if let Some(port) = feed_port {
        let at = yaml
            .find("cluster_name: issuer_feed")
            .ok_or_else(|| anyhow::anyhow!("no issuer_feed cluster"))?;
        let (head, tail) = yaml.split_at(at);
        let end = tail.find("\n  - name:").unwrap_or(tail.len());
        let feed = tail[..end].replace(
            &format!("port_value: {first_issuer} "),
            &format!("port_value: {port} "),
        );
        yaml = format!("{head}{feed}{}", &tail[end..]);
    }
    Ok(yaml)
}

/// The issuer's `/metrics` on `port`.
pub(crate) async fn metrics(port: u16) -> String {
    let url = format!("http://127.0.0.1:{port}/metrics");
    reqwest::get(&url).await.unwrap().text().await.unwrap()
}

/// The sum of the samples of `name` (with any labels, or the one that has `label`).
pub(crate) fn sample(text: &str, name: &str, label: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l.contains(label))
        .filter(|l| l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

/// How long the tests here wait for the issuers' metrics to show something: 30 s, since a wait
/// the edge gave up is held to its end.
const METRICS_WITHIN: Duration = Duration::from_secs(30);

/// Waits until `done` holds of the issuer's metrics on `port`, for `within` at most; the
/// metrics.
pub(crate) async fn metrics_until(
    port: u16,
    within: Duration,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let text = e2e::wait::until_some(within, async || {
        let text = metrics(port).await;
        done(&text).then_some(text)
    });
    match text.await {
        Some(text) => text,
        None => panic!("{what}:\n{}", metrics(port).await),
    }
}

/// The issuers' listening backends (by their `application_name`), by pid.
const LISTENERS: &str = "FROM pg_stat_activity WHERE application_name = 'mms-issuer feed listener'";

/// The backends `LISTEN`ing on the feed's channel, by pid.
fn listeners(s: &mut Stack) -> Vec<String> {
    let pg = s.postgres().unwrap();
    let out = pg
        .psql(&format!("SELECT pid {LISTENERS} ORDER BY pid"))
        .unwrap();
    out.split_whitespace().map(str::to_owned).collect()
}

/// A revocation through issuer A is refused at an Envoy whose polls all go to issuer B, which
/// heard of it by `NOTIFY`; then both issuers' `LISTEN` connections are terminated, the issuers
/// listen again on new ones, and the next revocation through A reaches the edge the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Envoy and PostgreSQL: `cargo xtask test` runs it"]
async fn a_revocation_through_one_issuer_reaches_an_envoy_waiting_on_the_other() {
    let (_tmp, mut s) = stack(true, &[]).await;
    let (a, b) = (s.ports.issuer, s.more_issuers[0]);
    s.restart_envoy_yaml_edited(|y| slow_polls(y, a, Some(b)))
        .unwrap();
    metrics_until(b, METRICS_WITHIN, "no edge waits on B", |m| {
        sample(m, "issuer_feed_waiting", "") >= 1
    })
    .await;
    assert_eq!(
        sample(&metrics(a).await, "issuer_feed_waiting", ""),
        0,
        "A feeds no edge"
    );
    for round in ["first", "after the LISTEN connections were cut"] {
        let before = metrics(b).await;
        let token = client_token(&s).await;
        assert_eq!(crate::edge::call(&s, &token).await.0, 200, "{round}");
        revoke_at(&s, &format!("http://127.0.0.1:{a}"), &token).await;
        refused_everywhere(&s, &token, &format!("revoked at A, {round}")).await;
        let after = metrics(b).await;
        let heard = |m: &str| sample(m, "issuer_feed_notifications_total", "");
        assert!(
            heard(&after) > heard(&before),
            "{round}: B heard no NOTIFY\n{after}"
        );
        let news = |m: &str| sample(m, "issuer_feed_waits_total", "result=\"news\"");
        assert!(
            news(&after) > news(&before),
            "{round}: no wait ended with news\n{after}"
        );
        assert_eq!(sample(&after, "issuer_feed_listening", ""), 1, "{round}");
        // Cut both issuers' LISTEN connections: each listens again on a new one.
        let cut = tokio::task::block_in_place(|| listeners(&mut s));
        assert_eq!(cut.len(), 2, "one LISTEN connection per issuer: {cut:?}");
        let pg = s.postgres().unwrap();
        let sql = format!("SELECT pg_terminate_backend(pid) {LISTENERS}");
        tokio::task::block_in_place(|| pg.psql(&sql)).unwrap();
        let again = e2e::wait::until(e2e::wait::LONG, async || {
            let now = tokio::task::block_in_place(|| listeners(&mut s));
            now.len() == 2 && now.iter().all(|p| !cut.contains(p))
        });
        assert!(again.await, "not listening again\n{}", s.logs());
    }
    assert!(s.stop());
}

/// With one waiting poll allowed, the other polls are answered at once with `"busy"` and the
/// filters poll them every second instead: a revocation still reaches every worker, and no more
/// polls than the bound ever wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn beyond_the_bound_of_waiting_polls_edges_are_answered_busy_and_still_sync() {
    let (_tmp, s) = stack(false, &["--feed-max-waiting", "1"]).await;
    let port = s.ports.issuer;
    // A poll of the test's own that asks to wait: with the filter's, more than the bound.
    let edge_secret = s.edge_secret.clone().unwrap();
    let feed = format!("http://127.0.0.1:{port}/apiv2/oauth/edge");
    let (status, first) = feed_direct(&s, (demo::EDGE_CLIENT, &edge_secret), &[]).await;
    assert_eq!(status, 200, "{first}");
    let first: serde_json::Value = serde_json::from_str(&first).unwrap();
    let query = format!(
        "?since={}&keys={}&wait=30",
        first["cursor"],
        first["keys_version"].as_str().unwrap()
    );
    let own = tokio::spawn(async move {
        let r = reqwest::Client::new()
            .get(format!("{feed}{query}"))
            .basic_auth(demo::EDGE_CLIENT, Some(&edge_secret))
            .send()
            .await
            .unwrap();
        r.json::<serde_json::Value>().await.unwrap()
    });
    let m = metrics_until(port, METRICS_WITHIN, "no busy answer", |m| {
        sample(m, "issuer_feed_waits_total", "result=\"busy\"") > 0
    })
    .await;
    assert_eq!(sample(&m, "issuer_feed_waiting", ""), 1, "{m}");
    let token = client_token(&s).await;
    crate::edge::revoke(&s, &token).await;
    // The waiting VM refuses at once, the busy ones after their next poll.
    refused_everywhere(&s, &token, "revoked beyond the bound").await;
    // The test's poll was answered: busy at once, or with the revocation as news.
    let own = own.await.unwrap();
    assert!(
        own["busy"] == true || !own["revoked"].as_array().unwrap().is_empty(),
        "{own}"
    );
    assert!(sample(&metrics(port).await, "issuer_feed_waiting", "") <= 1);
    assert!(s.stop());
}

/// An issuer stopped while edges wait on it answers them at once (the stop does not wait out
/// their waits) and, started again, holds their polls again; a revocation then reaches every
/// worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Envoy: `cargo xtask test` runs it"]
async fn an_issuer_restarted_under_waiting_edges_answers_them_and_holds_them_again() {
    let (_tmp, mut s) = stack(false, &[]).await;
    let port = s.ports.issuer;
    metrics_until(port, METRICS_WITHIN, "no edge waits", |m| {
        sample(m, "issuer_feed_waiting", "") >= 1
    })
    .await;
    s.stop_issuer(0).unwrap();
    s.start_issuer_again(0).unwrap();
    let logs = s.logs();
    assert!(
        !logs.contains("requests still in flight after the drain timeout"),
        "{logs}"
    );
    assert!(
        logs.contains("stopped"),
        "the issuer stopped gracefully:\n{logs}"
    );
    metrics_until(
        port,
        METRICS_WITHIN,
        "no edge waits after the restart",
        |m| sample(m, "issuer_feed_waiting", "") >= 1,
    )
    .await;
    let token = client_token(&s).await;
    crate::edge::revoke(&s, &token).await;
    refused_everywhere(&s, &token, "revoked after a restart").await;
    assert!(s.stop());
}
