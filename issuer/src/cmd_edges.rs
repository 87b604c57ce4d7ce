//! `issuer edges`, `issuer keys status` and `issuer keys rotate --when-edges-ready`: which edge
//! holds which keys and revocations, and a rotation that waits until every edge holds the new
//! key before it signs with it.

use crate::DataDir;
use crate::{cmd_admin, out};
use anyhow::{bail, Context as _};
use issuer::admin::{Command, EdgeRow, EdgesReport};
use issuer::display;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// An edge counts as running, and a rotation waits for it, if it polled within this many seconds.
pub const RECENT: u64 = 30;

/// The store's report of the edges and keys.
fn report(dir: &DataDir) -> anyhow::Result<EdgesReport> {
    let json = cmd_admin::run(&dir.location()?, &dir.pg_files(), &Command::Edges)?;
    serde_json::from_str(&json).context("reading the edges' report")
}

fn name(e: &EdgeRow) -> String {
    format!("{}/{}", e.report.node, e.report.vm)
}

/// `issuer edges [--json]`: every edge the store holds.
pub fn list(dir: &DataDir, json: bool) -> anyhow::Result<()> {
    let r = report(dir)?;
    let newest = r.newest();
    if json {
        for e in &r.edges {
            let mut v = serde_json::to_value(e)?;
            v["holds_newest_key"] = newest.is_some_and(|k| e.report.kids.contains(&k)).into();
            out::json_line(&v.to_string())?;
        }
        return Ok(());
    }
    out::line("NODE/VM                          CLIENT        SEEN  KEYS              NEWEST  CURSOR  BEHIND  LAG")?;
    for e in &r.edges {
        let holds = match newest {
            Some(k) if e.report.kids.contains(&k) => format!("has {k}"),
            Some(k) => format!("no {k}"),
            None => "-".into(),
        };
        out::line(&format!(
            "{:<32} {:<13} {:>4}s {:<17} {:<7} {:>6} {:>7} {:>4}s",
            display::text(&name(e)),
            display::text(&e.report.client),
            r.now.saturating_sub(e.report.last_seen),
            display::text(e.report.keys_version.as_deref().unwrap_or("-")),
            holds,
            e.report.cursor,
            e.behind,
            e.lag_seconds
        ))?;
    }
    Ok(())
}

/// The edges seen within [`RECENT`] of the report, or named in `also` and not replaced since,
/// that do not hold `kid`.
fn lacking(r: &EdgesReport, kid: u32, also: &BTreeSet<String>) -> Vec<String> {
    let mut wanted: BTreeSet<String> = r.seen_within(RECENT).map(name).collect();
    wanted.extend(also.iter().cloned());
    wanted
        .into_iter()
        .filter(|n| {
            !r.edges
                .iter()
                .any(|e| &name(e) == n && (e.report.kids.contains(&kid) || r.replaced(e)))
        })
        .collect()
}

/// `issuer keys status`: whether every edge seen within [`RECENT`] holds the newest key; an
/// error (non-zero exit) naming those that do not.
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
        out::line(&format!("  {} {has} key {kid}", name(e)))?;
    }
    let missing = lacking(&r, kid, &BTreeSet::new());
    if !missing.is_empty() {
        bail!(
            "{} edges lack key {kid}: {}",
            missing.len(),
            missing.join(", ")
        );
    }
    Ok(())
}

/// `issuer keys rotate --when-edges-ready`: publishes a held key (or takes the one held
/// already), waits until every edge seen within [`RECENT`] before or during the wait holds it,
/// then makes it sign. On timeout the key stays published and held, and the edges without it
/// are named in the error.
pub fn rotate_when_ready(dir: &DataDir, timeout: u64) -> anyhow::Result<()> {
    let before = report(dir)?;
    let waited: BTreeSet<String> = before.seen_within(RECENT).map(name).collect();
    let published = cmd_admin::run(&dir.location()?, &dir.pg_files(), &Command::KeysPublish)?;
    let kid: u32 = published
        .trim()
        .parse()
        .context("reading the published key's id")?;
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
        if missing.is_empty() {
            let mut all: BTreeSet<String> = r.seen_within(RECENT).map(name).collect();
            all.extend(waited);
            break all;
        }
        if Instant::now() >= deadline {
            bail!(
                "timed out after {timeout} s: key {kid} stays published and does not sign; \
                 {} edges lack it: {} (run the command again to keep waiting, or `issuer keys \
                 rotate --delay 0` to switch regardless)",
                missing.len(),
                missing.join(", ")
            );
        }
        std::thread::sleep(Duration::from_secs(1));
    };
    out::text(&cmd_admin::run(
        &dir.location()?,
        &dir.pg_files(),
        &Command::KeysPromote { kid },
    )?)?;
    out::line(&format!(
        "edges that held key {kid} first: {}",
        held_by.len()
    ))?;
    for e in held_by {
        out::line(&format!("  {e}"))?;
    }
    Ok(())
}
