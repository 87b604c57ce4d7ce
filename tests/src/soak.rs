//! A bounded soak: mixed load through Envoy for some minutes, every answer checked, the memory of
//! the issuer and Envoy sampled. Run with `cargo xtask soak [--minutes N]`; results in docs/soak.md.

use crate::{demo, Stack};
use anyhow::Result;
use serde_json::Value;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Extra `issuer serve` arguments of the soak: refresh tokens expire after a minute idle and five
/// minutes in all, so the sweep removes records as fast as the load adds them and memory can reach
/// a steady state within minutes. With the default lifetimes (14 and 90 days) that takes weeks.
pub const ISSUER_ARGS: [&str; 4] = ["--refresh-idle-ttl", "60", "--refresh-absolute-ttl", "300"];

/// Counts of one soak.
#[derive(Default)]
pub struct Counts {
    sign_ins: AtomicU64,
    refreshes: AtomicU64,
    client_tokens: AtomicU64,
    calls: AtomicU64,
    errors: AtomicU64,
    /// What the first errors were (status and body, or the transport error).
    first_errors: std::sync::Mutex<Vec<String>>,
}

impl Counts {
    fn error(&self, what: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_errors.lock().unwrap_or_else(|p| p.into_inner());
        if first.len() < 20 {
            first.push(what);
        }
    }
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

async fn worker(s: Arc<StackRef>, counts: Arc<Counts>, stop: Arc<AtomicBool>) {
    let http = s.client.clone();
    let token_url = format!("{}/apiv2/oauth/token", s.url);
    let find = format!("{}/apiv2/MediaService/Find", s.url);
    let mut refresh: Option<String> = None;
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let form: Vec<(&str, String)> = match (&refresh, i % 50) {
            (None, _) | (_, 0) => vec![
                ("grant_type", "password".into()),
                ("username", demo::USER.into()),
                ("password", demo::PASSWORD.into()),
            ],
            (Some(rt), n) if n % 2 == 0 => vec![
                ("grant_type", "refresh_token".into()),
                ("refresh_token", rt.clone()),
            ],
            _ => vec![("grant_type", "client_credentials".into())],
        };
        let grant = form[0].1.clone();
        let answer = http
            .post(&token_url)
            .basic_auth(demo::CLIENT, Some(&s.secret))
            .form(&form)
            .send()
            .await;
        let answer = match answer {
            Ok(a) => a,
            Err(e) => {
                counts.error(format!("{grant}: {e:?}"));
                continue;
            }
        };
        let status = answer.status();
        let body: Value = answer.json().await.unwrap_or(Value::Null);
        let Some(access) = body["access_token"].as_str().filter(|_| status == 200) else {
            counts.error(format!("{grant}: {status} {body}"));
            continue;
        };
        match grant.as_str() {
            "password" => counts.sign_ins.fetch_add(1, Ordering::Relaxed),
            "refresh_token" => counts.refreshes.fetch_add(1, Ordering::Relaxed),
            _ => counts.client_tokens.fetch_add(1, Ordering::Relaxed),
        };
        if let Some(rt) = body["refresh_token"].as_str() {
            refresh = Some(rt.to_owned());
        }
        for _ in 0..3 {
            let r = http.post(&find).bearer_auth(access).body("{}").send().await;
            match r {
                Ok(r) if r.status() == 200 => {
                    counts.calls.fetch_add(1, Ordering::Relaxed);
                }
                Ok(r) => {
                    let status = r.status();
                    counts.error(format!(
                        "call: {status} {}",
                        r.text().await.unwrap_or_default()
                    ));
                }
                Err(e) => counts.error(format!("call: {e:?}")),
            }
        }
    }
}

struct StackRef {
    client: reqwest::Client,
    url: String,
    secret: String,
}

/// Runs the soak for `minutes` with `workers` concurrent clients.
pub async fn soak(stack: &Stack, minutes: u64, workers: usize) -> Result<Report> {
    let s = Arc::new(StackRef {
        client: stack.client(),
        url: stack.url(),
        secret: stack.secret.clone(),
    });
    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..workers)
        .map(|_| tokio::spawn(worker(s.clone(), counts.clone(), stop.clone())))
        .collect();
    let (issuer, envoy) = stack.pids();
    let start = Instant::now();
    let mut samples = Vec::new();
    while start.elapsed() < Duration::from_secs(minutes * 60) {
        tokio::time::sleep(Duration::from_secs(30)).await;
        let total = counts.sign_ins.load(Ordering::Relaxed)
            + counts.refreshes.load(Ordering::Relaxed)
            + counts.client_tokens.load(Ordering::Relaxed)
            + counts.calls.load(Ordering::Relaxed);
        let sample = (
            start.elapsed().as_secs(),
            rss_kib(issuer),
            rss_kib(envoy),
            total,
            counts.errors.load(Ordering::Relaxed),
        );
        let (t, i, e, n, err) = sample;
        eprintln!("soak {t:>4} s: issuer {i} KiB, envoy {e} KiB, {n} requests, {err} errors");
        samples.push(sample);
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    let mut r = String::new();
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let _ = writeln!(r, "{} minutes, {workers} concurrent clients through Envoy (TLS, HTTP/2): {} sign-ins, {} refresh rotations, {} client tokens, {} protected calls; **{} errors**.\n",
        minutes, c(&counts.sign_ins), c(&counts.refreshes), c(&counts.client_tokens), c(&counts.calls), c(&counts.errors));
    let _ = writeln!(r, "| time s | issuer RSS KiB | Envoy RSS KiB | requests so far | errors |\n|---|---|---|---|---|");
    for (t, i, e, n, err) in &samples {
        let _ = writeln!(r, "| {t} | {i} | {e} | {n} | {err} |");
    }
    let first = counts
        .first_errors
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    if !first.is_empty() {
        let _ = writeln!(r, "\nThe first errors (of {}):\n", c(&counts.errors));
        for e in &first {
            let _ = writeln!(r, "- `{}`", e.replace('`', "'"));
        }
    }
    Ok(Report {
        markdown: r,
        errors: c(&counts.errors),
    })
}

/// The result of a soak.
pub struct Report {
    /// Counts, the memory samples and the first errors, in Markdown.
    pub markdown: String,
    /// How many requests failed.
    pub errors: u64,
}
