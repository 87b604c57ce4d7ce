//! [`Clients`] and [`Users`] for [`PgStore`]: rows of `clients` and `users`, read and written
//! through the MAC'd records of [`super::records`]. A change that takes tokens away (deactivating
//! a client, disabling a user, a new password, removal) records the revocation in the same
//! transaction.

use super::records::Table;
use super::revocations;
use super::{serializable, to_json, PgStore};
use crate::store::revocation::Revoked;
use crate::store::{
    ClientChange, ClientRecord, Clients, RecordFilter, StoreError, UserChange, UserRecord, Users,
};

#[async_trait::async_trait]
impl Clients for PgStore {
    async fn client(&self, id: &str) -> Result<Option<ClientRecord>, StoreError> {
        self.read_record(Table::Clients, id).await
    }

    async fn clients(&self) -> Result<Vec<(String, ClientRecord)>, StoreError> {
        self.read_records(Table::Clients).await
    }

    async fn clients_page(
        &self,
        filter: &RecordFilter<'_, ClientRecord>,
    ) -> Result<Vec<(String, ClientRecord)>, StoreError> {
        self.read_page(Table::Clients, filter).await
    }

    async fn add_client(&self, id: &str, rec: &ClientRecord) -> Result<bool, StoreError> {
        self.insert_record(Table::Clients, id, to_json(rec)).await
    }

    async fn update_client(
        &self,
        id: &str,
        change: ClientChange,
        now: u64,
    ) -> Result<bool, StoreError> {
        let revokes = change.revokes(id);
        let apply = |rec: &mut ClientRecord| change.apply(rec, now);
        self.update_record(Table::Clients, id, apply, revokes, now)
            .await
    }

    async fn remove_client(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        serializable!(self, |tx| {
            let n = tx
                .execute("DELETE FROM clients WHERE id = $1", &[&id])
                .await?;
            if n == 1 {
                let what = Revoked::Client { id: id.into() };
                revocations::revoke_in(&tx, what, now, None).await?;
            }
            n == 1
        })
    }
}

#[async_trait::async_trait]
impl Users for PgStore {
    async fn user(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        self.read_record(Table::Users, name).await
    }

    async fn users(&self) -> Result<Vec<(String, UserRecord)>, StoreError> {
        self.read_records(Table::Users).await
    }

    async fn users_page(
        &self,
        filter: &RecordFilter<'_, UserRecord>,
    ) -> Result<Vec<(String, UserRecord)>, StoreError> {
        self.read_page(Table::Users, filter).await
    }

    async fn add_user(&self, name: &str, rec: &UserRecord) -> Result<bool, StoreError> {
        self.insert_record(Table::Users, name, to_json(rec)).await
    }

    async fn update_user(
        &self,
        name: &str,
        change: &UserChange,
        now: u64,
    ) -> Result<bool, StoreError> {
        let revokes = change.revokes(name);
        let apply = |rec: &mut UserRecord| change.apply(rec);
        self.update_record(Table::Users, name, apply, revokes, now)
            .await
    }

    async fn remove_user(&self, name: &str, now: u64) -> Result<bool, StoreError> {
        serializable!(self, |tx| {
            let n = tx
                .execute("DELETE FROM users WHERE name = $1", &[&name])
                .await?;
            if n == 1 {
                let what = Revoked::User { name: name.into() };
                revocations::revoke_in(&tx, what, now, None).await?;
            }
            n == 1
        })
    }
}
