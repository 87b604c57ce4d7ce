//! Clients and users in the redb file: JSON records by name, through one set of helpers.

use super::{dec, enc, Records, RedbFile, CLIENT_RECORDS, USER_RECORDS};
use crate::store::{ClientRecord, StoreError, UserRecord};
use redb::ReadableTable;
use serde::{Deserialize, Serialize};

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
        tx.commit()?;
        Ok(true)
    }

    fn remove_record(&self, table: Records, name: &str) -> Result<bool, StoreError> {
        let tx = self.begin_write()?;
        let removed = tx.open_table(table.0)?.remove(name)?.is_some();
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

    /// Inserts a client; false if the id is taken.
    pub fn add_client(&self, id: &str, rec: &ClientRecord) -> Result<bool, StoreError> {
        self.add_record(CLIENT_RECORDS, id, rec)
    }

    /// Applies `f` to the client; false if there is no such client.
    pub fn update_client(
        &self,
        id: &str,
        f: impl FnOnce(&mut ClientRecord),
    ) -> Result<bool, StoreError> {
        self.update_record(CLIENT_RECORDS, id, f)
    }

    /// Removes a client; false if there was none.
    pub fn remove_client(&self, id: &str) -> Result<bool, StoreError> {
        self.remove_record(CLIENT_RECORDS, id)
    }

    /// The user with this name.
    pub fn user(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        self.record(USER_RECORDS, name)
    }

    /// Every user, by name.
    pub fn users(&self) -> Result<Vec<(String, UserRecord)>, StoreError> {
        self.records(USER_RECORDS)
    }

    /// Inserts a user; false if the name is taken.
    pub fn add_user(&self, name: &str, rec: &UserRecord) -> Result<bool, StoreError> {
        self.add_record(USER_RECORDS, name, rec)
    }

    /// Applies `f` to the user; false if there is no such user.
    pub fn update_user(
        &self,
        name: &str,
        f: impl FnOnce(&mut UserRecord),
    ) -> Result<bool, StoreError> {
        self.update_record(USER_RECORDS, name, f)
    }

    /// Removes a user; false if there was none.
    pub fn remove_user(&self, name: &str) -> Result<bool, StoreError> {
        self.remove_record(USER_RECORDS, name)
    }
}
