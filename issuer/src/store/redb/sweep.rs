//! [`Sweep`] for [`RedbStore`].
//!
//! The sweep: deletes refresh state whose lifetime has passed, and retired keys.
//!
//! It runs on the writer thread (so it never races the journal, see [`super::journal`]) and must
//! not hold that thread for long whatever the size of the store, so each pass looks at a bounded
//! slice of the family table ([`SWEEP_SLICE`] records), resuming where the previous pass
//! stopped and wrapping at the end. A store of N families is swept through every
//! N / [`SWEEP_SLICE`] passes; what has expired but is not yet swept is refused all the same,
//! as expiry is checked on every use.

use super::{RedbFile, RedbStore, FAMILY_RECORDS, KEYS};
use crate::store::family::Family;
use crate::store::keys::KeyRecord;
use crate::store::{KeyState, StoreError, Sweep};
use redb::{ReadableTable, TableDefinition, WriteTransaction};
use std::sync::PoisonError;

/// Records of the family table looked at per pass.
pub const SWEEP_SLICE: usize = 25_000;

/// Where the next pass resumes in the family table (`None`: at the start).
#[derive(Debug, Default)]
pub struct Cursors {
    families: Option<Vec<u8>>,
}

type Bytes = TableDefinition<'static, &'static [u8], &'static [u8]>;

/// Records taken out of a table: each key and value.
pub(super) type Removed = Vec<(Vec<u8>, Vec<u8>)>;

/// Deletes, among up to `limit` records of `table` from `cursor` on (wrapping once), those whose
/// `expiry` has passed, and returns them (key and value). Records that do not decode are kept
/// (and fail their own requests).
fn sweep_slice(
    tx: &WriteTransaction,
    table: Bytes,
    cursor: &mut Option<Vec<u8>>,
    limit: usize,
    now: u64,
    expiry: impl Fn(&[u8]) -> Option<u64>,
) -> Result<Removed, StoreError> {
    let mut t = tx.open_table(table)?;
    let mut seen = 0;
    let mut expired = Vec::new();
    let mut last = None;
    let start = cursor.take();
    {
        let after = match &start {
            Some(k) => t.range::<&[u8]>(k.as_slice()..)?,
            None => t.range::<&[u8]>(..)?,
        };
        let before = match &start {
            Some(k) => Some(t.range::<&[u8]>(..k.as_slice())?),
            None => None,
        };
        for r in after.chain(before.into_iter().flatten()) {
            if seen == limit {
                break;
            }
            let (k, v) = r?;
            seen += 1;
            last = Some(k.value().to_vec());
            if expiry(v.value()).is_some_and(|at| at <= now) {
                expired.push((k.value().to_vec(), v.value().to_vec()));
            }
        }
    }
    // A full slice stops somewhere inside the table: the next pass resumes just after it.
    if seen == limit {
        *cursor = last.map(|mut k| {
            k.push(0);
            k
        });
    }
    for (k, _) in &expired {
        t.remove(k.as_slice())?;
    }
    Ok(expired)
}

impl RedbFile {
    /// One sweep pass at `now`: the overlay merged first (so the sweep sees every family), then
    /// a slice of the family table and every retired key. Returns how many records went. Only
    /// the writer thread may call this while the store serves.
    pub fn sweep(&self, now: u64) -> Result<u64, StoreError> {
        self.sweep_with(now, SWEEP_SLICE)
    }

    pub(super) fn sweep_with(&self, now: u64, limit: usize) -> Result<u64, StoreError> {
        let ttl = self.access_ttl()?;
        self.merge()?;
        let mut cursors = self.cursors.lock().unwrap_or_else(PoisonError::into_inner);
        let tx = self.begin_write()?;
        let gone = sweep_slice(
            &tx,
            FAMILY_RECORDS,
            &mut cursors.families,
            limit,
            now,
            |v| {
                serde_json::from_slice::<Family>(v)
                    .ok()
                    .map(|f| f.expires_at)
            },
        )?;
        super::by_user::unindex(&tx, &gone)?;
        let mut removed = gone.len() as u64 + Self::sweep_revocations_in(&tx, now)?;
        tx.open_table(KEYS)?.retain(|_, v| {
            let keep = serde_json::from_slice::<KeyRecord>(v)
                .map_or(true, |k| k.state(now, ttl) != KeyState::Retired);
            removed += u64::from(!keep);
            keep
        })?;
        tx.commit()?;
        Ok(removed)
    }
}

#[async_trait::async_trait]
impl Sweep for RedbStore {
    async fn sweep(&self, now: u64) -> Result<u64, StoreError> {
        let proofs = self.proofs.sweep(now);
        Ok(self.watch(self.writer.sweep(now).await)? + proofs)
    }
}
