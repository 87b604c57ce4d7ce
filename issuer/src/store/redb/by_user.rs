//! The refresh families of each user: an index of the family table by user and id, through
//! which every page of the admin API's sessions is read (all of them, one user's, those of the
//! users whose name starts with a text), so that a page costs what it holds, not a walk of every
//! family.
//!
//! The index holds a key `(user, id)` for every family of [`FAMILY_RECORDS`], written in the
//! same transaction as the table: by the journal's merge for a family new to the table, and
//! taken out by the sweep with its family. A family's user never changes, so a rotation leaves
//! the index alone. The families still in the overlay (not yet merged) are read from it and
//! merged into the walk in the same order ([`FamilyPage`]). The index is not in a backup: a
//! data dir without it (restored, or of an earlier version), or with one that does not hold a
//! key for each family (an earlier version served it since), gets it built from the family table
//! when it opens ([`build_unless_whole`]).

use super::sweep::Removed;
use super::{dec, RedbFile, FAMILY_RECORDS};
use crate::store::family::Family;
use crate::store::{FamilyFilter, FamilyKey, StoreError};
use redb::{
    ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition, TableHandle,
    WriteTransaction,
};
use std::collections::BTreeMap;

/// `(user, family id)` for every family of [`FAMILY_RECORDS`].
pub(super) const FAMILIES_BY_USER: TableDefinition<(&str, &[u8]), ()> =
    TableDefinition::new("refresh_families_by_user");

/// Builds the index in `tx` from the family table unless it holds a key for each family and no
/// other ([`whole`]); true if it did. A data dir restored from a backup has no index; one that
/// an earlier version served after this one has families that version added and did not index,
/// or swept and left in the index. A family record that does not decode has no user to be
/// indexed by: it is left out, logged, and the index is built again at each open while it lasts.
pub(super) fn build_unless_whole(tx: &WriteTransaction) -> Result<bool, StoreError> {
    let present = tx
        .list_tables()?
        .any(|t| t.name() == FAMILIES_BY_USER.name());
    if present {
        if whole(tx)? {
            return Ok(false);
        }
        tx.delete_table(FAMILIES_BY_USER)?;
    }
    let families = tx.open_table(FAMILY_RECORDS)?;
    let mut index = tx.open_table(FAMILIES_BY_USER)?;
    for r in families.iter()? {
        let (k, v) = r?;
        match dec::<Family>(v.value(), "refresh_family_records") {
            Ok(fam) => {
                index.insert((fam.user.as_str(), k.value()), ())?;
            }
            Err(_) => tracing::warn!(
                family = hex::encode(k.value()),
                "a refresh family record does not decode: left out of the sessions index"
            ),
        }
    }
    Ok(true)
}

/// Whether the index holds a key for each family of the table and no other: as many keys, and
/// the same ids by an order-free digest of them (each id hashed, the hashes combined by XOR), so
/// families added and as many swept behind its back do not pass for it. Reads every key of
/// both tables, none of the records.
fn whole(tx: &WriteTransaction) -> Result<bool, StoreError> {
    let families = tx.open_table(FAMILY_RECORDS)?;
    let index = tx.open_table(FAMILIES_BY_USER)?;
    if families.len()? != index.len()? {
        return Ok(false);
    }
    let digest = |id: &[u8]| {
        let mut h = std::hash::DefaultHasher::new();
        std::hash::Hasher::write(&mut h, id);
        std::hash::Hasher::finish(&h)
    };
    let mut table = 0;
    for r in families.iter()? {
        table ^= digest(r?.0.value());
    }
    let mut indexed = 0;
    for r in index.iter()? {
        indexed ^= digest(r?.0.value().1);
    }
    Ok(table == indexed)
}

/// Takes out of the index in `tx` the families `removed` (their ids and stored records), which
/// left the table.
pub(super) fn unindex(tx: &WriteTransaction, removed: &Removed) -> Result<(), StoreError> {
    let mut index = tx.open_table(FAMILIES_BY_USER)?;
    for (id, v) in removed {
        // A record that does not decode has no user to find it by; the page skips an id whose
        // family is gone.
        if let Ok(fam) = dec::<Family>(v, "refresh_family_records") {
            index.remove((fam.user.as_str(), id.as_slice()))?;
        }
    }
    Ok(())
}

impl RedbFile {
    /// The page of `filter`: the index's keys from [`FamilyFilter::start`] on while their user
    /// is among the owners, each family in its state in the overlay or the table, with the
    /// overlay's families not yet in the table merged in by user and id.
    pub(super) fn live_families(
        &self,
        filter: &FamilyFilter<'_>,
        now: u64,
    ) -> Result<Vec<([u8; 16], Family)>, StoreError> {
        if filter.limit == 0 {
            return Ok(Vec::new());
        }
        let (mut page, tx) = FamilyPage::begin(self, filter, now)?;
        let index = tx.open_table(FAMILIES_BY_USER)?;
        let table = tx.open_table(FAMILY_RECORDS)?;
        let start = filter.start();
        for r in index.range::<(&str, &[u8])>((start.user, start.id.as_slice())..)? {
            let (k, _) = r?;
            let (user, id) = k.value();
            if !filter.owners.hold(user) {
                break;
            }
            let Ok(id) = <[u8; 16]>::try_from(id) else {
                continue;
            };
            let stored = || {
                table
                    .get(id.as_slice())?
                    .map(|v| dec::<Family>(v.value(), "refresh_family_records"))
                    .transpose()
            };
            if page.next(FamilyKey { user, id }, stored)? {
                break;
            }
        }
        Ok(page.finish())
    }
}

/// A page of a [`FamilyFilter`], filled in the order of the index's keys (user, then id) from
/// its records, each replaced by its state in the overlay, with the overlay's families not yet in
/// the table merged in by key.
struct FamilyPage<'f> {
    /// The overlay's selected families after the filter's cursor, as they were when the read
    /// began, by user and id.
    newer: BTreeMap<(String, [u8; 16]), Family>,
    filter: &'f FamilyFilter<'f>,
    now: u64,
    page: Vec<([u8; 16], Family)>,
}

impl<'f> FamilyPage<'f> {
    /// An empty page of `filter` at `now`, with the overlay's families of its owners, and a read
    /// transaction begun under the overlay's lock, so that the two agree.
    fn begin(
        file: &RedbFile,
        filter: &'f FamilyFilter<'f>,
        now: u64,
    ) -> Result<(Self, ReadTransaction), StoreError> {
        let overlay = file.overlay();
        let newer = overlay
            .families
            .iter()
            .filter(|(id, fam)| {
                let key = FamilyKey {
                    user: &fam.user,
                    id: **id,
                };
                filter.owners.hold(&fam.user) && filter.after_cursor(key)
            })
            .map(|(id, fam)| ((fam.user.clone(), *id), fam.clone()))
            .collect();
        let tx = file.begin_read()?;
        let page = Self {
            newer,
            filter,
            now,
            page: Vec::new(),
        };
        Ok((page, tx))
    }

    /// Takes the overlay's families before `key`, then `key`'s own (the next of the walk): its
    /// state in the overlay, else what `stored` reads (`None`: nothing to take). True once the
    /// page is full.
    fn next(
        &mut self,
        key: FamilyKey<'_>,
        stored: impl FnOnce() -> Result<Option<Family>, StoreError>,
    ) -> Result<bool, StoreError> {
        if !self.filter.after_cursor(key) {
            return Ok(false);
        }
        while let Some(entry) = self
            .newer
            .first_entry()
            .filter(|e| (e.key().0.as_str(), e.key().1) < (key.user, key.id))
        {
            let ((_, oid), fam) = entry.remove_entry();
            if self.take(oid, fam) {
                return Ok(true);
            }
        }
        let newer = self
            .newer
            .first_entry()
            .filter(|e| (e.key().0.as_str(), e.key().1) == (key.user, key.id));
        let fam = match newer {
            Some(entry) => entry.remove(),
            None => match stored()? {
                Some(fam) => fam,
                None => return Ok(false),
            },
        };
        Ok(self.take(key.id, fam))
    }

    /// The page: as it is once full, else with the overlay's families after the walk's last key
    /// taken in.
    fn finish(mut self) -> Vec<([u8; 16], Family)> {
        if self.page.len() >= self.filter.limit {
            return self.page;
        }
        for ((_, id), fam) in std::mem::take(&mut self.newer) {
            if self.take(id, fam) {
                break;
            }
        }
        self.page
    }

    /// Keeps `fam` if the filter selects it; true once the page is full.
    fn take(&mut self, id: [u8; 16], fam: Family) -> bool {
        if self.filter.selects(&fam, self.now) {
            self.page.push((id, fam));
        }
        self.page.len() >= self.filter.limit
    }
}
