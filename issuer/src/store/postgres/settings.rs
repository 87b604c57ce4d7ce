//! [`HashKeyed`], [`AccessLifetime`] and [`Liveness`] for [`PgStore`]: the hash key (opened with
//! the key-encryption key when the store connects), the `settings` row of the access token
//! lifetime, and the `liveness` row the readiness probe writes.

use super::{int, retrying, serializable, uint, PgStore};
use crate::secrets::HashKey;
use crate::store::{AccessLifetime, HashKeyed, Liveness, StoreError, DEFAULT_ACCESS_TTL};

impl HashKeyed for PgStore {
    fn hash_key(&self) -> &HashKey {
        &self.hash_key
    }
}

#[async_trait::async_trait]
impl AccessLifetime for PgStore {
    async fn access_ttl(&self) -> Result<u64, StoreError> {
        let conn = self.connection().await?;
        let row = conn
            .query_opt("SELECT value FROM settings WHERE name = 'access_ttl'", &[])
            .await?;
        Ok(row.map_or(DEFAULT_ACCESS_TTL, |r| uint(r.get(0))))
    }

    async fn set_access_ttl(&self, ttl: u64) -> Result<(), StoreError> {
        serializable!(self, |tx| {
            tx.execute(
                "INSERT INTO settings (name, value) VALUES ('access_ttl', $1) \
                 ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                &[&int(ttl)],
            )
            .await?;
        })
    }
}

#[async_trait::async_trait]
impl Liveness for PgStore {
    async fn probe_write(&self, now: u64) -> Result<(), StoreError> {
        self.lost.check(now)?;
        retrying!(self, |conn| {
            conn.execute(
                "INSERT INTO liveness (name, at) VALUES ('probe', $1) \
                 ON CONFLICT (name) DO UPDATE SET at = excluded.at",
                &[&int(now)],
            )
            .await?;
        })
    }
}
