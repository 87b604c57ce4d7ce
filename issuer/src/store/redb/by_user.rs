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

use super::journal::FamilyPage;
use super::sweep::Removed;
use super::{dec, RedbFile, FAMILY_RECORDS};
use crate::store::family::Family;
use crate::store::{FamilyFilter, StoreError};
use redb::{ReadableTable, TableDefinition, TableHandle, WriteTransaction};

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
        let (mut page, tx) = FamilyPage::begin(self, filter, now, |fam| fam.user == user)?;
        let index = tx.open_table(FAMILIES_BY_USER)?;
        let table = tx.open_table(FAMILY_RECORDS)?;
        let after = filter.after.unwrap_or_default();
        for r in index.range::<(&str, &[u8])>((user, after.as_slice())..)? {
            let (k, _) = r?;
            let (owner, id) = k.value();
            if owner != user {
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
            if page.next(id, stored)? {
                break;
            }
        }
        Ok(page.finish())
    }
}
