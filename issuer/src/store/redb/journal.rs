//! The rotation journal: how refresh family changes reach the disk without rewriting a random
//! B-tree leaf per change.
//!
//! A batch of refresh operations appends the final state of each family it changed to the
//! journal table (keyed by a growing sequence number, so appends land on the tree's right edge)
//! and commits once. The committed states are also kept in memory (the overlay), which every
//! lookup consults before the family table. Now and then (every [`MERGE_AT`] families or
//! [`MERGE_EVERY`], whichever comes first) the writer merges the overlay into the family table,
//! sorted by id, in one transaction that also empties the journal. On opening, and after the
//! database was reopened following a failed write, the journal is read back into the overlay, so
//! a crash between merges loses nothing that was committed. Sequence numbers are taken before a
//! commit, so a batch whose commit reported failure (it may still have reached the disk) and the
//! batches after it never share one: the journal's order is always the order of the changes.
//! (After the journal is emptied by a merge, numbering may start over.)
//!
//! The cost of a rotation thus no longer depends on how many families the store holds: the
//! commit a client waits for appends a few hundred bytes, and the merge writes each family's leaf
//! once per interval however often the family rotated in it.

use super::by_user::FAMILIES_BY_USER;
use super::{dec, RedbFile, FAMILY_JOURNAL, FAMILY_RECORDS};
use crate::store::family::Family;
use crate::store::StoreError;
use redb::{ReadableTable, ReadableTableMetadata, WriteTransaction};
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{MutexGuard, PoisonError};
use std::time::Duration;

/// Families in the overlay that trigger a merge.
pub const MERGE_AT: usize = 4096;
/// The longest a family change waits in the overlay before it is merged.
pub const MERGE_EVERY: Duration = Duration::from_secs(1);

/// Families changed since the last merge, by id, and the next journal sequence number.
#[derive(Debug, Default)]
pub struct Overlay {
    pub(super) families: HashMap<[u8; 16], Family>,
    next_seq: u64,
}

/// A family change as the journal stores it: the id, then the record.
fn entry(id: &[u8; 16], fam: &Family) -> Vec<u8> {
    let mut v = id.to_vec();
    v.extend_from_slice(&super::enc(fam));
    v
}

impl RedbFile {
    pub(super) fn overlay(&self) -> MutexGuard<'_, Overlay> {
        self.overlay.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the journal back into the overlay (at open, and by the writer after a reopen). An
    /// entry that does not decode is logged and skipped: its family keeps its previous state,
    /// and a token of the lost generation is refused as unknown.
    pub fn load_journal(&self) -> Result<(), StoreError> {
        let mut overlay = self.overlay();
        let tx = self.begin_read()?;
        let journal = tx.open_table(FAMILY_JOURNAL)?;
        let mut loaded = Overlay::default();
        for r in journal.iter()? {
            let (seq, v) = r?;
            loaded.next_seq = seq.value() + 1;
            let v = v.value();
            let decoded = v
                .get(..16)
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .and_then(|id| Some((id, serde_json::from_slice::<Family>(&v[16..]).ok()?)));
            match decoded {
                Some((id, fam)) => {
                    loaded.families.insert(id, fam);
                }
                None => {
                    tracing::error!(seq = seq.value(), "a refresh journal entry does not decode")
                }
            }
        }
        *overlay = loaded;
        self.journal_stale.store(false, Ordering::Release);
        Ok(())
    }

    /// True when the database was reopened since the journal was last read: the writer reads it
    /// again before its next batch.
    pub fn journal_stale(&self) -> bool {
        self.journal_stale.load(Ordering::Acquire)
    }

    /// The committed state of family `id` as of `tx` (the writer's own transaction): the overlay
    /// first, then the table.
    pub(super) fn committed_family(
        &self,
        tx: &WriteTransaction,
        id: &[u8; 16],
    ) -> Result<Option<Family>, StoreError> {
        if let Some(fam) = self.overlay().families.get(id) {
            return Ok(Some(fam.clone()));
        }
        tx.open_table(FAMILY_RECORDS)?
            .get(id.as_slice())?
            .map(|v| dec::<Family>(v.value(), "refresh_family_records"))
            .transpose()
    }

    /// The committed state of family `id`, for readers outside the writer. The overlay stays
    /// locked until the read transaction has begun, so a merge cannot slip between the two looks.
    pub(super) fn read_family(&self, id: &[u8; 16]) -> Result<Option<Family>, StoreError> {
        let tx = {
            let overlay = self.overlay();
            if let Some(fam) = overlay.families.get(id) {
                return Ok(Some(fam.clone()));
            }
            self.begin_read()?
        };
        tx.open_table(FAMILY_RECORDS)?
            .get(id.as_slice())?
            .map(|v| dec::<Family>(v.value(), "refresh_family_records"))
            .transpose()
    }

    /// Appends the changes of a batch to the journal in `tx`, which the caller then commits.
    pub(super) fn journal_in(
        &self,
        tx: &WriteTransaction,
        changed: &HashMap<[u8; 16], Family>,
    ) -> Result<(), StoreError> {
        let first = {
            let mut overlay = self.overlay();
            let first = overlay.next_seq;
            overlay.next_seq += changed.len() as u64;
            first
        };
        let mut journal = tx.open_table(FAMILY_JOURNAL)?;
        for (seq, (id, fam)) in (first..).zip(changed) {
            journal.insert(seq, entry(id, fam).as_slice())?;
        }
        Ok(())
    }

    /// Makes a committed batch's changes visible in the overlay.
    pub(super) fn publish(&self, changed: HashMap<[u8; 16], Family>) {
        self.overlay().families.extend(changed);
    }

    /// True when the overlay holds enough to merge.
    pub fn merge_due(&self) -> bool {
        self.overlay().families.len() >= MERGE_AT
    }

    /// Merges the overlay into the family table (and its new families into the index by user)
    /// and empties the journal, in one transaction.
    /// Returns how many families were written. Only the thread that writes refresh state may
    /// call this while the store serves (a batch committed but not yet published must not be
    /// dropped from the journal).
    pub fn merge(&self) -> Result<usize, StoreError> {
        // A copy: readers keep reading the overlay while the merge writes and commits. Nothing
        // else changes the overlay meanwhile (only this thread publishes).
        let mut families: Vec<([u8; 16], Family)> = {
            let overlay = self.overlay();
            overlay
                .families
                .iter()
                .map(|(id, fam)| (*id, fam.clone()))
                .collect()
        };
        if families.is_empty() {
            return Ok(0);
        }
        families.sort_unstable_by_key(|f| f.0);
        let tx = self.begin_write()?;
        {
            let mut table = tx.open_table(FAMILY_RECORDS)?;
            let mut by_user = tx.open_table(FAMILIES_BY_USER)?;
            for (id, fam) in &families {
                let new = table
                    .insert(id.as_slice(), super::enc(fam).as_slice())?
                    .is_none();
                if new {
                    by_user.insert((fam.user.as_str(), id.as_slice()), ())?;
                }
            }
        }
        // Dropping the table frees its pages at once; it is created again, empty.
        tx.delete_table(FAMILY_JOURNAL)?;
        tx.open_table(FAMILY_JOURNAL)?;
        tx.commit()?;
        self.overlay().families.clear();
        Ok(families.len())
    }

    /// How many families are on record (live, revoked or expired but not yet swept).
    pub fn family_count(&self) -> Result<u64, StoreError> {
        self.merge()?;
        let tx = self.begin_read()?;
        Ok(tx.open_table(FAMILY_RECORDS)?.len()?)
    }
}
