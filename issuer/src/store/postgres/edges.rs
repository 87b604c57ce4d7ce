//! [`Edges`] for [`PgStore`].
//!
//! The edges' reports on PostgreSQL: one row per edge (`edges`, by edge client, node and VM),
//! written by whichever issuer served its poll, so every issuer lists the same edges
//! ([`crate::store::edges`]).

use super::{int, retrying, uint, PgStore};
use crate::store::edges::{folded, Admission, EdgeReport};
use crate::store::{Edges, StoreError};
use std::collections::HashMap;
use tokio_postgres::Transaction;

/// An edge's report; one that does not decode is logged and left out (it is rewritten at the
/// edge's next poll, or forgotten).
fn decode(report: &str) -> Option<EdgeReport> {
    let decoded = serde_json::from_str(report).ok();
    if decoded.is_none() {
        tracing::error!("an edge's report does not decode");
    }
    decoded
}

/// The room left in the registry, after the edges unseen since `forget_before` are dropped. Rows
/// of an issuer of an earlier version (no client) count against the whole registry only.
async fn room(tx: &Transaction<'_>, forget_before: u64) -> Result<Admission, StoreError> {
    tx.execute(
        "DELETE FROM edges WHERE last_seen < $1",
        &[&int(forget_before)],
    )
    .await?;
    let counts = tx
        .query(
            "SELECT coalesce(client, ''), count(*) FROM edges GROUP BY client",
            &[],
        )
        .await?;
    Ok(Admission::of_counts(counts.iter().map(|r| {
        let n: i64 = r.get(1);
        (
            r.get::<_, String>(0),
            usize::try_from(n).unwrap_or(usize::MAX),
        )
    })))
}

/// The reports stored of the edges of `keys`, locked, by key; with the rows of an issuer of an
/// earlier version among `legacy` (keyed by node and VM: no client), merged in and deleted, as
/// the edges they report are filed again under their keys.
async fn stored(
    tx: &Transaction<'_>,
    keys: &[String],
    legacy: &[String],
) -> Result<HashMap<String, EdgeReport>, StoreError> {
    let (mut stored, mut refiled) = (HashMap::<String, EdgeReport>::new(), Vec::new());
    for r in tx
        .query(
            "SELECT key, report, client IS NULL FROM edges \
             WHERE key = ANY($1) OR (client IS NULL AND key = ANY($2)) ORDER BY key FOR UPDATE",
            &[&keys, &legacy],
        )
        .await?
    {
        let Some(report) = decode(r.get(1)) else {
            continue;
        };
        let key = report.key();
        if r.get::<_, bool>(2) {
            if !keys.contains(&key) {
                continue;
            }
            refiled.push(r.get::<_, String>(0));
        }
        let report = match stored.remove(&key) {
            Some(other) => report.merged_over(&other),
            None => report,
        };
        stored.insert(key, report);
    }
    tx.execute(
        "DELETE FROM edges WHERE client IS NULL AND key = ANY($1)",
        &[&refiled],
    )
    .await?;
    Ok(stored)
}

/// The rows to write of `reports` (each merged over its stored report, a new one only if there
/// is room), as columns, and how many new edges were not recorded.
struct Rows {
    keys: Vec<String>,
    clients: Vec<String>,
    last_seen: Vec<i64>,
    reports: Vec<String>,
    refused: usize,
}

impl Rows {
    fn of(
        reports: &[EdgeReport],
        stored: &HashMap<String, EdgeReport>,
        mut room: Admission,
        forget_before: u64,
    ) -> Result<Self, StoreError> {
        let mut rows = Rows {
            keys: Vec::new(),
            clients: Vec::new(),
            last_seen: Vec::new(),
            reports: Vec::new(),
            refused: 0,
        };
        for report in reports {
            let key = report.key();
            let report = match stored.get(&key) {
                Some(older) => report.clone().merged_over(older),
                None if report.last_seen < forget_before => continue,
                None if room.admit(&report.client) => report.clone(),
                None => {
                    rows.refused += 1;
                    continue;
                }
            };
            rows.last_seen.push(int(report.last_seen));
            rows.clients.push(report.client.clone());
            rows.reports
                .push(serde_json::to_string(&report).map_err(|_| StoreError::Corrupt("edges"))?);
            rows.keys.push(key);
        }
        Ok(rows)
    }
}

#[async_trait::async_trait]
impl Edges for PgStore {
    async fn record_edges(
        &self,
        reports: Vec<EdgeReport>,
        forget_before: u64,
    ) -> Result<usize, StoreError> {
        let mut reports = reports;
        // One report per edge, in the order of their rows.
        reports.sort_by_key(EdgeReport::key);
        reports.dedup_by_key(|r| r.key());
        let keys: Vec<String> = reports.iter().map(EdgeReport::key).collect();
        let legacy: Vec<String> = reports
            .iter()
            .map(|r| format!("{}\n{}", r.node, r.vm))
            .collect();
        // READ COMMITTED (not the pool's SERIALIZABLE), one writer at a time (the row of
        // `edge_writes` locked): issuers that write reports at once wait for each other, instead
        // of one failing and retrying at every flush, and each counts what the others recorded.
        retrying!(self, |conn| {
            let tx = conn
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
                .start()
                .await?;
            tx.execute(
                "INSERT INTO edge_writes (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET id = 1",
                &[],
            )
            .await?;
            let room = room(&tx, forget_before).await?;
            let stored = stored(&tx, &keys, &legacy).await?;
            let rows = Rows::of(&reports, &stored, room, forget_before)?;
            tx.execute(
                "INSERT INTO edges (key, client, last_seen, report) \
                 SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) \
                 ON CONFLICT (key) DO UPDATE SET client = EXCLUDED.client, \
                 last_seen = EXCLUDED.last_seen, report = EXCLUDED.report",
                &[&rows.keys, &rows.clients, &rows.last_seen, &rows.reports],
            )
            .await?;
            tx.commit().await?;
            rows.refused
        })
    }

    async fn edges(&self) -> Result<Vec<EdgeReport>, StoreError> {
        retrying!(self, |conn| {
            let rows = conn
                .query("SELECT report, last_seen FROM edges", &[])
                .await?;
            let mut all = Vec::new();
            for r in rows {
                if let Some(mut report) = decode(r.get(0)) {
                    report.last_seen = uint(r.get(1));
                    all.push(report);
                }
            }
            folded(all)
        })
    }
}
