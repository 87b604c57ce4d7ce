//! [`Audit`] for [`PgStore`].
//!
//! The audit trail on PostgreSQL: one row per event (`audit`), keyed by its time and a random
//! number (no sequence: CockroachDB's rules, and no counter row that every issuer's events would
//! contend on). Events of one second are read in the order of that number, not of recording.

use super::{int, serializable, PgStore};
use crate::store::{Audit, AuditEvent, StoreError};

/// Records `events` in one statement.
pub(super) async fn record(store: &PgStore, events: &[AuditEvent]) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let at: Vec<i64> = events.iter().map(|e| int(e.at)).collect();
    let ids: Vec<i64> = events.iter().map(|_| rand::random::<i64>()).collect();
    let records: Vec<String> = events.iter().map(super::to_json).collect();
    serializable!(store, |tx| {
        tx.execute(
            "INSERT INTO audit (at, id, record) \
             SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[])",
            &[&at, &ids, &records],
        )
        .await?;
    })?;
    Ok(())
}

/// Events at or after `since`, oldest first, at most `limit`.
pub(super) async fn since(
    store: &PgStore,
    since: u64,
    limit: usize,
) -> Result<Vec<AuditEvent>, StoreError> {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let conn = store.connection().await?;
    let rows = conn
        .query(
            "SELECT id, record FROM audit WHERE at >= $1 ORDER BY at, id LIMIT $2",
            &[&int(since), &limit],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let decoded = serde_json::from_str::<AuditEvent>(r.get(1)).ok();
            if decoded.is_none() {
                tracing::error!(id = r.get::<_, i64>(0), "an audit record does not decode");
            }
            decoded
        })
        .collect())
}

/// Deletes the events recorded before `before`.
pub(super) async fn sweep(store: &PgStore, before: u64) -> Result<u64, StoreError> {
    let conn = store.connection().await?;
    Ok(conn
        .execute("DELETE FROM audit WHERE at < $1", &[&int(before)])
        .await?)
}

#[async_trait::async_trait]
impl Audit for PgStore {
    async fn record_audit(&self, events: &[AuditEvent]) -> Result<(), StoreError> {
        record(self, events).await
    }

    async fn audit_since(&self, since: u64, limit: usize) -> Result<Vec<AuditEvent>, StoreError> {
        self::since(self, since, limit).await
    }

    async fn sweep_audit(&self, before: u64) -> Result<u64, StoreError> {
        sweep(self, before).await
    }
}
