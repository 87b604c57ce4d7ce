//! Edge sync (its bounds): the memory of a filter VM holding no revocation and 100,000,
//! the size of a steady-state poll answer and how many of them one issuer answers, the first full
//! sync, and the time from a revocation's answer to its refusal at both workers of an Envoy. The
//! throughput with 100,000 revocations in force is a variant of the traffic runs
//! (`traffic.rs`), beside the same filter with static keys.

use super::envoy::{
    config, http_status, issuer_cluster, our_token, start_envoy, until_accepted, wasm_filter,
    BENCH_DPOP, TOKEN_LIFETIME,
};
use super::{wrk, Sample, Settings};
use crate::util::{root, run};
use anyhow::{bail, Context, Result};
use base64::Engine as _;
use e2e::issuer::{add_client, issuer_admin_on, start_issuer_on, StoreArgs};
use e2e::unix_now;
use e2e::Tools;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Revocations in force at the full issuer.
pub(super) const REVOCATIONS: u64 = 100_000;
/// Revocation-to-refusal samples.
const PROPAGATION_SAMPLES: usize = 5;
/// The bounds of edge sync: our filter's throughput with [`REVOCATIONS`] in force over its
/// throughput with static keys and none, at least this…
const BOUND_THROUGHPUT: f64 = 0.95;
/// …a poll answer with nothing new under this many bytes…
const BOUND_IDLE_POLL_BYTES: u64 = 200;
/// …and a revocation refused at an Envoy within this many seconds of its answer.
const BOUND_PROPAGATION_SECONDS: u64 = 2;

/// What the edge runs measured.
pub(super) struct EdgeResults {
    /// Linear memory of the filter VM with no revocation and with [`REVOCATIONS`], bytes.
    pub(super) vm_bytes: (u64, u64),
    /// Bytes of a poll answer with nothing new, with [`REVOCATIONS`] in force.
    pub(super) idle_poll_bytes: usize,
    /// Idle polls per second one issuer answers (what the polling of every VM costs it).
    pub(super) idle_polls: Sample,
    /// From Envoy's start to the first token accepted with the full state (10 pages).
    pub(super) first_sync: Duration,
    /// From the revoke endpoint's answer to 8 refusals in a row on fresh connections.
    pub(super) propagation: Vec<Duration>,
    pub(super) command: String,
}

/// An issuer for edge sync: its URL, the edge client's secret and its signing key.
pub(super) struct EdgeIssuer {
    _proc: e2e::Proc,
    pub(super) url: String,
    pub(super) edge_secret: String,
    pub(super) key: shared::Key,
}

/// Starts an issuer in `dir/name` with `revocations` token revocations in force and the edge
/// client `envoy-edge`.
pub(super) fn edge_issuer(
    tools: &Tools,
    dir: &Path,
    name: &str,
    revocations: u64,
) -> Result<EdgeIssuer> {
    let data = dir.join(name);
    let store = StoreArgs::redb(&data);
    let edge_secret = add_client(tools, &store, "envoy-edge", &["--edge"])?;
    if revocations > 0 {
        run(
            Command::new(root().join("target/release/examples/fill_revocations"))
                .arg(&data)
                .arg(revocations.to_string()),
        )?;
    }
    let cfg: Value = serde_json::from_str(&issuer_admin_on(
        tools,
        &store,
        &[
            "keys",
            "filter-config",
            "--public-origin",
            "https://localhost",
        ],
        None,
    )?)?;
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(cfg["keys"][0]["secret"].as_str().context("no key")?)?;
    let key = shared::Key::from_slice(1, &secret).context("a 32-byte key")?;
    let log = dir.join(format!("{name}.log"));
    let (proc, url) = start_issuer_on(tools, &store, e2e::free_port(), &[], &log)?;
    Ok(EdgeIssuer {
        _proc: proc,
        url,
        edge_secret,
        key,
    })
}

/// Our filter's configuration pulling from the issuer `cluster` as the edge client.
pub(super) fn sync_config(cluster: &str, secret: &str) -> String {
    format!(
        r#"{{"edge_sync":{{"cluster":"{cluster}","client_id":"envoy-edge","client_secret":"{secret}"}},{BENCH_DPOP}}}"#
    )
}

/// A listener whose filter pulls from the issuer `cluster` as the edge client.
fn listener(name: &str, port: u16, module: &Path, cluster: &str, secret: &str) -> String {
    let filter = wasm_filter(name, module, &sync_config(cluster, secret));
    super::envoy::listener(name, port, &filter)
}

fn curl_json(args: &[&str]) -> Result<(Value, usize)> {
    let out = Command::new("curl").arg("-s").args(args).output()?;
    Ok((serde_json::from_slice(&out.stdout)?, out.stdout.len()))
}

/// Reads the whole feed as an edge would (page after page), then polls once more: the size of
/// that answer, with nothing new, and its URL.
fn idle_poll(issuer: &EdgeIssuer) -> Result<(usize, String)> {
    let auth = format!("envoy-edge:{}", issuer.edge_secret);
    let mut query = String::new();
    let mut pages = 0;
    loop {
        let url = format!("{}/apiv2/oauth/edge{query}", issuer.url);
        let (page, len) = curl_json(&["-u", &auth, &url])?;
        let cursor = page["cursor"].as_u64().context("no cursor")?;
        let version = page["keys_version"].as_str().context("no version")?;
        if pages > 0 && page["revoked"].as_array().is_some_and(Vec::is_empty) {
            return Ok((len, url));
        }
        pages += 1;
        if pages > 100 {
            bail!("the feed never ran out of revocations");
        }
        query = format!("?since={cursor}&keys={version}");
    }
}

/// A client_credentials token from `issuer` for the client `bench` (id:secret in `basic`).
fn client_token(issuer: &EdgeIssuer, basic: &str) -> Result<String> {
    let url = format!("{}/apiv2/oauth/token", issuer.url);
    let (t, _) = curl_json(&["-u", basic, "-d", "grant_type=client_credentials", &url])?;
    Ok(t["access_token"].as_str().context("no token")?.to_owned())
}

/// Revokes tokens at `issuer` and times their refusal through Envoy at `url`.
fn propagation(issuer: &EdgeIssuer, basic: &str, url: &str) -> Result<Vec<Duration>> {
    let mut took = Vec::new();
    for _ in 0..PROPAGATION_SAMPLES {
        let token = client_token(issuer, basic)?;
        let header = format!("Authorization: Bearer {token}");
        until_accepted(url, &header)?;
        let revoke = format!("{}/apiv2/oauth/revoke", issuer.url);
        let status = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}", "-u", basic])
            .args(["-d", &format!("token={token}"), &revoke])
            .output()?;
        if status.stdout != b"200" {
            bail!("the revoke endpoint did not answer 200");
        }
        let start = Instant::now();
        let mut refused_in_a_row = 0;
        let mut first_refusal = None;
        while refused_in_a_row < 8 {
            if http_status(url, &[&header])? == 401 {
                first_refusal.get_or_insert(start.elapsed());
                refused_in_a_row += 1;
            } else {
                first_refusal = None;
                refused_in_a_row = 0;
                std::thread::sleep(Duration::from_millis(10));
            }
            if start.elapsed() > Duration::from_secs(30) {
                bail!("a revoked token still passed 30 s after its revocation");
            }
        }
        took.extend(first_refusal);
    }
    Ok(took)
}

/// The filter VM memory gauges (`ROOT_ID.vm_memory_bytes`) from Envoy's admin port.
fn vm_memory(admin: u16, root_id: &str) -> Result<u64> {
    let url = format!("http://127.0.0.1:{admin}/stats?filter={root_id}.vm_memory_bytes");
    let out = Command::new("curl").args(["-s", &url]).output()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.split_once(": ")?.1.trim().parse().ok())
        .with_context(|| format!("no memory gauge for {root_id}"))
}

pub(super) fn bench_edge(dir: &Path, tools: &Tools, s: &Settings) -> Result<EdgeResults> {
    let ours = &tools.wasm;
    let empty = edge_issuer(tools, dir, "issuer-empty", 0)?;
    let full = edge_issuer(tools, dir, "issuer-full", REVOCATIONS)?;
    let basic = super::provision(tools, &StoreArgs::redb(&dir.join("issuer-full")))?;
    let (p_empty, p_full, admin) = (e2e::free_port(), e2e::free_port(), e2e::free_port());
    let listeners = listener(
        "edge_empty",
        p_empty,
        ours,
        "issuer_empty",
        &empty.edge_secret,
    ) + &listener("edge_full", p_full, ours, "issuer_full", &full.edge_secret);
    let full_cluster = issuer_cluster("issuer_full", &full.url)?;
    let clusters = issuer_cluster("issuer_empty", &empty.url)? + &full_cluster;
    let cfg = dir.join("envoy-edge.yaml");
    std::fs::write(&cfg, config(Some(admin), &listeners, &clusters))?;
    let url = |port: u16| format!("http://127.0.0.1:{port}/apiv2/MediaService/Find");
    let exp = unix_now() + TOKEN_LIFETIME;
    let headers = [
        format!("Authorization: Bearer {}", our_token(&empty.key, 0, exp)),
        format!("Authorization: Bearer {}", our_token(&full.key, 0, exp)),
    ];
    let started = Instant::now();
    let log = dir.join("envoy-edge.log");
    let envoy_proc = start_envoy(tools, &cfg, p_full, 1, Some("0"), &log)?;
    until_accepted(&url(p_full), &headers[1])?;
    let first_sync = started.elapsed();
    until_accepted(&url(p_empty), &headers[0])?;
    if http_status(&url(p_full), &[])? != 401 {
        bail!("the edge-synced filter does not refuse a request without a token");
    }
    // The gauges are brought up to date by each VM's one-second tick.
    std::thread::sleep(Duration::from_secs(3));
    let vm_bytes = (
        vm_memory(admin, "edge_empty")?,
        vm_memory(admin, "edge_full")?,
    );
    drop(envoy_proc);
    let (idle_poll_bytes, idle_url) = idle_poll(&full)?;
    let basic_edge = base64::engine::general_purpose::STANDARD
        .encode(format!("envoy-edge:{}", full.edge_secret));
    let args = ["-t1", "-c8", &format!("-d{}s", s.seconds), "-H"]
        .map(String::from)
        .into_iter()
        .chain([format!("Authorization: Basic {basic_edge}")])
        .collect::<Vec<_>>();
    let idle_polls = wrk(&args, &idle_url)?;
    if idle_polls.bad > 0 {
        bail!("{} idle polls were not answered 200", idle_polls.bad);
    }

    // Propagation through an Envoy with two workers, each polling on its own.
    let p_two = e2e::free_port();
    let listeners = listener("edge_full", p_two, ours, "issuer_full", &full.edge_secret);
    let cfg2 = dir.join("envoy-edge-2.yaml");
    std::fs::write(&cfg2, config(None, &listeners, &full_cluster))?;
    let log2 = dir.join("envoy-edge-2.log");
    let two = start_envoy(tools, &cfg2, p_two, 2, None, &log2)?;
    until_accepted(&url(p_two), &headers[1])?;
    let propagation = propagation(&full, &basic, &url(p_two))?;
    drop(two);
    Ok(EdgeResults {
        vm_bytes,
        idle_poll_bytes,
        idle_polls,
        first_sync,
        propagation,
        command: format!(
            "taskset -c 0 envoy --concurrency 1 -c target/bench-edge/envoy-edge.yaml (two listeners, our filter with edge sync from an issuer with 0 and with {REVOCATIONS} revocations in force), its stats; idle polls: taskset -c 1 wrk --latency -t1 -c8 -d{}s; propagation: envoy --concurrency 2 -c target/bench-edge/envoy-edge-2.yaml, curl",
            s.seconds
        ),
    })
}

/// The edge section of the report; `throughput` is the traffic runs' ratio of ours with
/// [`REVOCATIONS`] in force over ours with none, on the pool workload.
pub(super) fn report(e: &EdgeResults, throughput: Option<f64>) -> Result<String> {
    use std::fmt::Write as _;
    let mut r = String::new();
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let mut prop: Vec<f64> = e.propagation.iter().map(ms).collect();
    prop.sort_by(|a, b| a.total_cmp(b));
    let throughput = throughput.map_or("in the traffic section".into(), |x| {
        format!("{x:.3} (the pool workload of the traffic runs)")
    });
    let revocations = crate::util::thousands(REVOCATIONS);
    writeln!(r, "Command: `{}`.\n", e.command)?;
    writeln!(
        r,
        "| bound | target | measured |\n|---|---|---|\n| throughput with {revocations} revocations (edge sync) / our filter with static keys and none | ≥ {BOUND_THROUGHPUT} | {throughput} |\n| memory of a filter VM (its linear memory), none / {revocations} revocations | stated | {:.1} MiB / {:.1} MiB |\n| steady-state poll answer with {revocations} in force | < {BOUND_IDLE_POLL_BYTES} bytes | {} bytes |\n| idle polls one issuer answers (wrk, 8 connections; an Envoy polls once a second per worker, plus its main thread) | stated | {:.0}/s, p99 {:.2} ms |\n| revocation answered → refused 8 times in a row at an Envoy with two workers ({} samples) | ≤ {BOUND_PROPAGATION_SECONDS} s | median {:.0} ms, max {:.0} ms |\n| from Envoy's start to a token accepted with {revocations} revocations synced (10 pages) | stated | {:.0} ms |",
        e.vm_bytes.0 as f64 / 1048576.0,
        e.vm_bytes.1 as f64 / 1048576.0,
        e.idle_poll_bytes,
        e.idle_polls.rps,
        e.idle_polls.p99_ms,
        prop.len(),
        prop.get(prop.len() / 2).copied().unwrap_or(f64::NAN),
        prop.last().copied().unwrap_or(f64::NAN),
        ms(&e.first_sync),
    )?;
    Ok(r)
}
