//! The refresh families of each user: an index of the family table by user and id, so that one
//! user's sessions (the admin API's `sessions?user=`) cost what they hold, not a walk of every
//! family.
//!
//! The index holds a key `(user, id)` for every family of [`FAMILY_RECORDS`], written in the
//! same transaction as the table: by the journal's merge for a family new to the table, and
//! taken out by the sweep with its family. A family's user never changes, so a rotation leaves
//! the index alone. The families still in the overlay (not yet merged) are read from it. The
//! index is not in a backup: a data dir without it (restored, or of an earlier version) gets it
//! built from the family table when it opens.

use super::sweep::Removed;
use super::{dec, RedbFile, FAMILY_RECORDS};
use crate::store::family::Family;
use crate::store::{FamilyFilter, StoreError};
use redb::{ReadableTable, TableDefinition, TableHandle, WriteTransaction};
use std::collections::BTreeMap;

/// `(user, family id)` for every family of [`FAMILY_RECORDS`].
pub(super) const FAMILIES_BY_USER: TableDefinition<(&str, &[u8]), ()> =
    TableDefinition::new("refresh_families_by_user");

/// Builds the index in `tx` from the family table if the database has none; true if it did.
pub(super) fn build_if_missing(tx: &WriteTransaction) -> Result<bool, StoreError> {
    let present = tx
        .list_tables()?
        .any(|t| t.name() == FAMILIES_BY_USER.name());
    if present {
        return Ok(false);
    }
    let families = tx.open_table(FAMILY_RECORDS)?;
    let mut index = tx.open_table(FAMILIES_BY_USER)?;
    for r in families.iter()? {
        let (k, v) = r?;
        let fam: Family = dec(v.value(), "refresh_family_records")?;
        index.insert((fam.user.as_str(), k.value()), ())?;
    }
    Ok(true)
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
    /// The page of `filter` of one user's families: the index's ids of `user` after
    /// `filter.after`, each in its state in the overlay or the table, and the overlay's families
    /// of that user not yet in the table merged in by id.
    pub(super) fn live_families_of(
        &self,
        user: &str,
        filter: &FamilyFilter<'_>,
        now: u64,
    ) -> Result<Vec<([u8; 16], Family)>, StoreError> {
        let after = filter.after.unwrap_or_default();
        let (mut overlay, tx) = {
            let overlay = self.overlay();
            let newer: BTreeMap<[u8; 16], Family> = overlay
                .families
                .iter()
                .filter(|(id, fam)| fam.user == user && filter.after.is_none_or(|a| **id > a))
                .map(|(id, fam)| (*id, fam.clone()))
                .collect();
            (newer, self.begin_read()?)
        };
        let mut page = Vec::new();
        let mut take = |id: [u8; 16], fam: Family| {
            if filter.selects(&id, &fam, now) {
                page.push((id, fam));
            }
            page.len() >= filter.limit
        };
        let index = tx.open_table(FAMILIES_BY_USER)?;
        let table = tx.open_table(FAMILY_RECORDS)?;
        for r in index.range::<(&str, &[u8])>((user, after.as_slice())..)? {
            let (k, _) = r?;
            let (owner, id) = k.value();
            if owner != user {
                break;
            }
            let Ok(id) = <[u8; 16]>::try_from(id) else {
                continue;
            };
            if filter.after.is_some_and(|a| id <= a) {
                continue;
            }
            while let Some(entry) = overlay.first_entry().filter(|e| *e.key() < id) {
                let (oid, fam) = entry.remove_entry();
                if take(oid, fam) {
                    return Ok(page);
                }
            }
            let fam = match overlay.remove(&id) {
                Some(fam) => fam,
                None => match table.get(id.as_slice())? {
                    Some(v) => dec::<Family>(v.value(), "refresh_family_records")?,
                    None => continue,
                },
            };
            if take(id, fam) {
                return Ok(page);
            }
        }
        for (id, fam) in overlay {
            if take(id, fam) {
                break;
            }
        }
        Ok(page)
    }
}
