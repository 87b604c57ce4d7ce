//! [`Audit`] for [`RedbStore`].
//!
//! The audit trail in the redb file: entries keyed by (time, number), numbered from a counter in
//! the settings (`audit_seq`), so reading from a time is a range and the sweep deletes a prefix.

use super::{RedbFile, RedbStore, AUDIT, SETTINGS};
use crate::store::audit::EncodedEvent;
use crate::store::{Audit, AuditEvent, AuditKey, AuditPage, AuditRead, StoreError};
use redb::ReadableTable;

impl RedbFile {
    /// Records `events` in one write transaction.
    pub fn record_audit(&self, events: &[EncodedEvent]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        let tx = self.begin_write()?;
        {
            let mut settings = tx.open_table(SETTINGS)?;
            let mut seq = settings.get("audit_seq")?.map_or(0, |v| v.value());
            let mut t = tx.open_table(AUDIT)?;
            for e in events {
                seq += 1;
                t.insert((e.at(), seq), e.text().as_bytes())?;
            }
            settings.insert("audit_seq", seq)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Events at or after `since`, oldest first, at most `limit`.
    pub fn audit_since(&self, since: u64, limit: usize) -> Result<Vec<AuditEvent>, StoreError> {
        let tx = self.begin_read()?;
        let t = tx.open_table(AUDIT)?;
        let mut out = Vec::new();
        for r in t.range((since, 0)..)? {
            if out.len() >= limit {
                break;
            }
            let (k, v) = r?;
            match serde_json::from_slice::<AuditEvent>(v.value()) {
                Ok(e) => out.push(e),
                Err(_) => tracing::error!(seq = k.value().1, "an audit record does not decode"),
            }
        }
        Ok(out)
    }

    /// The events of `page`, newest first: the table walked back from the cursor, at most
    /// `page.scan` entries.
    pub fn audit_page(&self, page: &AuditPage<'_>) -> Result<AuditRead, StoreError> {
        let tx = self.begin_read()?;
        let t = tx.open_table(AUDIT)?;
        let end = page.before.map_or((u64::MAX, u64::MAX), |k| {
            (k.at, u64::try_from(k.n).unwrap_or(0))
        });
        let key = |(at, seq): (u64, u64)| AuditKey {
            at,
            n: i64::try_from(seq).unwrap_or(i64::MAX),
        };
        let mut read = AuditRead::default();
        let mut last = None;
        for (scanned, r) in t.range((page.since, 0)..end)?.rev().enumerate() {
            if read.events.len() >= page.limit {
                break;
            }
            let (k, v) = r?;
            if scanned >= page.scan {
                // One more is there: the next read goes on below the last one read.
                read.stopped_at = last;
                break;
            }
            last = Some(key(k.value()));
            let raw = v.value();
            let wanted = page
                .text
                .is_none_or(|t| String::from_utf8_lossy(raw).to_lowercase().contains(t));
            if !wanted {
                continue;
            }
            match serde_json::from_slice::<AuditEvent>(raw) {
                Ok(e) => read.events.push((key(k.value()), e)),
                Err(_) => tracing::error!(seq = k.value().1, "an audit record does not decode"),
            }
        }
        Ok(read)
    }

    /// Deletes the events recorded before `before`.
    pub fn sweep_audit(&self, before: u64) -> Result<u64, StoreError> {
        let tx = self.begin_write()?;
        let mut removed = 0;
        {
            let mut t = tx.open_table(AUDIT)?;
            let old: Vec<(u64, u64)> = t
                .range(..(before, 0))?
                .map(|r| r.map(|(k, _)| k.value()))
                .collect::<Result<_, _>>()?;
            for k in old {
                t.remove(k)?;
                removed += 1;
            }
        }
        tx.commit()?;
        Ok(removed)
    }
}

#[async_trait::async_trait]
impl Audit for RedbStore {
    async fn record_audit(&self, events: Vec<EncodedEvent>) -> Result<(), StoreError> {
        // A write with fsync: off the runtime's threads, as a revocation.
        let file = self.file.clone();
        let recorded = tokio::task::spawn_blocking(move || file.record_audit(&events))
            .await
            .map_err(|_| StoreError::Stopped("audit task"))?;
        self.watch(recorded)
    }

    async fn audit_since(&self, since: u64, limit: usize) -> Result<Vec<AuditEvent>, StoreError> {
        self.watch(self.file.audit_since(since, limit))
    }

    async fn audit_page(&self, page: &AuditPage<'_>) -> Result<AuditRead, StoreError> {
        self.watch(self.file.audit_page(page))
    }

    async fn sweep_audit(&self, before: u64) -> Result<u64, StoreError> {
        let file = self.file.clone();
        let swept = tokio::task::spawn_blocking(move || file.sweep_audit(before))
            .await
            .map_err(|_| StoreError::Stopped("audit task"))?;
        self.watch(swept)
    }
}
