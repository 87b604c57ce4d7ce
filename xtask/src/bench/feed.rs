//! Revocation latency with edges that wait for news (`cargo xtask bench --feed`): two issuers on
//! one PostgreSQL, two Envoys of two workers with the Wasm filter (a poller in every worker),
//! each fed by a different issuer. Probes hold keep-alive connections spread over every worker
//! of both Envoys and call with the round's token every few milliseconds (the traffic); each
//! round revokes its token at one issuer or the other, and the time from the revoke endpoint's
//! answer to the first refusal on every probe's connection is the round's latency (the last
//! worker to refuse). The fleet runs are in `fleet.rs`.

use super::edge::sync_config;
use super::envoy::{config, issuer_cluster, listener, start_envoy, wasm_filter};
use super::provision;
use super::raw_http::{client_token, once, port_of, revoke, Conn};
use anyhow::{bail, Result};
use e2e::issuer::{add_client, start_issuer_on, StoreArgs};
use e2e::postgres::PgCluster;
use e2e::Tools;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

/// Revocations of a full run, and of `--quick`.
const ROUNDS: usize = 200;
const ROUNDS_QUICK: usize = 20;
/// Probe connections per Envoy (spread by Envoy over its two workers; checked).
const PROBES: usize = 8;
/// The pause between a probe's calls.
const PROBE_EVERY: Duration = Duration::from_millis(5);
/// A round whose revocation is not refused everywhere by then counts as this, and fails the run.
const GIVE_UP: Duration = Duration::from_secs(5);

/// What the latency runs measured.
pub(super) struct Latency {
    /// Per round, from the revoke answer to its refusal at the last probe, in milliseconds.
    pub(super) rounds: Vec<f64>,
    /// Calls the probes made over the run, and how long it took.
    pub(super) calls: u64,
    pub(super) took: Duration,
    pub(super) command: String,
}

/// A probe's round, and the instants of its last 200 and its first 401 in it.
type Seen = (u64, Option<Instant>, Option<Instant>);

/// What the probes share with the rounds: the token, the round number, and per probe the round
/// and time of its last 200 and its first 401.
struct Shared {
    token: RwLock<String>,
    round: AtomicU64,
    seen: Mutex<Vec<Seen>>,
    stop: AtomicBool,
    calls: AtomicU64,
}

/// One probe: calls through `conn` with the round's token until stopped.
fn probe(conn: &mut Conn, i: usize, shared: &Shared) -> Result<()> {
    while !shared.stop.load(Ordering::Relaxed) {
        let round = shared.round.load(Ordering::Acquire);
        let auth = format!("Bearer {}", shared.token.read().unwrap());
        let answer = conn.send(
            "GET",
            "/apiv2/MediaService/Find",
            &[("authorization", &auth)],
            "",
        )?;
        let at = Instant::now();
        shared.calls.fetch_add(1, Ordering::Relaxed);
        let mut seen = shared.seen.lock().unwrap();
        let slot = &mut seen[i];
        if slot.0 != round {
            *slot = (round, None, None);
        }
        match answer.status {
            200 => slot.1 = Some(at),
            401 => {
                slot.2.get_or_insert(at);
            }
            // Before the edges' first answer only.
            503 if round == 0 => {}
            other => bail!("a probe got {other} in round {round}"),
        }
        drop(seen);
        std::thread::sleep(PROBE_EVERY);
    }
    Ok(())
}

/// Probe connections to `port` until each of Envoy's two workers holds at least one (its admin
/// interface on `admin` says which worker took each).
fn spread_connections(port: u16, admin: u16) -> Result<Vec<Conn>> {
    let mut conns = Vec::new();
    while conns.len() < PROBES * 4 {
        conns.push(Conn::open(port)?);
        if conns.len() < PROBES {
            continue;
        }
        let stats = once(
            admin,
            "GET",
            "/stats?filter=worker_.*downstream_cx_active",
            &[],
            "",
        )?;
        let text = String::from_utf8_lossy(&stats.body).into_owned();
        let per_worker: Vec<u64> = text
            .lines()
            .filter(|l| l.contains(&format!("_{port}.worker_")))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        if per_worker.len() == 2 && per_worker.iter().all(|n| *n > 0) {
            return Ok(conns);
        }
    }
    bail!("Envoy on {port} put every probe connection on one worker")
}

/// The issuers, the Envoys and the edge client of a run.
struct Stack {
    issuers: Vec<(e2e::Proc, u16)>,
    envoys: Vec<(e2e::Proc, u16, u16)>,
    basic: String,
    _pg: PgCluster,
}

fn start_stack(dir: &Path, tools: &Tools) -> Result<Stack> {
    let pg = PgCluster::start()?;
    let kek = dir.join("kek");
    e2e::write_private(&kek, format!("{}\n", "ab".repeat(32)).as_bytes())?;
    let store = StoreArgs::postgres(&pg.url(), &kek);
    let basic = provision(tools, &store)?;
    let edge_secret = add_client(tools, &store, "envoy-edge", &["--edge"])?;
    let mut issuers = Vec::new();
    for name in ["a", "b"] {
        let args = ["--revocations-per-minute", "60000"];
        let log = dir.join(format!("issuer-{name}.log"));
        let (proc, url) = start_issuer_on(tools, &store, e2e::free_port(), &args, &log)?;
        issuers.push((proc, port_of(&url)?));
    }
    let mut envoys = Vec::new();
    for (i, (_, issuer)) in issuers.iter().enumerate() {
        let (port, admin) = (e2e::free_port(), e2e::free_port());
        let filter = wasm_filter(
            "edge",
            &tools.wasm,
            &sync_config("issuer_feed", &edge_secret),
        );
        let cluster = issuer_cluster("issuer_feed", &format!("http://127.0.0.1:{issuer}"))?;
        let cfg = dir.join(format!("envoy-{i}.yaml"));
        std::fs::write(
            &cfg,
            config(Some(admin), &listener("edge", port, &filter), &cluster),
        )?;
        let log = dir.join(format!("envoy-{i}.log"));
        envoys.push((start_envoy(tools, &cfg, port, 2, None, &log)?, port, admin));
    }
    Ok(Stack {
        issuers,
        envoys,
        basic,
        _pg: pg,
    })
}

/// Waits until every probe saw `round` answered with `status`'s instant set; the instants.
fn until_all(shared: &Shared, round: u64, refused: bool, from: Instant) -> Result<Vec<Instant>> {
    loop {
        let seen = shared.seen.lock().unwrap();
        let at: Vec<Option<Instant>> = seen
            .iter()
            .map(|(r, ok, no)| {
                (*r == round)
                    .then_some(if refused { *no } else { *ok })
                    .flatten()
            })
            .collect();
        drop(seen);
        if at.iter().all(Option::is_some) {
            return Ok(at.into_iter().flatten().collect());
        }
        if from.elapsed() > GIVE_UP {
            let what = if refused { "refused" } else { "accepted" };
            bail!("round {round}: not {what} at every probe within {GIVE_UP:?}");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// One round: a token from one issuer, accepted everywhere, revoked at the other; the time from
/// the revoke answer to the last probe's first refusal.
fn round(stack: &Stack, shared: &Shared, n: u64) -> Result<Duration> {
    let (from, at) = (n as usize % 2, (n as usize + 1) % 2);
    let token = client_token(stack.issuers[from].1, &stack.basic)?;
    *shared.token.write().unwrap() = token.clone();
    shared.round.store(n, Ordering::Release);
    until_all(shared, n, false, Instant::now())?;
    let revoked = revoke(stack.issuers[at].1, &stack.basic, &token)?;
    let refused = until_all(shared, n, true, revoked)?;
    Ok(refused
        .iter()
        .map(|t| t.saturating_duration_since(revoked))
        .max()
        .unwrap_or_default())
}

pub(super) fn bench_latency(dir: &Path, tools: &Tools, quick: bool) -> Result<Latency> {
    let stack = start_stack(dir, tools)?;
    let mut conns = Vec::new();
    for (_, port, admin) in &stack.envoys {
        conns.extend(spread_connections(*port, *admin)?);
    }
    let shared = Arc::new(Shared {
        token: RwLock::new(client_token(stack.issuers[0].1, &stack.basic)?),
        round: AtomicU64::new(0),
        seen: Mutex::new(vec![(0, None, None); conns.len()]),
        stop: AtomicBool::new(false),
        calls: AtomicU64::new(0),
    });
    let probes: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, mut conn)| {
            let shared = shared.clone();
            std::thread::spawn(move || probe(&mut conn, i, &shared))
        })
        .collect();
    // Until the edges synced: the first token accepted on every probe.
    let synced = (0..6).any(|_| until_all(&shared, 0, false, Instant::now()).is_ok());
    if !synced {
        shared.stop.store(true, Ordering::Relaxed);
        bail!("the edges never accepted the first token");
    }
    let started = Instant::now();
    let total = if quick { ROUNDS_QUICK } else { ROUNDS };
    let mut rounds = Vec::with_capacity(total);
    let mut failed = None;
    for n in 1..=total as u64 {
        match round(&stack, &shared, n) {
            Ok(took) => rounds.push(took.as_secs_f64() * 1000.0),
            Err(e) => {
                failed = Some(e);
                break;
            }
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    let probes_n = probes.len();
    for p in probes {
        p.join()
            .map_err(|_| anyhow::anyhow!("a probe panicked"))??;
    }
    if let Some(e) = failed {
        return Err(e);
    }
    Ok(Latency {
        rounds,
        calls: shared.calls.load(Ordering::Relaxed),
        took: started.elapsed(),
        command: format!(
            "two issuers on one PostgreSQL, two Envoys (--concurrency 2, the Wasm filter, each polling a different issuer), {probes_n} keep-alive probe connections over all four workers calling every {} ms; {total} revocations, alternately at each issuer, of a token issued by the other",
            PROBE_EVERY.as_millis()
        ),
    })
}

/// The target of a revocation's way to every worker (from its answer to its refusal): a p99 of at
/// most this many milliseconds…
pub(super) const TARGET_P99_MS: f64 = 250.0;
/// …and none over this many.
pub(super) const TARGET_MAX_MS: f64 = 1_000.0;

/// The target as the reports state it.
pub(super) fn target() -> String {
    format!(
        "p99 ≤ {TARGET_P99_MS} ms, none over {} s",
        TARGET_MAX_MS / 1000.0
    )
}

/// The `q` quantile of sorted `v` (nearest rank).
pub(super) fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// The latency part of the report.
pub(super) fn report(l: &Latency) -> String {
    let mut v = l.rounds.clone();
    v.sort_by(f64::total_cmp);
    let (p50, p99, max) = (quantile(&v, 0.5), quantile(&v, 0.99), quantile(&v, 1.0));
    let over = v.iter().filter(|x| **x > TARGET_MAX_MS).count();
    let max_s = TARGET_MAX_MS / 1000.0;
    format!(
        "Command: {}.\n\n| revocation answered → refused at every worker of both Envoys ({} revocations, {:.0} probe calls a second) | target | measured | |\n|---|---|---|---|\n| p50 | | {p50:.1} ms | |\n| p99 | ≤ {TARGET_P99_MS} ms | {p99:.1} ms | {} |\n| maximum | none over {max_s} s | {max:.1} ms ({over} over {max_s} s) | {} |\n",
        l.command,
        v.len(),
        l.calls as f64 / l.took.as_secs_f64(),
        super::mark(p99 <= TARGET_P99_MS),
        super::mark(over == 0),
    )
}
