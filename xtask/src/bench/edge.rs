//! Edge sync under load (issue 11's bounds): our filter pulling keys and revocations from an issuer
//! with no revocation in force, beside the same filter pulling from one with 100,000, in one Envoy
//! (one worker on core 0, wrk on core 1, rounds interleaved); the memory of each filter VM; the
//! size of a steady-state poll answer; and the time from a revocation's answer to its refusal at
//! both workers of a second Envoy.

use super::envoy::{http_status, our_token, start_envoy, wait_for, wasm_filter};
use super::{wrk, Results, Sample, Settings};
use crate::root;
use anyhow::{bail, Context, Result};
use base64::Engine as _;
use e2e::issuer::{add_client, issuer_admin_on, start_issuer_on, StoreArgs};
use e2e::Tools;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Revocations in force at the full issuer.
pub(super) const REVOCATIONS: u64 = 100_000;
/// Revocation-to-refusal samples.
const PROPAGATION_SAMPLES: usize = 5;

/// What the edge runs measured.
pub(super) struct EdgeResults {
    /// Throughput beside each other: 0 and [`REVOCATIONS`] revocations in force.
    pub(super) runs: Results,
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

/// One issuer of the run: its data dir, URL and the edge client's secret.
struct EdgeIssuer {
    _proc: e2e::Proc,
    url: String,
    edge_secret: String,
    key: shared::Key,
}

fn edge_issuer(tools: &Tools, dir: &Path, name: &str, revocations: u64) -> Result<EdgeIssuer> {
    let data = dir.join(name);
    let store = StoreArgs::redb(&data);
    let edge_secret = add_client(tools, &store, "envoy-edge", &["--edge"])?;
    if revocations > 0 {
        crate::run(
            Command::new(root().join("target/release/examples/fill_revocations"))
                .arg(&data)
                .arg(revocations.to_string()),
        )?;
    }
    let cfg: Value = serde_json::from_str(&issuer_admin_on(
        tools,
        &store,
        &["keys", "filter-config"],
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

/// A listener whose filter pulls from the issuer `cluster` as the edge client.
fn listener(name: &str, port: u16, module: &Path, cluster: &str, secret: &str) -> String {
    let config = format!(
        r#"{{"edge_sync":{{"cluster":"{cluster}","client_id":"envoy-edge","client_secret":"{secret}"}}}}"#
    );
    super::envoy::listener(name, port, &wasm_filter(name, module, &config))
}

fn cluster(name: &str, url: &str) -> Result<String> {
    let port = url.rsplit(':').next().context("issuer URL")?;
    Ok(format!(
        r#"  - name: {name}
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: {name}
      endpoints:
      - lb_endpoints:
        - endpoint:
            address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
"#
    ))
}

/// Until a request with `header` is answered 200 (the filter synced); how long that took.
fn until_accepted(url: &str, header: &str) -> Result<Duration> {
    let start = Instant::now();
    while http_status(url, &[header])? != 200 {
        if start.elapsed() > Duration::from_secs(60) {
            bail!("{url} never accepted the token: the filter did not sync");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(start.elapsed())
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

pub(super) fn bench_edge(
    dir: &Path,
    envoy: &Path,
    ours: &Path,
    s: &Settings,
) -> Result<EdgeResults> {
    let tools = Tools {
        envoy: envoy.to_owned(),
        wasm: ours.to_owned(),
        issuer: root().join("target/release/issuer"),
    };
    let empty = edge_issuer(&tools, dir, "issuer-empty", 0)?;
    let full = edge_issuer(&tools, dir, "issuer-full", REVOCATIONS)?;
    let basic = super::provision(&tools, &StoreArgs::redb(&dir.join("issuer-full")))?;
    for i in [&empty, &full] {
        wait_for(&format!("{}/healthz", i.url))?;
    }
    let (p_empty, p_full, admin) = (e2e::free_port(), e2e::free_port(), e2e::free_port());
    let mut yaml = format!("admin:\n  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}\nstatic_resources:\n  listeners:\n");
    yaml += &listener(
        "edge_empty",
        p_empty,
        ours,
        "issuer_empty",
        &empty.edge_secret,
    );
    yaml += &listener("edge_full", p_full, ours, "issuer_full", &full.edge_secret);
    yaml += "  clusters:\n";
    yaml += &cluster("issuer_empty", &empty.url)?;
    yaml += &cluster("issuer_full", &full.url)?;
    let cfg = dir.join("envoy-edge.yaml");
    std::fs::write(&cfg, &yaml)?;
    let url = |port: u16| format!("http://127.0.0.1:{port}/apiv2/MediaService/Find");
    let headers = [
        format!("Authorization: Bearer {}", our_token(&empty.key)),
        format!("Authorization: Bearer {}", our_token(&full.key)),
    ];
    let started = Instant::now();
    let envoy_proc = start_envoy(envoy, &cfg, &dir.join("envoy-edge.log"), 1, Some("0"))?;
    until_accepted(&url(p_full), &headers[1])?;
    let first_sync = started.elapsed();
    until_accepted(&url(p_empty), &headers[0])?;
    if http_status(&url(p_full), &[])? != 401 {
        bail!("the edge-synced filter does not refuse a request without a token");
    }
    let ports = [p_empty, p_full];
    // Unmeasured, so that neither listener pays for warming V8 up in the first round.
    for (port, header) in ports.iter().zip(&headers) {
        let args = ["-t1", "-c32", "-d2s", "-H", header].map(String::from);
        wrk(&args, &url(*port))?;
    }
    let mut per: Vec<Vec<Sample>> = vec![Vec::new(), Vec::new()];
    for round in 0..s.rounds {
        for (i, port) in ports.iter().enumerate() {
            let args = vec![
                "-t1".to_string(),
                "-c32".to_string(),
                format!("-d{}s", s.seconds),
                "-H".to_string(),
                headers[i].clone(),
            ];
            let sample = wrk(&args, &url(*port))?;
            eprintln!(
                "edge round {} {}: {:.0} req/s, p99 {:.3} ms",
                round + 1,
                ["no revocations", "100,000 revocations"][i],
                sample.rps,
                sample.p99_ms
            );
            per[i].push(sample);
        }
    }
    let vm_bytes = (
        vm_memory(admin, "edge_empty")?,
        vm_memory(admin, "edge_full")?,
    );
    let runs = Results::new(&per, super::rss_kib(envoy_proc.0.id()));
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
    let mut yaml = String::from("static_resources:\n  listeners:\n");
    yaml += &listener("edge_full", p_two, ours, "issuer_full", &full.edge_secret);
    yaml += "  clusters:\n";
    yaml += &cluster("issuer_full", &full.url)?;
    let cfg2 = dir.join("envoy-edge-2.yaml");
    std::fs::write(&cfg2, &yaml)?;
    let two = start_envoy(envoy, &cfg2, &dir.join("envoy-edge-2.log"), 2, None)?;
    until_accepted(&url(p_two), &headers[1])?;
    let propagation = propagation(&full, &basic, &url(p_two))?;
    drop(two);
    Ok(EdgeResults {
        runs,
        vm_bytes,
        idle_poll_bytes,
        idle_polls,
        first_sync,
        propagation,
        command: format!(
            "taskset -c 0 envoy --concurrency 1 -c target/bench/envoy-edge.yaml (two listeners, our filter with edge sync from an issuer with 0 and with {REVOCATIONS} revocations in force); per listener: taskset -c 1 wrk --latency -t1 -c32 -d{}s -H 'Authorization: Bearer TOKEN'; propagation: envoy --concurrency 2 -c target/bench/envoy-edge-2.yaml, curl",
            s.seconds
        ),
    })
}

/// The edge section of the report.
pub(super) fn report(e: &EdgeResults) -> String {
    use std::fmt::Write as _;
    let mut r = String::new();
    let [none, full] = [&e.runs.samples[0], &e.runs.samples[1]];
    let ms = |d: &Duration| d.as_secs_f64() * 1000.0;
    let mut prop: Vec<f64> = e.propagation.iter().map(ms).collect();
    prop.sort_by(|a, b| a.total_cmp(b));
    let _ = writeln!(r, "Command: `{}`.\n", e.command);
    let _ = writeln!(
        r,
        "| edge sync | req/s | p50 ms | p99 ms |\n|---|---|---|---|"
    );
    for (name, x) in [
        ("no revocation in force", none),
        ("100,000 revocations in force", full),
    ] {
        let _ = writeln!(
            r,
            "| {name} | {:.0} | {:.3} | {:.3} |",
            x.rps, x.p50_ms, x.p99_ms
        );
    }
    let _ = writeln!(
        r,
        "\n| bound (issue 11) | target | measured |\n|---|---|---|\n| throughput with 100,000 revocations / with none | ≥ 0.95 | {:.3} |\n| memory of a filter VM (its linear memory), none / 100,000 revocations | stated | {:.1} MiB / {:.1} MiB |\n| steady-state poll answer with 100,000 in force | < 200 bytes | {} bytes |\n| idle polls one issuer answers (wrk, 8 connections; an Envoy polls once a second per worker, plus its main thread) | stated | {:.0}/s, p99 {:.2} ms |\n| revocation answered → refused 8 times in a row at an Envoy with two workers ({} samples) | ≤ 2 s | median {:.0} ms, max {:.0} ms |\n| from Envoy's start to a token accepted with 100,000 revocations synced (10 pages) | stated | {:.0} ms |",
        e.runs.paired(1, 0),
        e.vm_bytes.0 as f64 / 1048576.0,
        e.vm_bytes.1 as f64 / 1048576.0,
        e.idle_poll_bytes,
        e.idle_polls.rps,
        e.idle_polls.p99_ms,
        prop.len(),
        prop.get(prop.len() / 2).copied().unwrap_or(f64::NAN),
        prop.last().copied().unwrap_or(f64::NAN),
        ms(&e.first_sync),
    );
    r
}
