//! `issuer keys ...`: the token signing keys. Most are admin commands, whose listing and filter
//! configuration are rendered here; `keys status` and `keys rotate --when-edges-ready` read the
//! edges' report (`edges.rs`), and `keys rotate-kek` re-seals the PostgreSQL store's secrets.

use super::audit;
use super::edges::{id, lacking, report, shown, shown_all, unlisted, Id, RECENT};
use crate::admin::{self, block_on, run_admin, run_on, unexpected};
use crate::data_dir::DataDir;
use crate::out;
use anyhow::bail;
use clap::{Args, Subcommand};
use issuer::admin::{Command, Reply};
use issuer::store::{KeyInfo, Location, HELD};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Seconds `keys rotate` publishes a key before it signs by default: five polls of an edge
/// with edge sync.
const ROTATE_DELAY: u64 = 5;

#[derive(Args)]
pub struct KeysArgs {
    #[command(subcommand)]
    cmd: KeysCmd,
    #[command(flatten)]
    dir: DataDir,
}

#[derive(Subcommand)]
pub enum KeysCmd {
    /// List signing keys and their state.
    List,
    /// Add a new signing key; older keys verify until they retire.
    Rotate {
        /// Publish the new key now (in `filter-config` and the edge feed) and start signing with
        /// it only after this many seconds, so verifiers learn it first. The default is enough for
        /// edges with edge sync (they poll each second); an Envoy with a static key ring needs
        /// time for a new configuration (for example 300). 0 switches at once.
        #[arg(long, default_value_t = ROTATE_DELAY, value_parser = clap::value_parser!(u64).range(0..=86_400))]
        delay: u64,
        /// Publish the new key and make it sign once every edge seen in the last 30 s holds it
        /// (see `issuer edges`), instead of after --delay.
        #[arg(long, conflicts_with = "delay")]
        when_edges_ready: bool,
        /// With --when-edges-ready: give up after this many seconds; the key then stays
        /// published, not signing, and the command fails naming the edges that lack it.
        #[arg(long, default_value_t = 300, requires = "when_edges_ready", value_parser = clap::value_parser!(u64).range(1..=86_400))]
        timeout: u64,
    },
    /// Whether every edge seen in the last 30 s holds the newest key (fails if not, naming them).
    Status,
    /// Retire a superseded key now, ahead of its time (a key thought compromised): it verifies
    /// nothing more, at the issuers at once and at edges with edge sync within a poll.
    Retire {
        /// The key id (see `keys list`).
        kid: u32,
    },
    /// Print the Envoy filter's plugin configuration (JSON) with the current key ring.
    FilterConfig {
        /// The origin clients call through that Envoy, `https://host[:port]` (the filter checks
        /// every DPoP proof's `htu` against it, never against the request's `Host` or scheme).
        #[arg(long, value_name = "URL")]
        public_origin: String,
        /// The access token lifetime the filter allows, seconds (`access_ttl` of the
        /// configuration file) [default: the one `issuer serve` last started with].
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400))]
        access_ttl: Option<u64>,
    },
    /// PostgreSQL store: re-seal every secret in the database under --kek-file, opening them with
    /// it or --previous-kek-file (run once every issuer has both; then drop the previous one).
    RotateKek,
}

/// Runs `issuer keys CMD`.
pub fn run(args: KeysArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    match args.cmd {
        KeysCmd::List => match run_on(dir, &Command::KeysList)? {
            Reply::Keys(keys) => out::text(&key_table(&keys)),
            other => Err(unexpected(&other)),
        },
        KeysCmd::Rotate {
            when_edges_ready: true,
            timeout,
            ..
        } => rotate_when_ready(dir, timeout),
        KeysCmd::Rotate { delay, .. } => run_admin(dir, Command::KeysRotate { delay }),
        KeysCmd::Status => status(dir),
        KeysCmd::Retire { kid } => run_admin(dir, Command::KeysRetire { kid }),
        KeysCmd::FilterConfig {
            public_origin,
            access_ttl,
        } => match run_on(dir, &Command::KeysFilterConfig)? {
            Reply::FilterConfig(mut config) => {
                if let Some(ttl) = access_ttl {
                    config["max_token_lifetime_seconds"] = ttl.into();
                }
                config["dpop"] = serde_json::json!({ "public_origin": public_origin });
                out::json_document(&config)
            }
            other => Err(unexpected(&other)),
        },
        KeysCmd::RotateKek => rotate_kek(dir),
    }
}

/// `keys list`: one line per key with its state and times.
fn key_table(keys: &[KeyInfo]) -> String {
    let mut out = String::from("KID  STATE      CREATED     SIGNS-FROM  SUPERSEDED  RETIRES\n");
    // A held key's times lie `HELD` ahead: it signs, and its predecessor stops, when promoted.
    let time = |t: u64| {
        if t >= HELD {
            "held".to_string()
        } else {
            t.to_string()
        }
    };
    let opt = |v: Option<u64>| v.map_or("-".to_string(), time);
    for k in keys {
        out += &format!(
            "{:<4} {:<10} {:<11} {:<11} {:<11} {}\n",
            k.kid,
            k.state,
            k.created_at,
            time(k.signs_from),
            opt(k.superseded_at),
            opt(k.retires_at)
        );
    }
    out
}

/// `keys rotate-kek`: re-seals the database's secrets under the current KEK.
fn rotate_kek(args: &DataDir) -> anyhow::Result<()> {
    let Location::Postgres(url) = args.location()? else {
        bail!("rotate-kek is for the PostgreSQL store; the embedded store keeps its keys in 0600 files");
    };
    let n = block_on(async {
        let store = args.connect(&url).await?;
        let n = store.reseal().await?;
        audit::record_rotate_kek(store.as_ref(), n).await?;
        anyhow::Ok(n)
    })??;
    println!("{n} secrets re-sealed under the new key-encryption key; --previous-kek-file is no longer needed");
    Ok(())
}

/// `issuer keys status`: whether every edge seen within [`RECENT`] holds the newest key; an
/// error (non-zero exit) naming those that do not, or the edge clients at their bound (whose new
/// edges are not listed).
pub fn status(dir: &DataDir) -> anyhow::Result<()> {
    let r = report(dir)?;
    out::line(&match (r.signing, r.next) {
        (Some(s), Some(n)) if r.held => {
            format!("key {s} signs; key {n} is published and held until every edge has it")
        }
        (Some(s), Some(n)) => format!("key {s} signs; key {n} is published and signs soon"),
        (Some(s), None) => format!("key {s} signs"),
        (None, _) => "no key signs".to_owned(),
    })?;
    let Some(kid) = r.newest() else {
        bail!("the store has no signing key");
    };
    let recent: Vec<_> = r.seen_within(RECENT).collect();
    out::line(&format!(
        "{} edges seen in the last {RECENT} s",
        recent.len()
    ))?;
    for e in &recent {
        let has = if e.report.kids.contains(&kid) {
            "has"
        } else {
            "lacks"
        };
        out::line(&format!("  {} {has} key {kid}", shown(&id(e))))?;
    }
    let missing = lacking(&r, kid, &BTreeSet::new());
    match (missing.is_empty(), unlisted(&r)) {
        (true, None) => Ok(()),
        (true, Some(why)) => bail!("{why}"),
        (false, why) => bail!(
            "{} edges lack key {kid}: {}{}",
            missing.len(),
            shown_all(&missing),
            why.map(|w| format!("; {w}")).unwrap_or_default()
        ),
    }
}

/// `issuer keys rotate --when-edges-ready`: publishes a held key (or takes the one held
/// already), waits until every edge seen within [`RECENT`] before or during the wait holds it,
/// then makes it sign. On timeout the key stays published and held, and the edges without it
/// are named in the error.
pub fn rotate_when_ready(dir: &DataDir, timeout: u64) -> anyhow::Result<()> {
    let before = report(dir)?;
    let waited: BTreeSet<Id> = before.seen_within(RECENT).map(id).collect();
    let kid = match run_on(dir, &Command::KeysPublish)? {
        Reply::Published(kid) => kid,
        other => return Err(unexpected(&other)),
    };
    out::line(&format!(
        "key {kid} is published (held, not signing); waiting up to {timeout} s for {} edges",
        waited.len()
    ))?;
    let deadline = Instant::now() + Duration::from_secs(timeout);
    let held_by = loop {
        // A store that fails a moment (a database failover) does not end the wait.
        let r = match report(dir) {
            Ok(r) => r,
            Err(e) if Instant::now() < deadline => {
                eprintln!("issuer: reading the edges failed, trying again: {e:#}");
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            Err(e) => return Err(e),
        };
        let missing = lacking(&r, kid, &waited);
        let unlisted = unlisted(&r);
        if missing.is_empty() && unlisted.is_none() {
            let mut all: BTreeSet<Id> = r.seen_within(RECENT).map(id).collect();
            all.extend(waited);
            break all;
        }
        if Instant::now() >= deadline {
            bail!(
                "timed out after {timeout} s: key {kid} stays published and does not sign; \
                 {} edges lack it: {}{} (run the command again to keep waiting, or `issuer keys \
                 rotate --delay 0` to switch regardless)",
                missing.len(),
                shown_all(&missing),
                unlisted.map(|w| format!("; {w}")).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    out::text(&admin::text(run_on(dir, &Command::KeysPromote { kid })?)?)?;
    out::line(&format!(
        "edges that held key {kid} first: {}",
        held_by.len()
    ))?;
    for e in held_by {
        out::line(&format!("  {}", shown(&e)))?;
    }
    Ok(())
}
