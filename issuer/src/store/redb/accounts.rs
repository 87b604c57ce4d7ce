//! [`Clients`] and [`Users`] for [`RedbStore`].
//!
//! Clients and users in the redb file: JSON records by name, through one set of helpers. A
//! change that takes tokens away (deactivating a client, disabling a user, a new password,
//! removal) records the revocation in the same transaction.

use super::{dec, enc, Records, RedbFile, RedbStore, CLIENT_RECORDS, USER_RECORDS};
use crate::store::revocation::Revoked;
use crate::store::{
    may_hold, ClientChange, ClientRecord, Clients, Listed, RecordFilter, StoreError, UserChange,
    UserRecord, Users,
};
use redb::ReadableTable;
use serde::{Deserialize, Serialize};
use std::ops::Bound;

impl RedbFile {
    fn record<T: for<'de> Deserialize<'de>>(
        &self,
        table: Records,
        name: &str,
    ) -> Result<Option<T>, StoreError> {
        let tx = self.begin_read()?;
        let t = tx.open_table(table.0)?;
        t.get(name)?.map(|v| dec(v.value(), table.1)).transpose()
    }

    fn records<T: for<'de> Deserialize<'de>>(
        &self,
        table: Records,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let tx = self.begin_read()?;
        let t = tx.open_table(table.0)?;
        t.iter()?
            .map(|r| {
                let (k, v) = r?;
                Ok((k.value().to_owned(), dec(v.value(), table.1)?))
            })
            .collect()
    }

    /// The records of `table` that `filter` selects, walked in the order of their keys from
    /// `filter.after` on until the page is full.
    fn records_page<T: for<'de> Deserialize<'de> + Listed>(
        &self,
        table: Records,
        filter: &RecordFilter<'_, T>,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let mut page = Vec::new();
        if filter.limit == 0 {
            return Ok(page);
        }
        let tx = self.begin_read()?;
        let t = tx.open_table(table.0)?;
        let from = filter.after.map_or(Bound::Unbounded, Bound::Excluded);
        for r in t.range::<&str>((from, Bound::Unbounded))? {
            let (k, v) = r?;
            let ruled_out = filter
                .text
                .is_some_and(|t| !k.value().to_lowercase().contains(t) && !may_hold(v.value(), t));
            if ruled_out {
                continue;
            }
            let rec: T = dec(v.value(), table.1)?;
            if filter.selects(k.value(), &rec) {
                page.push((k.value().to_owned(), rec));
                if page.len() >= filter.limit {
                    break;
                }
            }
        }
        Ok(page)
    }

    fn add_record<T: Serialize>(
        &self,
        table: Records,
        name: &str,
        rec: &T,
    ) -> Result<bool, StoreError> {
        let tx = self.begin_write()?;
        {
            let mut t = tx.open_table(table.0)?;
            if t.get(name)?.is_some() {
                return Ok(false);
            }
            t.insert(name, enc(rec).as_slice())?;
        }
        tx.commit()?;
        Ok(true)
    }

    fn update_record<T: Serialize + for<'de> Deserialize<'de>>(
        &self,
        table: Records,
        name: &str,
        f: impl FnOnce(&mut T),
        revokes: Option<Revoked>,
        now: u64,
    ) -> Result<bool, StoreError> {
        let tx = self.begin_write()?;
        {
            let mut t = tx.open_table(table.0)?;
            let Some(mut rec) = t
                .get(name)?
                .map(|v| dec::<T>(v.value(), table.1))
                .transpose()?
            else {
                return Ok(false);
            };
            f(&mut rec);
            t.insert(name, enc(&rec).as_slice())?;
        }
        if let Some(what) = revokes {
            Self::record_revocation_in(&tx, what, now, None)?;
        }
        tx.commit()?;
        Ok(true)
    }

    fn remove_record(
        &self,
        table: Records,
        name: &str,
        revokes: Revoked,
        now: u64,
    ) -> Result<bool, StoreError> {
        let tx = self.begin_write()?;
        let removed = tx.open_table(table.0)?.remove(name)?.is_some();
        if removed {
            Self::record_revocation_in(&tx, revokes, now, None)?;
        }
        tx.commit()?;
        Ok(removed)
    }

    /// The client with this id.
    pub fn client(&self, id: &str) -> Result<Option<ClientRecord>, StoreError> {
        self.record(CLIENT_RECORDS, id)
    }

    /// Every client, by id.
    pub fn clients(&self) -> Result<Vec<(String, ClientRecord)>, StoreError> {
        self.records(CLIENT_RECORDS)
    }

    /// A page of clients (see [`crate::store::Clients::clients_page`]).
    pub fn clients_page(
        &self,
        filter: &RecordFilter<'_, ClientRecord>,
    ) -> Result<Vec<(String, ClientRecord)>, StoreError> {
        self.records_page(CLIENT_RECORDS, filter)
    }

    /// Inserts a client; false if the id is taken.
    pub fn add_client(&self, id: &str, rec: &ClientRecord) -> Result<bool, StoreError> {
        self.add_record(CLIENT_RECORDS, id, rec)
    }

    /// Changes the client at `now` (see [`crate::store::Clients::update_client`]); false if
    /// there is none.
    pub fn update_client(
        &self,
        id: &str,
        change: ClientChange,
        now: u64,
    ) -> Result<bool, StoreError> {
        let revokes = change.revokes(id);
        self.update_record(CLIENT_RECORDS, id, |c| change.apply(c, now), revokes, now)
    }

    /// Removes a client at `now` and revokes its tokens; false if there was none.
    pub fn remove_client(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        self.remove_record(CLIENT_RECORDS, id, Revoked::Client { id: id.into() }, now)
    }

    /// The user with this name.
    pub fn user(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        self.record(USER_RECORDS, name)
    }

    /// Every user, by name.
    pub fn users(&self) -> Result<Vec<(String, UserRecord)>, StoreError> {
        self.records(USER_RECORDS)
    }

    /// A page of users (see [`crate::store::Users::users_page`]).
    pub fn users_page(
        &self,
        filter: &RecordFilter<'_, UserRecord>,
    ) -> Result<Vec<(String, UserRecord)>, StoreError> {
        self.records_page(USER_RECORDS, filter)
    }

    /// Inserts a user; false if the name is taken.
    pub fn add_user(&self, name: &str, rec: &UserRecord) -> Result<bool, StoreError> {
        self.add_record(USER_RECORDS, name, rec)
    }

    /// Changes the user at `now` (see [`crate::store::Users::update_user`]); false if there is
    /// none.
    pub fn update_user(
        &self,
        name: &str,
        change: &UserChange,
        now: u64,
    ) -> Result<bool, StoreError> {
        let revokes = change.revokes(name);
        self.update_record(USER_RECORDS, name, |u| change.apply(u), revokes, now)
    }

    /// Removes a user at `now` and revokes the user's tokens; false if there was none.
    pub fn remove_user(&self, name: &str, now: u64) -> Result<bool, StoreError> {
        self.remove_record(USER_RECORDS, name, Revoked::User { name: name.into() }, now)
    }
}

#[async_trait::async_trait]
impl Clients for RedbStore {
    async fn client(&self, id: &str) -> Result<Option<ClientRecord>, StoreError> {
        self.watch(self.file.client(id))
    }

    async fn clients(&self) -> Result<Vec<(String, ClientRecord)>, StoreError> {
        self.watch(self.file.clients())
    }

    async fn clients_page(
        &self,
        filter: &RecordFilter<'_, ClientRecord>,
    ) -> Result<Vec<(String, ClientRecord)>, StoreError> {
        self.watch(self.file.clients_page(filter))
    }

    async fn add_client(&self, id: &str, rec: &ClientRecord) -> Result<bool, StoreError> {
        self.watch(self.file.add_client(id, rec))
    }

    async fn update_client(
        &self,
        id: &str,
        change: ClientChange,
        now: u64,
    ) -> Result<bool, StoreError> {
        self.watch(self.file.update_client(id, change, now))
    }

    async fn remove_client(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        self.watch(self.file.remove_client(id, now))
    }
}

#[async_trait::async_trait]
impl Users for RedbStore {
    async fn user(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        self.watch(self.file.user(name))
    }

    async fn users(&self) -> Result<Vec<(String, UserRecord)>, StoreError> {
        self.watch(self.file.users())
    }

    async fn users_page(
        &self,
        filter: &RecordFilter<'_, UserRecord>,
    ) -> Result<Vec<(String, UserRecord)>, StoreError> {
        self.watch(self.file.users_page(filter))
    }

    async fn add_user(&self, name: &str, rec: &UserRecord) -> Result<bool, StoreError> {
        self.watch(self.file.add_user(name, rec))
    }

    async fn update_user(
        &self,
        name: &str,
        change: &UserChange,
        now: u64,
    ) -> Result<bool, StoreError> {
        self.watch(self.file.update_user(name, change, now))
    }

    async fn remove_user(&self, name: &str, now: u64) -> Result<bool, StoreError> {
        self.watch(self.file.remove_user(name, now))
    }
}
