//! The schema, created and migrated by the issuer itself, and the secrets a new database starts
//! with (the hash key and the first signing key, sealed under the KEK).

use super::{back_off, int, serializable, PgStore};
use crate::secrets::{self, HashKey};
use crate::store::StoreError;
use zeroize::Zeroizing;

/// The migrations, in order; the version of each is its index plus one. Never edit one that has
/// shipped: add another.
const MIGRATIONS: &[&str] = &[
    // 1: the first schema.
    "CREATE TABLE settings (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
     CREATE TABLE sealed_secrets (name TEXT PRIMARY KEY, sealed BYTEA NOT NULL);
     CREATE TABLE clients (id TEXT PRIMARY KEY, record TEXT NOT NULL);
     CREATE TABLE users (name TEXT PRIMARY KEY, record TEXT NOT NULL);
     CREATE TABLE signing_keys (
         kid INT PRIMARY KEY, sealed BYTEA NOT NULL, created_at BIGINT NOT NULL,
         signs_from BIGINT NOT NULL, superseded_at BIGINT);
     CREATE TABLE refresh_families (
         id BYTEA PRIMARY KEY, client TEXT NOT NULL, username TEXT NOT NULL,
         created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, revoked_at BIGINT,
         current_hash BYTEA NOT NULL);
     CREATE TABLE refresh_tokens (
         hash BYTEA PRIMARY KEY, family BYTEA NOT NULL, client TEXT NOT NULL,
         username TEXT NOT NULL, expires_at BIGINT NOT NULL, rotated_at BIGINT);
     CREATE INDEX refresh_tokens_expiry ON refresh_tokens (expires_at);
     CREATE INDEX refresh_families_expiry ON refresh_families (expires_at);",
    // 2: the password back-off, shared by every issuer.
    "CREATE TABLE login_throttle (
         key TEXT PRIMARY KEY, failures INT NOT NULL, blocked_until BIGINT NOT NULL,
         last_failure BIGINT NOT NULL);",
];

impl PgStore {
    /// Applies the migrations this database lacks, one per serializable transaction. Issuers
    /// starting at once race on the catalog; the loser's duplicate table or type is retried, and
    /// the next round finds the migration applied.
    pub(super) async fn migrate(&self) -> Result<(), StoreError> {
        for (i, sql) in MIGRATIONS.iter().enumerate() {
            let version = i64::try_from(i + 1).unwrap_or(i64::MAX);
            let mut attempt = 0;
            let applied = loop {
                let result: Result<bool, StoreError> = serializable!(self, |tx| {
                    tx.batch_execute(
                        "CREATE TABLE IF NOT EXISTS schema_migrations \
                         (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
                    )
                    .await?;
                    let done = tx
                        .query_opt(
                            "SELECT version FROM schema_migrations WHERE version = $1",
                            &[&version],
                        )
                        .await?
                        .is_some();
                    if !done {
                        tx.batch_execute(sql).await?;
                        tx.execute(
                            "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)",
                            &[&version, &int(crate::app::now())],
                        )
                        .await?;
                    }
                    !done
                });
                match result {
                    // 23505 unique violation (in the catalog), 42P07 duplicate table.
                    Err(StoreError::Postgres(m))
                        if (m.starts_with("23505") || m.starts_with("42P07")) && attempt < 10 =>
                    {
                        attempt += 1;
                        back_off(attempt).await;
                    }
                    other => break other?,
                }
            };
            if applied {
                tracing::info!(version, "database schema migrated");
            }
        }
        Ok(())
    }

    /// The hash key, created with the first signing key on a new database; on an existing one,
    /// opened with the KEK (a wrong KEK fails here).
    pub(super) async fn init_secrets(&self, now: u64) -> Result<HashKey, StoreError> {
        let fresh_hash = secrets::random32();
        let sealed_hash = self.kek.seal("hash-key", fresh_hash.as_slice());
        let fresh_signing = secrets::random32();
        let sealed_signing = self.kek.seal("signing-key/1", fresh_signing.as_slice());
        let sealed: Vec<u8> = serializable!(self, |tx| {
            let row = tx
                .query_opt(
                    "SELECT sealed FROM sealed_secrets WHERE name = 'hash-key'",
                    &[],
                )
                .await?;
            match row {
                Some(r) => r.get::<_, Vec<u8>>(0),
                None => {
                    tx.execute(
                        "INSERT INTO sealed_secrets (name, sealed) VALUES ('hash-key', $1)",
                        &[&sealed_hash],
                    )
                    .await?;
                    let keys: i64 = tx
                        .query_one("SELECT count(*) FROM signing_keys", &[])
                        .await?
                        .get(0);
                    if keys == 0 {
                        tx.execute(
                            "INSERT INTO signing_keys (kid, sealed, created_at, signs_from) \
                             VALUES (1, $1, $2, $2)",
                            &[&sealed_signing, &int(now)],
                        )
                        .await?;
                    }
                    sealed_hash.clone()
                }
            }
        })?;
        let bytes = self.kek.open("hash-key", &sealed, "hash key")?;
        let arr: [u8; 32] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| StoreError::Corrupt("sealed hash key"))?;
        Ok(HashKey::new(Zeroizing::new(arr)))
    }
}
