//! [`Audit`] for [`PgStore`].
//!
//! The audit trail on PostgreSQL: one row per event (`audit`), keyed by its time and a random
//! number (no sequence: CockroachDB's rules, and no counter row that every issuer's events would
//! contend on). Events of one second are read in the order of that number, not of recording.

use super::{int, serializable, PgStore};
use crate::store::audit::EncodedEvent;
use crate::store::{Audit, AuditEvent, AuditKey, AuditPage, AuditRead, StoreError};
use tokio_postgres::types::ToSql;

/// Records `events` in one statement.
pub(super) async fn record(store: &PgStore, events: &[EncodedEvent]) -> Result<(), StoreError> {
    if events.is_empty() {
        return Ok(());
    }
    let at: Vec<i64> = events.iter().map(|e| int(e.at())).collect();
    let ids: Vec<i64> = events.iter().map(|_| rand::random::<i64>()).collect();
    let records: Vec<&str> = events.iter().map(EncodedEvent::text).collect();
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

/// The events of `page`, newest first: the key's index walked back from the cursor, at most
/// `page.scan` rows, the text compared in the statement.
pub(super) async fn page(store: &PgStore, page: &AuditPage<'_>) -> Result<AuditRead, StoreError> {
    let limit = i64::try_from(page.limit).unwrap_or(i64::MAX);
    let scan = i64::try_from(page.scan.max(1)).map_or(i64::MAX - 1, |s| s.min(i64::MAX - 1));
    let (one_more, last_read) = (scan + 1, scan - 1);
    let before = page
        .before
        .map_or((i64::MAX, i64::MAX), |k| (int(k.at), k.n));
    let conn = store.connection().await?;
    if page.text.is_none() && page.scan >= page.limit {
        // Every event read is found: the page is the first `limit` read.
        let select = conn.prepare_cached(SELECT_NEWEST).await?;
        let since = int(page.since);
        let rows = conn
            .query(&select, &[&before.0, &before.1, &since, &limit])
            .await?;
        return Ok(read_of(&rows, page.limit));
    }
    let select = conn.prepare_cached(SELECT_PAGE).await?;
    let params: [&(dyn ToSql + Sync); 8] = [
        &before.0,
        &before.1,
        &int(page.since),
        &page.text,
        &limit,
        &scan,
        &one_more,
        &last_read,
    ];
    let rows = conn.query(&select, &params).await?;
    Ok(read_of(&rows, page.limit))
}

/// The events of `rows` (time, id, record), and where the read stopped: the row without a
/// record, unless `limit` events were found.
fn read_of(rows: &[tokio_postgres::Row], limit: usize) -> AuditRead {
    let mut read = AuditRead::default();
    let mut last_found = None;
    let mut skipped = false;
    for r in rows {
        let key = AuditKey {
            at: super::uint(r.get(0)),
            n: r.get(1),
        };
        match r.get::<_, Option<&str>>(2) {
            None => read.stopped_at = Some(key),
            Some(record) => {
                last_found = Some(key);
                match serde_json::from_str::<AuditEvent>(record) {
                    Ok(e) => read.events.push((key, e)),
                    Err(_) => {
                        skipped = true;
                        tracing::error!(id = key.n, "an audit record does not decode");
                    }
                }
            }
        }
    }
    if read.events.len() >= limit {
        read.stopped_at = None;
    } else if skipped && read.stopped_at.is_none() {
        // The statement's limit counted what did not decode: go on below the last row, as if
        // the read had stopped there (at worst the next read is empty).
        read.stopped_at = last_found;
    }
    read
}

/// The events before `($1, $2)` at or after `$3`, newest first, at most `$4`.
const SELECT_NEWEST: &str = "SELECT at, id, record FROM audit \
     WHERE (at, id) < ($1, $2) AND at >= $3 ORDER BY at DESC, id DESC LIMIT $4";

/// The events before `($1, $2)` at or after `$3` whose record holds `$4` (lowercase; none: all),
/// newest first, at most `$5`, among the `$6` read back from the cursor; then, if `$7` (`$6` + 1)
/// are there, the key of the last one read (the `$8`th from 0) with no record.
const SELECT_PAGE: &str = "WITH w AS (SELECT at, id, record FROM audit \
       WHERE (at, id) < ($1, $2) AND at >= $3 ORDER BY at DESC, id DESC LIMIT $7), \
     found AS (SELECT at, id, record \
       FROM (SELECT * FROM w ORDER BY at DESC, id DESC LIMIT $6) scanned \
       WHERE ($4::text IS NULL OR strpos(lower(record), $4) > 0) \
       ORDER BY at DESC, id DESC LIMIT $5), \
     last AS (SELECT at, id FROM w ORDER BY at DESC, id DESC OFFSET $8 LIMIT 1) \
     (SELECT at, id, record FROM found ORDER BY at DESC, id DESC) \
     UNION ALL \
     (SELECT at, id, NULL FROM last WHERE (SELECT count(*) FROM w) = $7)";

/// Deletes the events recorded before `before`.
pub(super) async fn sweep(store: &PgStore, before: u64) -> Result<u64, StoreError> {
    let conn = store.connection().await?;
    Ok(conn
        .execute("DELETE FROM audit WHERE at < $1", &[&int(before)])
        .await?)
}

#[async_trait::async_trait]
impl Audit for PgStore {
    async fn record_audit(&self, events: Vec<EncodedEvent>) -> Result<(), StoreError> {
        record(self, &events).await
    }

    async fn audit_since(&self, since: u64, limit: usize) -> Result<Vec<AuditEvent>, StoreError> {
        self::since(self, since, limit).await
    }

    async fn audit_page(&self, page: &AuditPage<'_>) -> Result<AuditRead, StoreError> {
        self::page(self, page).await
    }

    async fn sweep_audit(&self, before: u64) -> Result<u64, StoreError> {
        sweep(self, before).await
    }
}
