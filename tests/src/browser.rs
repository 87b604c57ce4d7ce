//! Headless Chromium for the tests whose pages wait on something `--dump-dom` does not wait for
//! (IndexedDB, answers through Envoy): the page POSTs its results as JSON to `/report` on the
//! server it came from ([`report_route`]), and [`run_page`] returns that body once it arrives,
//! then stops the browser by its pid. Virtual time (`--virtual-time-budget`) is not used: it
//! runs out while IndexedDB, which works outside the page's own task queues, is still busy.

use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::sync::mpsc;
use warp::Filter;

/// Reports the pages send, in the order they arrive.
pub type Reports = mpsc::UnboundedReceiver<String>;

/// `POST /report`: each body goes to the returned receiver.
pub fn report_route() -> (
    warp::filters::BoxedFilter<(warp::reply::Response,)>,
    Reports,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let route = warp::path("report")
        .and(warp::post())
        .and(warp::body::content_length_limit(1 << 20))
        .and(warp::body::json())
        .map(move |body: serde_json::Value| {
            let _ = tx.send(body.to_string());
            warp::reply::Response::new("ok".into())
        })
        .boxed();
    (route, rx)
}

/// Opens `url` in headless Chromium on the profile folder `profile` (the same folder again is
/// the same browser profile, IndexedDB included) and returns the page's report, or fails after
/// `limit`. Chromium's output goes to `log`; `extra` are more Chromium arguments.
pub async fn run_page(
    chromium: &Path,
    url: &str,
    profile: &Path,
    reports: &mut Reports,
    limit: Duration,
    log: &Path,
    extra: &[&str],
) -> Result<serde_json::Value> {
    let log_file = std::fs::File::create(log).with_context(|| format!("{}", log.display()))?;
    let mut child = tokio::process::Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(url)
        .stdout(Stdio::null())
        .stderr(log_file)
        .kill_on_drop(true)
        .spawn()
        .context("starting chromium")?;
    let report = tokio::time::timeout(limit, reports.recv()).await;
    // Chromium is stopped either way (by its own pid), before the profile is used again: asked
    // first (SIGTERM), so that it closes its profile as a user's browser would, then killed.
    if let Some(pid) = child.id().and_then(|p| i32::try_from(p).ok()) {
        // SAFETY: signals the child started above, which has not been waited for.
        unsafe { libc::kill(pid, libc::SIGTERM) };
    }
    if tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
        let _ = child.wait().await;
    }
    match report {
        Ok(Some(body)) => serde_json::from_str(&body).with_context(|| format!("report: {body}")),
        Ok(None) => bail!("the report route is gone"),
        Err(_) => bail!(
            "no report from {url} within {limit:?}; chromium's log: {}",
            log.display()
        ),
    }
}
