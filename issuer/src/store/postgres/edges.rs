//! The edges' reports on PostgreSQL: one row per edge (`edges`), written by whichever issuer
//! served its poll, so every issuer lists the same edges ([`crate::store::edges`]).

use super::{int, retrying, uint, PgStore};
use crate::store::edges::{retained, EdgeReport, MAX_EDGES};
use crate::store::{Edges, StoreError};
use std::collections::HashMap;

/// An edge's report; one that does not decode is logged and left out (it is rewritten at the
/// edge's next poll, or forgotten).
fn decode(report: &str) -> Option<EdgeReport> {
    let decoded = serde_json::from_str(report).ok();
    if decoded.is_none() {
        tracing::error!("an edge's report does not decode");
    }
    decoded
}

#[async_trait::async_trait]
impl Edges for PgStore {
    async fn record_edges(
        &self,
        reports: Vec<EdgeReport>,
        forget_before: u64,
    ) -> Result<(), StoreError> {
        let mut reports = reports;
        // In the order of their rows, so two issuers lock the rows they share in the same order.
        reports.sort_by_key(EdgeReport::key);
        let keys: Vec<String> = reports.iter().map(EdgeReport::key).collect();
        // READ COMMITTED (not the pool's SERIALIZABLE) with the rows locked: issuers that write
        // reports of one edge at once wait for each other, instead of one failing and retrying
        // at every flush, and the pruning scans conflict with nothing.
        retrying!(self, |conn| {
            let tx = conn
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
                .start()
                .await?;
            let mut stored = HashMap::new();
            for r in tx
                .query(
                    "SELECT key, report FROM edges WHERE key = ANY($1) ORDER BY key FOR UPDATE",
                    &[&keys],
                )
                .await?
            {
                if let Some(report) = decode(r.get(1)) {
                    stored.insert(r.get::<_, String>(0), report);
                }
            }
            let (mut last_seen, mut rows) = (Vec::new(), Vec::new());
            for (report, key) in reports.iter().zip(&keys) {
                let report = match stored.get(key) {
                    Some(older) => report.clone().merged_over(older),
                    None => report.clone(),
                };
                last_seen.push(int(report.last_seen));
                rows.push(
                    serde_json::to_string(&report).map_err(|_| StoreError::Corrupt("edges"))?,
                );
            }
            tx.execute(
                "INSERT INTO edges (key, last_seen, report) \
                 SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[]) \
                 ON CONFLICT (key) DO UPDATE SET last_seen = EXCLUDED.last_seen, \
                 report = EXCLUDED.report",
                &[&keys, &last_seen, &rows],
            )
            .await?;
            tx.execute(
                "DELETE FROM edges WHERE last_seen < $1",
                &[&int(forget_before)],
            )
            .await?;
            tx.execute(
                "DELETE FROM edges WHERE key IN \
                 (SELECT key FROM edges ORDER BY last_seen DESC, key OFFSET $1)",
                &[&(MAX_EDGES as i64)],
            )
            .await?;
            tx.commit().await?;
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
            retained(&mut all, 0);
            all
        })
    }
}
