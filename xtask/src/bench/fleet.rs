//! The fleet one issuer serves (`cargo xtask bench --feed`): simulated edge VMs, each one task on
//! a keep-alive connection of its own asking the feed as the filter does, either waiting for
//! news (`wait=20`, the next request as soon as an answer is in) or polling once a second. For
//! each fleet size: the issuer's memory with the fleet connected, its CPU idle and under a
//! revocation a second, and per revocation the time from the revoke endpoint's answer to its
//! arrival at each VM. The VMs send no `mms-edge-*` headers, so the list of edges (bounded at
//! 10,000) is not part of what is measured.

use super::cpu_ms;
use super::feed::{quantile, TARGET_MAX_MS, TARGET_P99_MS};
use super::provision;
use super::raw_http::{self, client_token, port_of, revoke};
use anyhow::{bail, Result};
use e2e::issuer::{add_client, start_issuer_on, StoreArgs};
use e2e::Tools;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// Fleet sizes of a full run, and of `--quick`.
const FLEETS: [usize; 3] = [1_000, 5_000, 10_000];
const FLEETS_QUICK: [usize; 1] = [1_000];
/// Revocations per fleet (one a second), and the idle window.
const REVOCATIONS: usize = 10;
const IDLE: Duration = Duration::from_secs(10);
/// The wait the simulated VMs ask for (the filter's default).
const WAIT: u64 = 20;

/// How the simulated VMs ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Waiting,
    Polling,
}

/// One fleet's figures.
pub(super) struct FleetRun {
    pub(super) vms: usize,
    pub(super) mode: Mode,
    /// The issuer's resident memory before the fleet and with it connected, KiB.
    pub(super) rss_kib: (u64, u64),
    /// The issuer's CPU, milliseconds a second: idle, and with a revocation a second.
    pub(super) cpu_ms_per_s: (f64, f64),
    /// Per revocation and VM, milliseconds from the revoke answer to its arrival.
    pub(super) delivery: Vec<f64>,
}

/// What the VMs share: the stop flag, and per VM the revocations it received and when.
struct Fleet {
    stop: AtomicBool,
    connected: AtomicUsize,
    received: Vec<AtomicU64>,
    last_at: Mutex<Vec<Option<Instant>>>,
}

/// Reads one answer's status and body.
async fn read_answer(r: &mut BufReader<TcpStream>) -> Result<(u16, Vec<u8>)> {
    let mut line = String::new();
    r.read_line(&mut line).await?;
    let mut head = e2e::http1::Head::new(&line)?;
    loop {
        line.clear();
        if r.read_line(&mut line).await? == 0 {
            bail!("closed inside the headers");
        }
        if !head.header(&line) {
            break;
        }
    }
    // The feed answers with a length, never in chunks.
    let mut body = vec![0; head.length.unwrap_or(0)];
    r.read_exact(&mut body).await?;
    Ok((head.status, body))
}

/// One simulated VM: a full snapshot, then `since` polls, waiting or once a second.
async fn vm(i: usize, port: u16, auth: Arc<str>, fleet: Arc<Fleet>, mode: Mode) -> Result<()> {
    let mut r = BufReader::new(TcpStream::connect(("127.0.0.1", port)).await?);
    fleet.connected.fetch_add(1, Ordering::Relaxed);
    let mut query = String::new();
    while !fleet.stop.load(Ordering::Relaxed) {
        let req = format!("GET /apiv2/oauth/edge{query} HTTP/1.1\r\nhost: issuer\r\nauthorization: {auth}\r\n\r\n");
        r.get_mut().write_all(req.as_bytes()).await?;
        let (status, body) = read_answer(&mut r).await?;
        let at = Instant::now();
        if status != 200 {
            bail!("the feed answered {status}");
        }
        let v: serde_json::Value = serde_json::from_slice(&body)?;
        let news = v["revoked"].as_array().map_or(0, Vec::len) as u64;
        if news > 0 && !query.is_empty() {
            fleet.received[i].fetch_add(news, Ordering::Relaxed);
            fleet.last_at.lock().unwrap()[i] = Some(at);
        }
        let (cursor, version) = (&v["cursor"], v["keys_version"].as_str().unwrap_or(""));
        query = match mode {
            Mode::Waiting => format!("?since={cursor}&keys={version}&wait={WAIT}"),
            Mode::Polling => format!("?since={cursor}&keys={version}"),
        };
        if mode == Mode::Polling {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    Ok(())
}

/// The issuer's `issuer_feed_waiting`.
fn waiting(port: u16) -> Result<u64> {
    Ok(raw_http::metric(port, "issuer_feed_waiting")?.unwrap_or(0))
}

/// A token of the bench client revoked at the issuer: the moment the answer was in.
fn revoke_one(port: u16, basic: &str) -> Result<Instant> {
    let token = client_token(port, basic)?;
    revoke(port, basic, &token)
}

/// Until every VM of `fleet` received `count` revocations (5 s at most); their arrival times.
async fn delivered(fleet: &Fleet, count: u64, since: Instant) -> Result<Vec<f64>> {
    loop {
        if fleet
            .received
            .iter()
            .all(|r| r.load(Ordering::Relaxed) >= count)
        {
            let at = fleet.last_at.lock().unwrap();
            return Ok(at
                .iter()
                .map(|t| {
                    t.map_or(f64::NAN, |t| {
                        t.saturating_duration_since(since).as_secs_f64() * 1000.0
                    })
                })
                .collect());
        }
        if since.elapsed() > Duration::from_secs(5) {
            bail!("a revocation did not reach every VM within 5 s");
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// One fleet of `vms` in `mode` against the issuer on `port` (process `pid`).
async fn one_fleet(
    port: u16,
    pid: u32,
    basic: &str,
    auth: Arc<str>,
    vms: usize,
    mode: Mode,
) -> Result<FleetRun> {
    let before = super::rss_kib(pid).0;
    let fleet = Arc::new(Fleet {
        stop: AtomicBool::new(false),
        connected: AtomicUsize::new(0),
        received: (0..vms).map(|_| AtomicU64::new(0)).collect(),
        last_at: Mutex::new(vec![None; vms]),
    });
    let tasks: Vec<_> = (0..vms)
        .map(|i| tokio::spawn(vm(i, port, auth.clone(), fleet.clone(), mode)))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while fleet.connected.load(Ordering::Relaxed) < vms
        || (mode == Mode::Waiting && (waiting(port)? as usize) < vms)
    {
        if Instant::now() > deadline || tasks.iter().any(|t| t.is_finished()) {
            bail!("{vms} VMs did not all connect (and wait)");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let holding = super::rss_kib(pid).0;
    let cpu0 = cpu_ms(pid);
    tokio::time::sleep(IDLE).await;
    let idle = (cpu_ms(pid) - cpu0) / IDLE.as_secs_f64();
    let (started, cpu1) = (Instant::now(), cpu_ms(pid));
    let mut delivery = Vec::new();
    for k in 1..=REVOCATIONS as u64 {
        let at = tokio::task::block_in_place(|| revoke_one(port, basic))?;
        delivery.extend(delivered(&fleet, k, at).await?);
        tokio::time::sleep_until((at + Duration::from_secs(1)).into()).await;
    }
    let busy = (cpu_ms(pid) - cpu1) / started.elapsed().as_secs_f64();
    fleet.stop.store(true, Ordering::Relaxed);
    for t in &tasks {
        t.abort();
    }
    Ok(FleetRun {
        vms,
        mode,
        rss_kib: (before, holding),
        cpu_ms_per_s: (idle, busy),
        delivery,
    })
}

/// Every fleet size, waiting then polling, against one issuer on the embedded store.
pub(super) fn bench_fleet(dir: &Path, tools: &Tools, quick: bool) -> Result<Vec<FleetRun>> {
    let data = dir.join("issuer-fleet");
    let store = StoreArgs::redb(&data);
    let basic = provision(tools, &store)?;
    let edge_secret = add_client(tools, &store, "envoy-edge", &["--edge"])?;
    let args = [
        "--feed-max-waiting",
        "100000",
        "--feed-max-waiting-per-client",
        "100000",
        "--revocations-per-minute",
        "60000",
    ];
    let log = dir.join("issuer-fleet.log");
    let (proc, url) = start_issuer_on(tools, &store, e2e::free_port(), &args, &log)?;
    let port = port_of(&url)?;
    let auth: Arc<str> = raw_http::basic(&format!("envoy-edge:{edge_secret}")).into();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let sizes: &[usize] = if quick { &FLEETS_QUICK } else { &FLEETS };
    let mut runs = Vec::new();
    for &vms in sizes {
        for mode in [Mode::Waiting, Mode::Polling] {
            let run = rt.block_on(one_fleet(port, proc.pid(), &basic, auth.clone(), vms, mode))?;
            eprintln!(
                "fleet {vms} {mode:?}: cpu {:.0}/{:.0} ms/s",
                run.cpu_ms_per_s.0, run.cpu_ms_per_s.1
            );
            runs.push(run);
            // The aborted VMs' connections close; the issuer drops their waits.
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    drop(proc);
    Ok(runs)
}

/// The fleet part of the report.
pub(super) fn report(runs: &[FleetRun]) -> Result<String> {
    use std::fmt::Write as _;
    let mut r = String::from(
        "| VMs | mode | issuer CPU idle, ms/s (per 1,000 VMs) | with a revocation a second, ms/s | issuer memory with the fleet (per VM) | revocation → each VM: p50 / p99 / max |\n|---|---|---|---|---|---|\n",
    );
    let mut within = None;
    for f in runs {
        let mut d = f.delivery.clone();
        d.sort_by(f64::total_cmp);
        let (p50, p99, max) = (quantile(&d, 0.5), quantile(&d, 0.99), quantile(&d, 1.0));
        if f.mode == Mode::Waiting && p99 <= TARGET_P99_MS && max <= TARGET_MAX_MS {
            within = Some(f.vms);
        }
        let per_k = f.cpu_ms_per_s.0 * 1000.0 / f.vms as f64;
        let grown = f.rss_kib.1.saturating_sub(f.rss_kib.0) as f64;
        writeln!(
            r,
            "| {} | {:?} | {:.1} ({per_k:.2}) | {:.1} | {:.1} MiB, +{:.1} MiB ({:.1} KiB) | {p50:.0} / {p99:.0} / {max:.0} ms |",
            f.vms,
            f.mode,
            f.cpu_ms_per_s.0,
            f.cpu_ms_per_s.1,
            f.rss_kib.1 as f64 / 1024.0,
            grown / 1024.0,
            grown / f.vms as f64,
        )?;
    }
    writeln!(
        r,
        "\nThe largest fleet measured whose waiting VMs all got each revocation within the target ({}): {}.",
        super::feed::target(),
        within.map_or("none".into(), |n| format!("{n} VMs"))
    )?;
    Ok(r)
}
