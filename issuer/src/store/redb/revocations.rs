//! [`Revocations`] for [`RedbStore`].
//!
//! Revocations in the redb file: numbered entries (`revocations`), the last number given out in
//! the settings (`revocation_seq`, never lowered, so a number is never reused after a sweep).
//! Each entry carries a random stamp, the proof of the history a reader's cursor belongs to
//! (`shared::revocation`); the sweep never deletes the newest entry, so the cursor of a reader
//! that is up to date can always be checked.

use super::{enc, RedbFile, RedbStore, REVOCATIONS, SETTINGS};
use crate::store::revocation::REVOCATION_MARGIN;
use crate::store::revocation::{Cursor, Revocation, RevocationPage, Revoked};
use crate::store::{Revocations, StoreError, DEFAULT_ACCESS_TTL};
use redb::{ReadableTable, WriteTransaction};

impl RedbFile {
    /// Records `what` as revoked at `now` inside `tx`, in force for the access token lifetime
    /// (and the keys' margin for clocks) unless `until` says otherwise. Returns its number.
    pub(super) fn record_revocation_in(
        tx: &WriteTransaction,
        what: Revoked,
        now: u64,
        until: Option<u64>,
    ) -> Result<u64, StoreError> {
        let mut settings = tx.open_table(SETTINGS)?;
        let ttl = settings
            .get("access_ttl")?
            .map_or(DEFAULT_ACCESS_TTL, |v| v.value());
        let seq = settings.get("revocation_seq")?.map_or(0, |v| v.value()) + 1;
        settings.insert("revocation_seq", seq)?;
        let entry = Revocation {
            seq,
            what,
            at: now,
            until: until.unwrap_or(now + ttl + REVOCATION_MARGIN),
            stamp: Some(rand::random()),
        };
        tx.open_table(REVOCATIONS)?
            .insert(seq, enc(&entry).as_slice())?;
        Ok(seq)
    }

    /// Records one revocation in a transaction of its own.
    pub fn revoke(&self, what: Revoked, now: u64, until: Option<u64>) -> Result<u64, StoreError> {
        let tx = self.begin_write()?;
        let seq = Self::record_revocation_in(&tx, what, now, until)?;
        tx.commit()?;
        Ok(seq)
    }

    /// Records many revocations in one transaction (benchmark fixtures); returns the last number.
    pub fn revoke_many(
        &self,
        what: impl IntoIterator<Item = Revoked>,
        now: u64,
        until: Option<u64>,
    ) -> Result<u64, StoreError> {
        let tx = self.begin_write()?;
        let mut last = 0;
        for w in what {
            last = Self::record_revocation_in(&tx, w, now, until)?;
        }
        tx.commit()?;
        Ok(last)
    }

    /// Revocations numbered after `since` and in force at `now`, in order, with the highest
    /// number given out and the stamps of that entry and of entry `since` (one read
    /// transaction).
    pub fn revocations(
        &self,
        since: u64,
        now: u64,
        limit: usize,
    ) -> Result<RevocationPage, StoreError> {
        let tx = self.begin_read()?;
        let latest = tx
            .open_table(SETTINGS)?
            .get("revocation_seq")?
            .map_or(0, |v| v.value());
        let t = tx.open_table(REVOCATIONS)?;
        let stamp = |seq: u64| -> Result<Option<u64>, StoreError> {
            Ok(t.get(seq)?
                .and_then(|v| serde_json::from_slice::<Revocation>(v.value()).ok())
                .and_then(|e| e.stamp))
        };
        let (latest_stamp, since_stamp) = (stamp(latest)?, stamp(since)?);
        let mut entries = Vec::new();
        for r in t.range(since.saturating_add(1)..)? {
            if entries.len() >= limit {
                break;
            }
            let (seq, v) = r?;
            match serde_json::from_slice::<Revocation>(v.value()) {
                Ok(e) if e.until > now => entries.push(e),
                Ok(_) => {}
                Err(_) => tracing::error!(seq = seq.value(), "a revocation does not decode"),
            }
        }
        Ok(RevocationPage {
            entries,
            latest,
            latest_stamp,
            since_stamp,
        })
    }

    /// The highest number given out and its entry's stamp (one read transaction).
    pub fn latest_revocation(&self) -> Result<Cursor, StoreError> {
        let tx = self.begin_read()?;
        let seq = tx
            .open_table(SETTINGS)?
            .get("revocation_seq")?
            .map_or(0, |v| v.value());
        let stamp = tx
            .open_table(REVOCATIONS)?
            .get(seq)?
            .and_then(|v| serde_json::from_slice::<Revocation>(v.value()).ok())
            .and_then(|e| e.stamp);
        Ok(Cursor { seq, stamp })
    }

    /// Deletes revocations no longer in force, inside the sweep's transaction, except the newest:
    /// it stays as the proof of the cursor of every reader that is up to date.
    pub(super) fn sweep_revocations_in(tx: &WriteTransaction, now: u64) -> Result<u64, StoreError> {
        let latest = tx
            .open_table(SETTINGS)?
            .get("revocation_seq")?
            .map_or(0, |v| v.value());
        let mut removed = 0;
        tx.open_table(REVOCATIONS)?.retain(|seq, v| {
            let keep = seq == latest
                || serde_json::from_slice::<Revocation>(v).map_or(true, |e| e.until > now);
            removed += u64::from(!keep);
            keep
        })?;
        Ok(removed)
    }
}

#[async_trait::async_trait]
impl Revocations for RedbStore {
    async fn revoke(&self, what: Revoked, now: u64, until: Option<u64>) -> Result<u64, StoreError> {
        // A synchronous write with fsync, which also waits for the refresh writer's transaction:
        // off the runtime's threads.
        let file = self.file.clone();
        let recorded = tokio::task::spawn_blocking(move || file.revoke(what, now, until))
            .await
            .map_err(|_| StoreError::Stopped("revocation task"))?;
        self.watch(recorded)
    }

    async fn revocations(
        &self,
        since: u64,
        now: u64,
        limit: usize,
    ) -> Result<RevocationPage, StoreError> {
        self.watch(self.file.revocations(since, now, limit))
    }

    async fn latest_revocation(&self) -> Result<Cursor, StoreError> {
        self.watch(self.file.latest_revocation())
    }
}
