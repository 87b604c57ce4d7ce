//! `issuer edges`: which edge holds which keys and revocations. The edges' report read here is
//! also what `issuer keys status` and `issuer keys rotate --when-edges-ready` (`keys.rs`) wait on.

use crate::admin::{run_on, unexpected};
use crate::data_dir::DataDir;
use crate::out;
use clap::Args;
use issuer::admin::{Command, EdgeRow, EdgesReport, Reply};
use issuer::display;
use issuer::store::edges::MAX_EDGES_PER_CLIENT;
use std::collections::BTreeSet;

#[derive(Args)]
pub struct EdgesArgs {
    /// One JSON object per edge and line.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    dir: DataDir,
}

/// An edge counts as running, and a rotation waits for it, if it polled within this many seconds.
pub const RECENT: u64 = issuer::admin::RECENT_EDGE_SECONDS;

/// The store's report of the edges and keys.
pub(super) fn report(dir: &DataDir) -> anyhow::Result<EdgesReport> {
    match run_on(dir, &Command::Edges)? {
        Reply::Edges(report) => Ok(report),
        other => Err(unexpected(&other)),
    }
}

/// An edge: its edge client, node and VM. Edges whose names join alike (node `a/b` and VM `c`,
/// node `a` and VM `b/c`) or of two clients are distinct edges.
pub(super) type Id = (String, String, String);

pub(super) fn id(e: &EdgeRow) -> Id {
    let r = &e.report;
    (r.client.clone(), r.node.clone(), r.vm.clone())
}

/// True for a name written as is: letters, digits and `-_.:@` only.
fn plain(name: &str) -> bool {
    let ok = |c: char| c.is_ascii_alphanumeric() || "-_.:@".contains(c);
    !name.is_empty() && name.chars().all(ok)
}

/// A name as written: as is if [`plain`], else quoted (`"a b"`).
fn quoted(name: &str) -> String {
    if plain(name) {
        name.to_owned()
    } else {
        format!("{name:?}")
    }
}

/// Node and VM as written: `node/vm`, or both quoted unless both are [`plain`] (`"a"/"b/c"`,
/// `"a/b"/"c"`), so no two edges are written alike.
fn node_vm(node: &str, vm: &str) -> String {
    if plain(node) && plain(vm) {
        format!("{node}/{vm}")
    } else {
        format!("{node:?}/{vm:?}")
    }
}

fn name(e: &EdgeRow) -> String {
    node_vm(&e.report.node, &e.report.vm)
}

/// An edge as the messages name it: node/VM and, in brackets, its edge client.
pub(super) fn shown((client, node, vm): &Id) -> String {
    format!("{} ({})", node_vm(node, vm), quoted(client))
}

pub(super) fn shown_all(ids: &[Id]) -> String {
    ids.iter().map(shown).collect::<Vec<_>>().join(", ")
}

/// Why a rotation may not trust the edges listed: the clients at their bound of edges, whose
/// new edges are not recorded; none if none is.
pub(super) fn unlisted(r: &EdgesReport) -> Option<String> {
    (!r.clients_at_bound.is_empty()).then(|| {
        let clients: Vec<_> = r.clients_at_bound.iter().map(|c| quoted(c)).collect();
        format!(
            "edge clients at their bound of {MAX_EDGES_PER_CLIENT} edges, whose new edges are \
             not recorded: {} (give each Envoy fleet an edge client of its own; deactivate one \
             that registers made-up edges)",
            clients.join(", ")
        )
    })
}

/// `issuer edges [--json]`: every edge the store holds.
pub fn run(args: &EdgesArgs) -> anyhow::Result<()> {
    let r = report(&args.dir)?;
    let newest = r.newest();
    if args.json {
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
            display::escape_text(&name(e)),
            display::escape_text(&e.report.client),
            r.now.saturating_sub(e.report.last_seen),
            display::escape_text(e.report.keys_version.as_deref().unwrap_or("-")),
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
pub(super) fn lacking(r: &EdgesReport, kid: u32, also: &BTreeSet<Id>) -> Vec<Id> {
    let mut wanted: BTreeSet<Id> = r.seen_within(RECENT).map(id).collect();
    wanted.extend(also.iter().cloned());
    wanted
        .into_iter()
        .filter(|n| {
            !r.edges
                .iter()
                .any(|e| &id(e) == n && (e.report.kids.contains(&kid) || r.replaced(e)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use issuer::store::EdgeReport;

    fn row(client: &str, node: &str, vm: &str, kids: &[u32]) -> EdgeRow {
        EdgeRow {
            report: EdgeReport {
                node: node.into(),
                vm: vm.into(),
                client: client.into(),
                first_seen: 100,
                last_seen: 100,
                keys_version: None,
                kids: kids.to_vec(),
                cursor: 0,
                latest: 0,
                synced_at: None,
            },
            behind: 0,
            lag_seconds: 0,
        }
    }

    fn edges(edges: Vec<EdgeRow>) -> EdgesReport {
        EdgesReport {
            now: 100,
            signing: Some(2),
            next: None,
            held: false,
            edges,
            clients_at_bound: Vec::new(),
        }
    }

    #[test]
    fn an_edge_that_holds_the_key_hides_no_other() {
        let r = edges(vec![
            row("edge", "a/b", "c", &[2]),
            row("edge", "a", "b/c", &[1]),
            row("fake", "n", "v", &[2]),
            row("edge", "n", "v", &[1]),
        ]);
        let missing = lacking(&r, 2, &BTreeSet::new());
        assert_eq!(shown_all(&missing), r#""a"/"b/c" (edge), n/v (edge)"#);
        // Another client's VM replaces none of this client's.
        let mut r = r;
        r.edges.push(EdgeRow {
            report: EdgeReport {
                first_seen: 101,
                last_seen: 101,
                ..row("fake", "a", "new", &[]).report
            },
            ..row("fake", "a", "new", &[])
        });
        assert_eq!(lacking(&r, 2, &BTreeSet::new()).len(), 3);
        assert_eq!(quoted("envoy-1.b:2@x"), "envoy-1.b:2@x");
        assert_eq!(quoted(r#"a "b""#), r#""a \"b\"""#);
    }

    #[test]
    fn a_client_at_its_bound_is_named() {
        let mut r = edges(vec![row("edge", "n", "v", &[2])]);
        assert_eq!(unlisted(&r), None);
        r.clients_at_bound = vec!["flood".into()];
        assert!(
            unlisted(&r).is_some_and(|w| w.contains("bound of 256 edges") && w.contains("flood"))
        );
    }
}
