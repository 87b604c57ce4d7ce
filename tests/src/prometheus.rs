//! A throwaway Prometheus (Debian's, `MMS_PROMETHEUS`, set by `cargo xtask test`) scraping
//! issuers on 127.0.0.1 every second with the shipped rules (`dist-assets/prometheus/`) loaded:
//! the e2e test that the rules load and evaluate against what a real issuer serves. Its config
//! and its TSDB are in the test's folder; the process is stopped by its pid when dropped.

use crate::{free_port, needed_for_test, private_log, root, Proc};
use anyhow::{bail, Context, Result};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Where the shipped rules are, relative to the repository.
pub const RULES_DIR: &str = "dist-assets/prometheus";

/// The Prometheus binary from the environment, or why not.
pub fn binary() -> Result<PathBuf> {
    crate::env_path("MMS_PROMETHEUS")
}

/// The Prometheus binary for a test: a missing one fails the test, saying so
/// ([`needed_for_test`]).
pub fn for_test() -> PathBuf {
    needed_for_test(binary())
}

/// The shipped rule files (`*.rules.yml`).
pub fn rule_files() -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join(RULES_DIR))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(".rules.yml")))
        .collect();
    files.sort();
    Ok(files)
}

/// The configuration: the job `issuer` scraping `targets` (`host:port`) every second, and the
/// rules evaluated every second.
pub fn config(targets: &[String], rules: &[PathBuf]) -> String {
    let quoted = |items: Vec<String>| items.join(", ");
    let targets = quoted(targets.iter().map(|t| format!("\"{t}\"")).collect());
    let rules = quoted(
        rules
            .iter()
            .map(|r| format!("\"{}\"", r.display()))
            .collect(),
    );
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files: [{rules}]\n\
         scrape_configs:\n  - job_name: issuer\n    static_configs:\n      - targets: [{targets}]\n"
    )
}

/// A running Prometheus.
pub struct Prometheus {
    /// Its HTTP API, `http://127.0.0.1:PORT`.
    pub url: String,
    _proc: Proc,
}

impl Prometheus {
    /// Starts `binary` in `dir` scraping `targets` with the shipped rules, and waits until its
    /// API answers (at most 30 s).
    pub async fn start(binary: &Path, dir: &Path, targets: &[String]) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, self::config(targets, &rule_files()?))?;
        let port = free_port();
        let child = Command::new(binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::from(private_log(&dir.join("prometheus.log"))?))
            .spawn()
            .context("starting prometheus")?;
        let me = Self {
            url: format!("http://127.0.0.1:{port}"),
            _proc: Proc::new(child, "prometheus"),
        };
        let ready = format!("{}/-/ready", me.url);
        let up = crate::wait::until(Duration::from_secs(30), async || {
            reqwest::get(&ready).await.is_ok_and(|r| r.status() == 200)
        });
        if !up.await {
            bail!(
                "prometheus not ready; see {}",
                dir.join("prometheus.log").display()
            );
        }
        Ok(me)
    }

    /// `GET /api/v1/PATH`: its `data`, once `status` is `success`.
    pub async fn api(&self, path: &str) -> Result<Value> {
        let body: Value = reqwest::get(format!("{}/api/v1/{path}", self.url))
            .await?
            .json()
            .await?;
        if body["status"] != "success" {
            bail!("{path}: {body}");
        }
        Ok(body["data"].clone())
    }

    /// Asks `check` of `GET /api/v1/PATH`'s data every 200 ms until it holds, at most `limit`;
    /// the last data otherwise.
    pub async fn wait_for(
        &self,
        path: &str,
        limit: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        let held = crate::wait::until_ok(limit, async || {
            Ok(Some(self.api(path).await?).filter(|data| check(data)))
        });
        match held.await? {
            Some(data) => Ok(data),
            None => bail!(
                "{path} did not come to hold within {limit:?}: {}",
                self.api(path).await?
            ),
        }
    }
}
