//! [`HashKeyed`], [`AccessLifetime`] and [`Liveness`] for [`RedbStore`]: the hash key of the data
//! dir, and the rows of the settings table (the access token lifetime, the readiness probe).

use super::{RedbFile, RedbStore, SETTINGS};
use crate::secrets::HashKey;
use crate::store::{AccessLifetime, HashKeyed, Liveness, StoreError, DEFAULT_ACCESS_TTL};

impl RedbFile {
    /// The access token lifetime last recorded by `issuer serve`.
    pub fn access_ttl(&self) -> Result<u64, StoreError> {
        let tx = self.begin_read()?;
        let t = tx.open_table(SETTINGS)?;
        Ok(t.get("access_ttl")?
            .map(|v| v.value())
            .unwrap_or(DEFAULT_ACCESS_TTL))
    }

    /// Records the access token lifetime (it decides when superseded keys retire).
    pub fn set_access_ttl(&self, ttl: u64) -> Result<(), StoreError> {
        let tx = self.begin_write()?;
        tx.open_table(SETTINGS)?.insert("access_ttl", ttl)?;
        tx.commit()?;
        Ok(())
    }

    /// The readiness probe: a durable write of the time to one settings row.
    pub fn probe_write(&self, now: u64) -> Result<(), StoreError> {
        let tx = self.begin_write()?;
        tx.open_table(SETTINGS)?.insert("probe_at", now)?;
        tx.commit()?;
        Ok(())
    }
}

impl HashKeyed for RedbStore {
    fn hash_key(&self) -> &HashKey {
        self.file.hash_key()
    }
}

#[async_trait::async_trait]
impl AccessLifetime for RedbStore {
    async fn access_ttl(&self) -> Result<u64, StoreError> {
        self.watch(self.file.access_ttl())
    }

    async fn set_access_ttl(&self, ttl: u64) -> Result<(), StoreError> {
        self.watch(self.file.set_access_ttl(ttl))
    }
}

/// One issuer per data dir: nothing to hear.
impl crate::store::storage::Notices for RedbStore {}

#[async_trait::async_trait]
impl Liveness for RedbStore {
    async fn probe_write(&self, now: u64) -> Result<(), StoreError> {
        self.watch(self.file.probe_write(now))
    }
}
