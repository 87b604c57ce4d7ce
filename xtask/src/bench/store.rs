//! The stores under load: durable refresh rotations on the embedded store, empty and holding
//! millions of live families, side by side; two issuers on one PostgreSQL; `client_credentials`
//! on PostgreSQL against `/healthz`; and each issuer's memory, idle and after the runs.
//!
//! Issuers and PostgreSQL come from the test harness (`e2e`), so they start, wait and stop
//! exactly as in the tests. The embedded-store issuers run on core 0 with wrk on core 1; the
//! PostgreSQL runs share both cores between the database, two issuers and wrk, as one machine
//! running all of it would.

use super::{
    lua_post, lua_refresh, mark, median, provision, rss_kib, sign_in, wrk_on, Sample, Settings,
};
use crate::install;
use crate::util::{root, run, thousands};
use anyhow::{bail, Result};
use base64::Engine as _;
use e2e::issuer::{start_issuer_on, StoreArgs};
use e2e::postgres::PgCluster;
use e2e::{Proc, Tools};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// One measured load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    RedbEmpty,
    RedbFull,
    PgHealth,
    PgClientCredentials,
    PgRefresh,
}

impl Load {
    const ALL: [Load; 5] = [
        Load::RedbEmpty,
        Load::RedbFull,
        Load::PgHealth,
        Load::PgClientCredentials,
        Load::PgRefresh,
    ];

    fn name(self, families: u64) -> String {
        match self {
            Load::RedbEmpty => "redb, empty store: refresh, 64 clients".into(),
            Load::RedbFull => format!("redb, {families} live families: refresh, 64 clients"),
            Load::PgHealth => "PostgreSQL store: `/healthz`".into(),
            Load::PgClientCredentials => "PostgreSQL store: client_credentials".into(),
            Load::PgRefresh => "PostgreSQL, two issuers: refresh, 64 clients (32 each)".into(),
        }
    }
}

/// An issuer under test, with what a load needs to reach it.
struct Issuer {
    proc: Proc,
    url: String,
    idle_rss_kib: u64,
    label: &'static str,
}

fn start(
    tools: &Tools,
    store: &StoreArgs,
    dir: &Path,
    label: &'static str,
    pin: Option<&str>,
) -> Result<Issuer> {
    let log = dir.join(format!("{}.log", label.replace(' ', "-")));
    let (proc, url) = start_issuer_on(tools, store, e2e::free_port(), &[], &log)?;
    if let Some(cpus) = pin {
        run(Command::new("taskset")
            .args(["-a", "-cp", cpus])
            .arg(proc.pid().to_string())
            .stdout(std::process::Stdio::null()))?;
    }
    std::thread::sleep(std::time::Duration::from_millis(300));
    let idle_rss_kib = rss_kib(proc.pid()).0;
    Ok(Issuer {
        proc,
        url,
        idle_rss_kib,
        label,
    })
}

/// One refresh run: a fresh family per connection, each connection presenting its latest token.
fn refresh_run(
    dir: &Path,
    name: &str,
    url: &str,
    basic_user: &str,
    connections: usize,
    seconds: u64,
) -> Result<Vec<String>> {
    let tokens = dir.join(format!("{name}-tokens.txt"));
    std::fs::write(
        &tokens,
        sign_in(url, basic_user, connections)?.join("\n") + "\n",
    )?;
    let script = dir.join(format!("{name}-refresh.lua"));
    let basic = base64::engine::general_purpose::STANDARD.encode(basic_user);
    lua_refresh(&script, &basic, &tokens)?;
    let args = vec![
        format!("-t{connections}"),
        format!("-c{connections}"),
        format!("-d{seconds}s"),
        "-s".into(),
        script.display().to_string(),
    ];
    Ok(args)
}

/// Both PostgreSQL issuers under refresh load at once: throughput summed, the worse p50 and p99.
fn pg_refresh(
    dir: &Path,
    a: &Issuer,
    b: &Issuer,
    basic_user: &str,
    seconds: u64,
) -> Result<Sample> {
    let args_a = refresh_run(dir, "pg-a", &a.url, basic_user, 32, seconds)?;
    let args_b = refresh_run(dir, "pg-b", &b.url, basic_user, 32, seconds)?;
    let url_b = format!("{}/apiv2/oauth/token", b.url);
    let other = std::thread::spawn(move || wrk_on(None, &args_b, &url_b));
    let first = wrk_on(None, &args_a, &format!("{}/apiv2/oauth/token", a.url))?;
    let second = other.join().map_err(|_| anyhow::anyhow!("wrk thread"))??;
    Ok(Sample {
        rps: first.rps + second.rps,
        p50_ms: first.p50_ms.max(second.p50_ms),
        p99_ms: first.p99_ms.max(second.p99_ms),
        requests: first.requests + second.requests,
        bad: first.bad + second.bad,
    })
}

/// The store runs' results: medians per load, paired ratios, memory.
pub(super) struct StoreResults {
    samples: Vec<(Load, Vec<Sample>)>,
    memory: Vec<(&'static str, u64, u64, u64)>,
    families: u64,
    fill_seconds: f64,
    /// PostgreSQL's own count of transactions over the whole run (a rollback is a transaction
    /// the database refused, retried by the issuer, or a refused request's).
    transactions: String,
    command: String,
}

impl StoreResults {
    fn of(&self, load: Load) -> &[Sample] {
        self.samples
            .iter()
            .find(|(l, _)| *l == load)
            .map_or(&[], |(_, s)| s.as_slice())
    }

    fn median(&self, load: Load) -> Sample {
        super::summarize(self.of(load))
    }

    /// Throughput of `a` over `b` within each round, then the median.
    fn paired(&self, a: Load, b: Load) -> f64 {
        median(
            self.of(a)
                .iter()
                .zip(self.of(b))
                .map(|(x, y)| x.rps / y.rps)
                .collect(),
        )
    }

    /// Names and samples of loads with a response other than 2xx.
    pub(super) fn failures(&self) -> Vec<(String, u64)> {
        self.samples
            .iter()
            .map(|(l, s)| (l.name(self.families), s.iter().map(|x| x.bad).sum()))
            .filter(|(_, bad)| *bad > 0)
            .collect()
    }
}

/// The issuers of the store runs, and what their loads need.
struct Stage {
    empty: Issuer,
    full: Issuer,
    pg_a: Issuer,
    pg_b: Issuer,
    basic_empty: String,
    basic_full: String,
    basic_pg: String,
    /// The wrk script of the client_credentials load.
    cc: PathBuf,
}

/// Runs the store loads, interleaved round after round.
pub(super) fn bench_stores(dir: &Path, s: &Settings, families: u64) -> Result<StoreResults> {
    let tools = super::release_issuer();
    // The embedded store, empty and full.
    let (empty_dir, full_dir) = (dir.join("redb-empty"), dir.join("redb-full"));
    let fill_started = std::time::Instant::now();
    run(
        Command::new(root().join("target/release/examples/fill_families"))
            .arg(&full_dir)
            .arg(families.to_string()),
    )?;
    let fill_seconds = fill_started.elapsed().as_secs_f64();
    let (empty_store, full_store) = (StoreArgs::redb(&empty_dir), StoreArgs::redb(&full_dir));
    let basic_empty = provision(&tools, &empty_store)?;
    let basic_full = provision(&tools, &full_store)?;
    let empty = start(&tools, &empty_store, dir, "redb empty", Some("0"))?;
    let full = start(&tools, &full_store, dir, "redb full", Some("0"))?;
    // PostgreSQL: a throwaway cluster, two issuers on one database.
    let pg = PgCluster::start_with(&install::ensure_postgres()?)?;
    let kek = dir.join("kek");
    e2e::write_private(
        &kek,
        format!("{:032x}{:032x}\n", rand_u128()?, rand_u128()?).as_bytes(),
    )?;
    let pg_store = StoreArgs::postgres(&pg.url(), &kek);
    let basic_pg = provision(&tools, &pg_store)?;
    let pg_a = start(&tools, &pg_store, dir, "postgres a", None)?;
    let pg_b = start(&tools, &pg_store, dir, "postgres b", None)?;
    let cc = dir.join("pg-cc.lua");
    lua_post(
        &cc,
        &base64::engine::general_purpose::STANDARD.encode(&basic_pg),
        "grant_type=client_credentials",
    )?;
    let stage = Stage {
        empty,
        full,
        pg_a,
        pg_b,
        basic_empty,
        basic_full,
        basic_pg,
        cc,
    };
    let samples = rounds(&stage, dir, s, families)?;
    let memory = [&stage.empty, &stage.full, &stage.pg_a, &stage.pg_b]
        .iter()
        .map(|i| {
            let (rss, peak) = rss_kib(i.proc.pid());
            (i.label, i.idle_rss_kib, rss, peak)
        })
        .collect();
    let live = pg.psql("SELECT count(*) FROM refresh_family_records")?;
    if live.trim().parse::<u64>().unwrap_or(0) == 0 {
        bail!("the PostgreSQL runs left no refresh family in the database");
    }
    let xacts = pg.psql(
        "SELECT xact_commit || ' committed, ' || xact_rollback || ' rolled back' \
         FROM pg_stat_database WHERE datname = current_database()",
    )?;
    Ok(StoreResults {
        samples,
        memory,
        families,
        fill_seconds,
        transactions: xacts.trim().to_owned(),
        command: command(families, s, &pg),
    })
}

/// Every load, round after round.
fn rounds(
    stage: &Stage,
    dir: &Path,
    s: &Settings,
    families: u64,
) -> Result<Vec<(Load, Vec<Sample>)>> {
    let mut samples: Vec<(Load, Vec<Sample>)> = Load::ALL.iter().map(|l| (*l, vec![])).collect();
    for round in 0..s.rounds {
        for (load, per) in &mut samples {
            let sample = measure(stage, *load, dir, s)?;
            eprintln!(
                "store round {} {}: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms, not 2xx: {}",
                round + 1,
                load.name(families),
                sample.rps,
                sample.p50_ms,
                sample.p99_ms,
                sample.bad
            );
            per.push(sample);
        }
    }
    Ok(samples)
}

/// One run of one load.
fn measure(stage: &Stage, load: Load, dir: &Path, s: &Settings) -> Result<Sample> {
    let d = format!("-d{}s", s.seconds);
    let Stage { pg_a, pg_b, .. } = stage;
    Ok(match load {
        Load::RedbEmpty | Load::RedbFull => {
            let (issuer, basic, name) = if load == Load::RedbEmpty {
                (&stage.empty, &stage.basic_empty, "redb-empty")
            } else {
                (&stage.full, &stage.basic_full, "redb-full")
            };
            let args = refresh_run(dir, name, &issuer.url, basic, 64, s.seconds)?;
            wrk_on(
                Some("1"),
                &args,
                &format!("{}/apiv2/oauth/token", issuer.url),
            )?
        }
        Load::PgHealth => wrk_on(
            None,
            &["-t1".into(), "-c64".into(), d.clone()],
            &format!("{}/healthz", pg_a.url),
        )?,
        Load::PgClientCredentials => wrk_on(
            None,
            &[
                "-t1".into(),
                "-c64".into(),
                d.clone(),
                "-s".into(),
                stage.cc.display().to_string(),
            ],
            &format!("{}/apiv2/oauth/token", pg_a.url),
        )?,
        Load::PgRefresh => pg_refresh(dir, pg_a, pg_b, &stage.basic_pg, s.seconds)?,
    })
}

/// How the store runs were made, for the report.
fn command(families: u64, s: &Settings, pg: &PgCluster) -> String {
    format!(
        "fill_families (release example) writes {families} families into the full store first; \
         redb: taskset -c 0 issuer serve (release, default options) per store; taskset -c 1 wrk \
         --latency -t64 -c64 -d{0}s -s refresh.lua (a fresh family per connection, each presents \
         its latest token); PostgreSQL {1}: a throwaway cluster (fsync and synchronous commit on, \
         SERIALIZABLE), two issuers, wrk -t32 -c32 -d{0}s against each at once; /healthz and \
         client_credentials: wrk -t1 -c64 -d{0}s against one issuer; nothing pinned",
        s.seconds,
        pg_version(pg)
    )
}

pub(super) fn rand_u128() -> Result<u128> {
    use std::io::Read;
    let mut b = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(u128::from_le_bytes(b))
}

fn pg_version(pg: &PgCluster) -> String {
    pg.psql("SHOW server_version")
        .map(|v| v.trim().to_owned())
        .unwrap_or_default()
}

/// The stores' targets: durable refresh rotations on redb, 64 clients: at least this many a
/// second…
const REDB_PER_SECOND: f64 = 20_000.0;
/// …with a p99 of at most this.
const REDB_P99_MS: f64 = 10.0;
/// redb's throughput with the full store over the empty one's: at least this.
const FULL_VS_EMPTY: f64 = 0.90;
/// Rotations a second through two issuers on one PostgreSQL, 64 clients: at least this many…
const POSTGRES_PER_SECOND: f64 = 5_000.0;
/// …with a p99 of at most this.
const POSTGRES_P99_MS: f64 = 25.0;

/// The Markdown section of the store runs.
pub(super) fn report(r: &StoreResults) -> Result<String> {
    let (empty, full) = (r.median(Load::RedbEmpty), r.median(Load::RedbFull));
    let (pg_rf, cc) = (
        r.median(Load::PgRefresh),
        r.median(Load::PgClientCredentials),
    );
    let full_vs_empty = r.paired(Load::RedbFull, Load::RedbEmpty);
    let cc_vs_health = r.paired(Load::PgClientCredentials, Load::PgHealth);
    let cc_target = super::targets::CLIENT_CREDENTIALS_VS_HEALTHZ;
    let mut out = String::new();
    writeln!(
        out,
        "### Stores: durable refresh rotations, PostgreSQL, memory\n"
    )?;
    writeln!(out, "| what | target | measured | |\n|---|---|---|---|")?;
    writeln!(
        out,
        "| redb, 64 clients | ≥ {}/s, p99 ≤ {REDB_P99_MS} ms | {:.0}/s, p99 {:.2} ms | {} |",
        thousands(REDB_PER_SECOND as u64),
        empty.rps,
        empty.p99_ms,
        mark(empty.rps >= REDB_PER_SECOND && empty.p99_ms <= REDB_P99_MS)
    )?;
    writeln!(
        out,
        "| redb with {} live families vs empty | ≥ {FULL_VS_EMPTY:.2} | {:.2} ({:.0}/s, p99 {:.2} ms) | {} |",
        r.families,
        full_vs_empty,
        full.rps,
        full.p99_ms,
        mark(full_vs_empty >= FULL_VS_EMPTY)
    )?;
    writeln!(
        out,
        "| PostgreSQL, two issuers, 64 clients | ≥ {}/s, p99 ≤ {POSTGRES_P99_MS} ms | {:.0}/s, p99 {:.2} ms | {} |",
        thousands(POSTGRES_PER_SECOND as u64),
        pg_rf.rps,
        pg_rf.p99_ms,
        mark(pg_rf.rps >= POSTGRES_PER_SECOND && pg_rf.p99_ms <= POSTGRES_P99_MS)
    )?;
    writeln!(
        out,
        "| client_credentials on PostgreSQL vs `/healthz` | ≥ {cc_target} | {:.2} ({:.0}/s) | {} |\n",
        cc_vs_health,
        cc.rps,
        mark(cc_vs_health >= cc_target)
    )?;
    writeln!(
        out,
        "| load | requests/s | p50 ms | p99 ms | requests |\n|---|---|---|---|---|"
    )?;
    for (load, _) in &r.samples {
        let x = r.median(*load);
        writeln!(
            out,
            "| {} | {:.0} | {:.3} | {:.3} | {} |",
            load.name(r.families),
            x.rps,
            x.p50_ms,
            x.p99_ms,
            x.requests
        )?;
    }
    writeln!(
        out,
        "\nEvery response was 2xx (the run fails otherwise). Filling the full store took {:.0} s. \
         PostgreSQL counted {} transactions over the whole run.\n",
        r.fill_seconds, r.transactions
    )?;
    Ok(out + &memory_and_command(r)?)
}

/// The issuers' memory, and how the runs were made.
fn memory_and_command(r: &StoreResults) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "| issuer | resident at start, MiB | resident after the runs, MiB | peak, MiB |\n|---|---|---|---|"
    )?;
    for (label, idle, rss, peak) in &r.memory {
        writeln!(
            out,
            "| {label} | {} | {} | {} |",
            idle / 1024,
            rss / 1024,
            peak / 1024
        )?;
    }
    writeln!(out, "\nCommand: `{}`.\n", r.command)?;
    Ok(out)
}
