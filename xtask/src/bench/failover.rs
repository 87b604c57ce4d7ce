//! The failover runs: two issuers (release build) on the multi-host URL of a
//! PostgreSQL primary and its streaming standby (`target_session_attrs=read-write`), 32 clients
//! refreshing a family each, half at each issuer. Mid-load every process of the primary is
//! SIGKILLed and, a second later, the standby promoted. Measured: refreshes per second and p99
//! before the kill, the time from the promotion to the first rotation answered, the answers 503,
//! and the rotations a client was answered 200 for that the promoted standby lacks.
//!
//! Four runs: a synchronous and an asynchronous standby, each also with the standby a second
//! behind at the kill (its WAL sender on the primary stopped with SIGSTOP a second before, as a
//! slow network or disk would hold it back). Synchronous replication loses nothing either way:
//! while the standby lags, no commit is acknowledged. Asynchronous replication keeps answering,
//! and loses what the standby had not received.

use super::{provision, sign_in};
use crate::install;
use anyhow::{Context, Result};
use e2e::failover::{acknowledged, rotations_lost, stored_families, Answer, Load, Outcome, Target};
use e2e::issuer::{start_issuer_on, StoreArgs};
use e2e::postgres::{PgCluster, Replication};
use e2e::Tools;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// Clients, each refreshing a family of its own.
const CLIENTS: usize = 32;
/// From the kill to the promotion.
const GAP: Duration = Duration::from_secs(1);
/// How far behind the lagging standby is at the kill.
const LAG: Duration = Duration::from_secs(1);
/// Load after the promotion.
const AFTER: Duration = Duration::from_secs(3);

/// One failover run's setting.
#[derive(Debug, Clone, Copy)]
struct Variant {
    replication: Replication,
    lagging: bool,
}

const VARIANTS: [Variant; 4] = [
    Variant {
        replication: Replication::Synchronous,
        lagging: false,
    },
    Variant {
        replication: Replication::Asynchronous,
        lagging: false,
    },
    Variant {
        replication: Replication::Synchronous,
        lagging: true,
    },
    Variant {
        replication: Replication::Asynchronous,
        lagging: true,
    },
];

impl Variant {
    fn name(self) -> String {
        let mode = match self.replication {
            Replication::Synchronous => "synchronous",
            Replication::Asynchronous => "asynchronous",
        };
        if self.lagging {
            format!("{mode}, standby {} s behind", LAG.as_secs())
        } else {
            mode.to_owned()
        }
    }
}

/// What one run measured.
#[derive(Debug)]
struct Figures {
    variant: Variant,
    rps_before: f64,
    p99_before_ms: f64,
    /// Rotations answered 200 while the standby was held back.
    acked_while_behind: usize,
    /// From the promotion to the first 200 of a request sent after it.
    first_ok_after_promotion: Option<Duration>,
    unavailable: usize,
    unavailable_without_retry_after: usize,
    /// 400 answers: a client presenting the token it was given, unknown to the new primary.
    refused: usize,
    other: usize,
    /// Rotations answered 200 before the promotion that the promoted standby lacks.
    lost: u64,
    families_hit: usize,
}

/// Runs every variant, `rounds` times each; `seconds` of load before the kill.
pub(super) fn bench_failover(dir: &Path, rounds: usize, seconds: u64) -> Result<String> {
    let tools = super::release_issuer();
    let bin = install::ensure_postgres()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut runs = Vec::new();
    let mut version = String::new();
    for round in 0..rounds {
        for (i, variant) in VARIANTS.iter().enumerate() {
            let run_dir = dir.join(format!("run-{round}-{i}"));
            std::fs::create_dir_all(&run_dir)?;
            let (figures, v) = one_run(&rt, &run_dir, &tools, &bin, *variant, seconds)
                .with_context(|| format!("failover run {}", variant.name()))?;
            eprintln!(
                "failover round {} {}: {figures:?}",
                round + 1,
                variant.name()
            );
            version = v;
            runs.push(figures);
        }
    }
    if let Some(bad) = runs
        .iter()
        .find(|f| f.other > 0 || f.unavailable_without_retry_after > 0)
    {
        anyhow::bail!(
            "failover run {}: answers other than 200, 400 or 503 with Retry-After: {bad:?}",
            bad.variant.name()
        );
    }
    if let Some(bad) = runs.iter().find(|f| {
        matches!(f.variant.replication, Replication::Synchronous) && (f.lost > 0 || f.refused > 0)
    }) {
        anyhow::bail!("a synchronous standby lost acknowledged rotations: {bad:?}");
    }
    report(&runs, seconds, &version)
}

/// One failover: a fresh primary and standby, two issuers, the load, the kill, the promotion.
fn one_run(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    tools: &Tools,
    bin: &Path,
    variant: Variant,
    seconds: u64,
) -> Result<(Figures, String)> {
    let mut primary = PgCluster::start_with(bin)?;
    let standby = primary.start_standby(variant.replication)?;
    let version = primary.psql("SHOW server_version")?;
    let kek = dir.join("kek");
    let mut key = [0u8; 32];
    std::io::Read::read_exact(&mut std::fs::File::open("/dev/urandom")?, &mut key)?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    e2e::write_private(&kek, format!("{hex}\n").as_bytes())?;
    let store = StoreArgs::postgres(&primary.failover_url(&standby), &kek);
    let basic = provision(tools, &store)?;
    let (a, url_a) = start_issuer_on(tools, &store, e2e::free_port(), &[], &dir.join("a.log"))?;
    let (b, url_b) = start_issuer_on(tools, &store, e2e::free_port(), &[], &dir.join("b.log"))?;
    let mut tokens = sign_in(&url_a, &basic, CLIENTS / 2)?;
    tokens.extend(sign_in(&url_b, &basic, CLIENTS / 2)?);
    let (client_id, secret) = basic.split_once(':').context("client:secret")?;
    let target = Target {
        http: e2e::failover::http_client()?,
        token_urls: vec![
            format!("{url_a}/apiv2/oauth/token"),
            format!("{url_b}/apiv2/oauth/token"),
        ],
        client_id: client_id.into(),
        secret: secret.into(),
    };
    let families = tokens.into_iter().map(|t| (t, 1)).collect();
    let figures = rt.block_on(async {
        let load = Load::start(&target, families, Instant::now() + Duration::from_secs(120));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let measured_from = Instant::now();
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        if variant.lagging {
            tokio::task::block_in_place(|| primary.hold_wal_senders())?;
        }
        let held_from = Instant::now();
        if variant.lagging {
            tokio::time::sleep(LAG).await;
        }
        let killed = Instant::now();
        tokio::task::block_in_place(|| primary.kill())?;
        tokio::time::sleep(GAP).await;
        tokio::task::block_in_place(|| standby.promote())?;
        let promoted = Instant::now();
        let stored = stored_families(&standby)?;
        tokio::time::sleep(AFTER).await;
        let (answers, _) = load.finish().await?;
        let acked = acknowledged(&answers, promoted);
        let lost = rotations_lost(&acked, &stored);
        let families_hit = e2e::failover::missing(&acked, &stored).len();
        let times = Times {
            measured_from,
            held_from,
            killed,
            promoted,
        };
        anyhow::Ok(figures(variant, &answers, &times, lost, families_hit))
    })?;
    drop((a, b));
    Ok((figures, version))
}

/// The instants of one run.
struct Times {
    measured_from: Instant,
    held_from: Instant,
    killed: Instant,
    promoted: Instant,
}

fn figures(v: Variant, answers: &[Answer], t: &Times, lost: u64, families_hit: usize) -> Figures {
    let before: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.at >= t.measured_from && a.at + a.latency <= t.held_from)
        .filter(|a| matches!(a.outcome, Outcome::Rotated(_)))
        .collect();
    let window = t.held_from.duration_since(t.measured_from).as_secs_f64();
    let mut latencies: Vec<Duration> = before.iter().map(|a| a.latency).collect();
    latencies.sort_unstable();
    let p99 = latencies
        .get((latencies.len() * 99 / 100).min(latencies.len().saturating_sub(1)))
        .map_or(f64::NAN, |d| d.as_secs_f64() * 1000.0);
    let count = |f: &dyn Fn(&Outcome) -> bool| answers.iter().filter(|a| f(&a.outcome)).count();
    let first_ok = answers
        .iter()
        .filter(|a| a.at >= t.promoted && matches!(a.outcome, Outcome::Rotated(_)))
        .map(|a| (a.at + a.latency).duration_since(t.promoted))
        .min();
    let acked_while_behind = answers
        .iter()
        .filter(|a| a.at + a.latency >= t.held_from && a.at + a.latency < t.killed)
        .filter(|a| matches!(a.outcome, Outcome::Rotated(_)))
        .count();
    Figures {
        variant: v,
        rps_before: before.len() as f64 / window,
        p99_before_ms: p99,
        acked_while_behind,
        first_ok_after_promotion: first_ok,
        unavailable: count(&|o| matches!(o, Outcome::Unavailable { .. })),
        unavailable_without_retry_after: count(&|o| {
            matches!(o, Outcome::Unavailable { retry_after: false })
        }),
        refused: count(&|o| matches!(o, Outcome::Refused(_))),
        other: count(&|o| matches!(o, Outcome::Other(..) | Outcome::Transport(_))),
        lost,
        families_hit,
    }
}

/// The Markdown section.
fn report(runs: &[Figures], seconds: u64, version: &str) -> Result<String> {
    let mut r = String::new();
    writeln!(
        r,
        "### PostgreSQL failover: two issuers, 32 clients refreshing\n"
    )?;
    writeln!(
        r,
        "| standby | before the kill: rotations/s | p99 ms | answered 200 while the standby was behind | promotion → first 200 | answers 503 (all with Retry-After) | answers 400 | acknowledged rotations missing on the promoted standby (families) |\n|---|---|---|---|---|---|---|---|"
    )?;
    for f in runs {
        let first = f
            .first_ok_after_promotion
            .map_or("none".into(), |d| format!("{:.3} s", d.as_secs_f64()));
        let behind = if f.variant.lagging {
            f.acked_while_behind.to_string()
        } else {
            "—".into()
        };
        writeln!(
            r,
            "| {} | {:.0} | {:.2} | {behind} | {first} | {} | {} | {} ({}) |",
            f.variant.name(),
            f.rps_before,
            f.p99_before_ms,
            f.unavailable,
            f.refused,
            f.lost,
            f.families_hit
        )?;
    }
    writeln!(
        r,
        "\nCommand: `cargo xtask bench --failover`: PostgreSQL {version}, a throwaway primary (fsync on, \
         SERIALIZABLE) and a `pg_basebackup -R` standby on loopback, `synchronous_standby_names` \
         naming it or empty; two issuers (release) on \
         `postgres://app@127.0.0.1:P1,127.0.0.1:P2/postgres?target_session_attrs=read-write`; \
         {CLIENTS} clients (tokio and reqwest in the xtask binary, a debug build, on the same two \
         cores: its CPU bounds the throughput too), a family each, 16 per issuer, each presenting \
         its latest token, a 503 answered by the same token again 100 ms later; {seconds} s of load measured \
         before the kill; every primary process SIGKILLed, `pg_ctl promote` of the standby {} s \
         later, {} s of load after; \"behind\": the primary's WAL sender stopped (SIGSTOP) {} s \
         before the kill (\"answered 200 while behind\": from the SIGSTOP to the kill). No Envoy, \
         no wrk; nothing pinned.\n",
        GAP.as_secs(),
        AFTER.as_secs(),
        LAG.as_secs()
    )?;
    Ok(r)
}
