//! The schema, created and migrated by the issuer itself, and the secrets a new database starts
//! with (the hash key and the first signing key, sealed under the KEK).

use super::records::{RecordKey, Table};
use super::{back_off, int, retrying, serializable, PgStore};
use crate::secrets::{self, HashKey};
use crate::store::{OpenError, StoreError};
use zeroize::Zeroizing;

/// The migrations, in order; the version of each is its index plus one. Each is one idempotent
/// schema change (`IF NOT EXISTS`), run on its own outside an explicit transaction and recorded
/// afterwards, as CockroachDB asks of schema changes; an issuer that stops between the two runs it
/// again harmlessly. Never edit one that has shipped: add another.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS sealed_secrets (name TEXT PRIMARY KEY, sealed BYTEA NOT NULL)",
    "CREATE TABLE IF NOT EXISTS clients (id TEXT PRIMARY KEY, record TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, record TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS signing_keys (
         kid INT PRIMARY KEY, sealed BYTEA NOT NULL, created_at BIGINT NOT NULL,
         signs_from BIGINT NOT NULL, superseded_at BIGINT)",
    "CREATE TABLE IF NOT EXISTS refresh_families (
         id BYTEA PRIMARY KEY, client TEXT NOT NULL, username TEXT NOT NULL,
         created_at BIGINT NOT NULL, expires_at BIGINT NOT NULL, revoked_at BIGINT,
         current_hash BYTEA NOT NULL)",
    "CREATE TABLE IF NOT EXISTS refresh_tokens (
         hash BYTEA PRIMARY KEY, family BYTEA NOT NULL, client TEXT NOT NULL,
         username TEXT NOT NULL, expires_at BIGINT NOT NULL, rotated_at BIGINT)",
    "CREATE INDEX IF NOT EXISTS refresh_tokens_expiry ON refresh_tokens (expires_at)",
    "CREATE INDEX IF NOT EXISTS refresh_families_expiry ON refresh_families (expires_at)",
    // The password back-off, shared by every issuer.
    "CREATE TABLE IF NOT EXISTS login_throttle (
         key TEXT PRIMARY KEY, failures INT NOT NULL, blocked_until BIGINT NOT NULL,
         last_failure BIGINT NOT NULL)",
    // One row per refresh token family (`store::family`). No index but the key, so a rotation
    // updates no index entry.
    "CREATE TABLE IF NOT EXISTS refresh_family_records (
         id BYTEA PRIMARY KEY, client TEXT NOT NULL, username TEXT NOT NULL,
         created_at BIGINT NOT NULL, absolute_expires_at BIGINT NOT NULL,
         expires_at BIGINT NOT NULL, generation BIGINT NOT NULL, rotated_at BIGINT,
         revoked_at BIGINT)",
    // The first layout (one row per token); the PostgreSQL store shipped with it only in
    // development builds, so its families are not carried over (`docs/deploy-postgres.md`).
    "DROP TABLE IF EXISTS refresh_tokens",
    "DROP TABLE IF EXISTS refresh_families",
    // PostgreSQL only (see [`POSTGRES_ONLY`]): room on every page of the family table, so a
    // rotation's new row version stays on its page and adds no index entry (a heap-only update).
    // Under SERIALIZABLE an index entry added to a page that other rotations read is a conflict,
    // and a transaction rolled back and retried.
    "ALTER TABLE refresh_family_records SET (fillfactor = 50)",
    // Revocations of access tokens (`store::revocation`), numbered from `revocation_seq` in the
    // settings.
    "CREATE TABLE IF NOT EXISTS revocations (
         seq BIGINT PRIMARY KEY, entry TEXT NOT NULL, until BIGINT NOT NULL)",
    // `issuer keys retire`: a key retired ahead of its time.
    "ALTER TABLE signing_keys ADD COLUMN IF NOT EXISTS retired_at BIGINT",
    // Each revocation's random stamp, the proof of the history of a reader's cursor
    // (`shared::revocation`); NULL for the rows recorded before it.
    "ALTER TABLE revocations ADD COLUMN IF NOT EXISTS stamp BIGINT",
    // The MACs of the records that grant power ([`super::records`]); filled in for the records
    // of an older database by [`PgStore::init_secrets`].
    "ALTER TABLE clients ADD COLUMN IF NOT EXISTS mac BYTEA",
    "ALTER TABLE users ADD COLUMN IF NOT EXISTS mac BYTEA",
    // The edges' last reports (`store::edges`), by node and VM.
    "CREATE TABLE IF NOT EXISTS edges (
         key TEXT PRIMARY KEY, last_seen BIGINT NOT NULL, report TEXT NOT NULL)",
    // The audit trail (`store::audit`), by time and a random number.
    "CREATE TABLE IF NOT EXISTS audit (
         at BIGINT NOT NULL, id BIGINT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (at, id))",
    // The readiness probe's one row, rewritten every second by every issuer
    // (`storage::Liveness`): in a table of its own, so that it conflicts with no transaction
    // reading the settings.
    "CREATE TABLE IF NOT EXISTS liveness (name TEXT PRIMARY KEY, at BIGINT NOT NULL)",
    // Each edge's client, counted against its bound (`store::edges::MAX_EDGES_PER_CLIENT`); the
    // edges are keyed by client, node and VM now. NULL for a row of an issuer of an earlier
    // version (keyed by node and VM), forgotten like any other once unseen.
    "ALTER TABLE edges ADD COLUMN IF NOT EXISTS client TEXT",
    // One row, locked by every write of the edges' reports: issuers write them one at a time,
    // so the registry's bounds hold however many write at once.
    "CREATE TABLE IF NOT EXISTS edge_writes (id INT PRIMARY KEY)",
    // The DPoP proofs the token endpoint accepted (`storage::ProofIds`), each until it expires.
    "CREATE TABLE IF NOT EXISTS dpop_proofs (id BYTEA PRIMARY KEY, expires BIGINT NOT NULL)",
    // The DPoP key a refresh token family is bound to (`store::family::Family::jkt`).
    "ALTER TABLE refresh_family_records ADD COLUMN IF NOT EXISTS jkt BYTEA",
    // PostgreSQL only: a notification on channel `mms_feed` when a transaction that recorded a
    // revocation or changed a signing key commits, whoever wrote it (an issuer, an admin
    // command, a restore). Its payload is the table's name: no secret, only that something
    // changed. Issuers LISTEN and wake the edges waiting on them (`listen.rs`).
    "CREATE OR REPLACE FUNCTION mms_feed_changed() RETURNS trigger LANGUAGE plpgsql AS $$ \
     BEGIN PERFORM pg_notify('mms_feed', TG_TABLE_NAME); RETURN NULL; END $$; \
     DROP TRIGGER IF EXISTS revocations_feed ON revocations; \
     CREATE TRIGGER revocations_feed AFTER INSERT ON revocations \
     FOR EACH STATEMENT EXECUTE FUNCTION mms_feed_changed(); \
     DROP TRIGGER IF EXISTS signing_keys_feed ON signing_keys; \
     CREATE TRIGGER signing_keys_feed AFTER INSERT OR UPDATE OR DELETE ON signing_keys \
     FOR EACH STATEMENT EXECUTE FUNCTION mms_feed_changed()",
    // The admin API's pages of clients and users, in the order of the ids' bytes whatever the
    // database's collation (`records.rs`, `read_page`).
    "CREATE INDEX IF NOT EXISTS clients_by_id ON clients (id COLLATE \"C\")",
    "CREATE INDEX IF NOT EXISTS users_by_name ON users (name COLLATE \"C\")",
    // One user's families, by id (the admin API's sessions of a user). Neither column ever
    // changes, so a rotation's update still touches no index entry (it stays heap-only).
    "CREATE INDEX IF NOT EXISTS refresh_family_records_by_user \
     ON refresh_family_records (username, id)",
    // Every page of the admin API's sessions walks the families by user and id, byte for byte
    // whatever the database's collation (`refresh.rs`, `live`): the index of one user's
    // families above, in that order; then the one it replaces goes (each a statement of its
    // own, as CockroachDB asks of schema changes).
    "CREATE INDEX IF NOT EXISTS refresh_families_by_user_name \
     ON refresh_family_records (username COLLATE \"C\", id)",
    "DROP INDEX IF EXISTS refresh_family_records_by_user",
];

/// Seconds an issuer holds the migration lock at most: another takes it over after that.
const MIGRATION_LEASE: i64 = 60;

/// The row of `sealed_secrets` holding the hash key. Its name says that every client and user
/// record carries a MAC under it: a database of an older version holds it as [`LEGACY_HASH_KEY`]
/// instead, and its records get their MACs when an issuer of this version first opens it.
pub(super) const HASH_KEY: &str = "hash-key+records";
/// The hash key's row before records carried MACs.
const LEGACY_HASH_KEY: &str = "hash-key";

/// Versions of [`MIGRATIONS`] that tune PostgreSQL's storage or add its notifications: on another
/// engine (CockroachDB) they are recorded as applied without running.
const POSTGRES_ONLY: &[i64] = &[14, 27];

/// True for the errors of two issuers creating one object at once: the loser sees a duplicate in
/// the catalog (23505) or the table (42P07) or index (42P07, 42710) already there.
fn lost_create_race(e: &StoreError) -> bool {
    use tokio_postgres::error::SqlState;
    e.sql_state().is_some_and(|c| {
        *c == SqlState::UNIQUE_VIOLATION
            || *c == SqlState::DUPLICATE_TABLE
            || *c == SqlState::DUPLICATE_OBJECT
    })
}

impl PgStore {
    /// Runs one schema statement on its own, retrying a lost creation race.
    async fn schema_change(&self, sql: &str) -> Result<(), StoreError> {
        let mut attempt = 0;
        loop {
            let result = match self.connection().await {
                Ok(conn) => conn.batch_execute(sql).await.map_err(StoreError::from),
                Err(e) => Err(e),
            };
            match result {
                Err(e)
                    if (lost_create_race(&e) || matches!(e, StoreError::Contention))
                        && attempt < 10 =>
                {
                    attempt += 1;
                    back_off(attempt).await;
                }
                other => return other,
            }
        }
    }

    /// Applies the migrations this database lacks, in order (see [`MIGRATIONS`]): nothing when
    /// it lacks none (no schema statement then, no privilege needed beyond the tables'); else
    /// under the lock row of `schema_lock`, so that of issuers starting at once one migrates and
    /// the others wait for it. The row is a lease ([`MIGRATION_LEASE`]), not an advisory lock,
    /// which CockroachDB lacks: an issuer that dies migrating holds it no longer than that.
    pub(super) async fn migrate(&self, now: u64) -> Result<(), StoreError> {
        if self.up_to_date().await? {
            return Ok(());
        }
        self.schema_change(
            "CREATE TABLE IF NOT EXISTS schema_lock \
             (id INT PRIMARY KEY, holder BYTEA NOT NULL, until BIGINT NOT NULL)",
        )
        .await?;
        let me = secrets::random16().to_vec();
        let mut told = false;
        while !self.take_migration_lock(&me).await? {
            if !told {
                tracing::info!("another issuer is migrating the database; waiting for it");
                told = true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            if self.up_to_date().await? {
                return Ok(());
            }
        }
        let migrated = self.migrate_locked(now).await;
        let released = retrying!(self, |conn| {
            conn.execute("DELETE FROM schema_lock WHERE holder = $1", &[&me])
                .await?;
        });
        migrated.and(released)
    }

    /// Whether every migration is recorded as applied.
    async fn up_to_date(&self) -> Result<bool, StoreError> {
        let exists = {
            let conn = self.connection().await?;
            let n: i64 = conn
                .query_one(
                    "SELECT count(*) FROM information_schema.tables \
                     WHERE table_name = 'schema_migrations' AND table_schema = current_schema()",
                    &[],
                )
                .await?
                .get(0);
            n > 0
        };
        if !exists {
            return Ok(false);
        }
        let applied = self.applied_migrations().await?;
        Ok((1..=MIGRATIONS.len()).all(|v| applied.contains(&i64::try_from(v).unwrap_or(0))))
    }

    /// Takes the migration lock row as `me` if it is free or its lease ran out.
    async fn take_migration_lock(&self, me: &[u8]) -> Result<bool, StoreError> {
        retrying!(self, |conn| {
            conn.query_opt(
                "INSERT INTO schema_lock (id, holder, until) \
                 VALUES (1, $1, CAST(extract(epoch FROM now()) AS BIGINT) + $2) \
                 ON CONFLICT (id) DO UPDATE SET holder = excluded.holder, until = excluded.until \
                 WHERE schema_lock.until < CAST(extract(epoch FROM now()) AS BIGINT) \
                 RETURNING holder",
                &[&me, &MIGRATION_LEASE],
            )
            .await?
            .is_some()
        })
    }

    /// Whether the database is PostgreSQL itself, with its storage settings and `LISTEN`/`NOTIFY`
    /// (CockroachDB speaks its protocol without them).
    pub(super) async fn notifies(&self) -> Result<bool, StoreError> {
        let conn = self.connection().await?;
        let version: String = conn.query_one("SELECT version()", &[]).await?.get(0);
        Ok(!version.contains("CockroachDB"))
    }

    /// Applies the migrations this database lacks, holding the migration lock.
    async fn migrate_locked(&self, now: u64) -> Result<(), StoreError> {
        self.schema_change(
            "CREATE TABLE IF NOT EXISTS schema_migrations \
             (version BIGINT PRIMARY KEY, applied_at BIGINT NOT NULL)",
        )
        .await?;
        let mut applied = self.applied_migrations().await?;
        let postgres = self.notifies().await?;
        for (i, sql) in MIGRATIONS.iter().enumerate() {
            let version = i64::try_from(i + 1).unwrap_or(i64::MAX);
            if applied.contains(&version) {
                continue;
            }
            if postgres || !POSTGRES_ONLY.contains(&version) {
                if let Err(e) = self.schema_change(sql).await {
                    // Another issuer migrating the same database at once may have gone past this
                    // step (a later one dropped what this one changes): what it recorded is done.
                    applied = self.applied_migrations().await?;
                    if applied.contains(&version) {
                        continue;
                    }
                    return Err(e);
                }
            }
            serializable!(self, |tx| {
                tx.execute(
                    "INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2) \
                     ON CONFLICT (version) DO NOTHING",
                    &[&version, &int(now)],
                )
                .await?;
            })?;
            tracing::info!(version, "database schema migrated");
        }
        Ok(())
    }

    /// The versions of [`MIGRATIONS`] recorded as applied.
    async fn applied_migrations(&self) -> Result<Vec<i64>, StoreError> {
        let conn = self.connection().await?;
        Ok(conn
            .query("SELECT version FROM schema_migrations", &[])
            .await?
            .iter()
            .map(|r| r.get(0))
            .collect())
    }

    /// The hash key, created with the first signing key on a new database; on an existing one,
    /// opened with the KEK (a wrong KEK fails here). A database of an older version first gets
    /// the MACs of its client and user records ([`PgStore::add_record_macs`]).
    pub(super) async fn init_secrets(&self, now: u64) -> Result<HashKey, OpenError> {
        let legacy: Option<Vec<u8>> = {
            let conn = self.connection().await?;
            conn.query_opt(
                "SELECT sealed FROM sealed_secrets WHERE name = $1",
                &[&LEGACY_HASH_KEY],
            )
            .await
            .map_err(StoreError::from)?
            .map(|r| r.get(0))
        };
        if let Some(sealed) = legacy {
            let plain = self.kek.open(LEGACY_HASH_KEY, &sealed, "hash key")?;
            self.add_record_macs(&plain).await?;
        }
        let fresh_hash = secrets::random32();
        let sealed_hash = self.kek.seal(HASH_KEY, fresh_hash.as_slice());
        let fresh_signing = secrets::random32();
        let sealed_signing = self.kek.seal("signing-key/1", fresh_signing.as_slice());
        let sealed: Vec<u8> = serializable!(self, |tx| {
            let row = tx
                .query_opt(
                    "SELECT sealed FROM sealed_secrets WHERE name = $1",
                    &[&HASH_KEY],
                )
                .await?;
            match row {
                Some(r) => r.get::<_, Vec<u8>>(0),
                None => {
                    tx.execute(
                        "INSERT INTO sealed_secrets (name, sealed) VALUES ($1, $2)",
                        &[&HASH_KEY, &sealed_hash],
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
        Ok(hash_key_of(&self.kek.open(HASH_KEY, &sealed, "hash key")?)?)
    }

    /// Gives every client and user record its MAC under the hash key `plain` (an older
    /// database's, still in the row [`LEGACY_HASH_KEY`]), in the transaction that moves the hash
    /// key to [`HASH_KEY`], so that a record without a MAC is never taken for an old one
    /// afterwards. Another issuer that did it first leaves nothing to do.
    async fn add_record_macs(&self, plain: &[u8]) -> Result<(), StoreError> {
        let macs = RecordKey::derive(&hash_key_of(plain)?);
        let resealed = self.kek.seal(HASH_KEY, plain);
        let n = serializable!(self, |tx| {
            let mut n = 0u64;
            let legacy = tx
                .query_opt(
                    "SELECT 1 FROM sealed_secrets WHERE name = $1 FOR UPDATE",
                    &[&LEGACY_HASH_KEY],
                )
                .await?;
            if legacy.is_some() {
                for table in [Table::Clients, Table::Users] {
                    let (t, id) = match table {
                        Table::Clients => ("clients", "id"),
                        Table::Users => ("users", "name"),
                    };
                    let select = format!("SELECT {id}, record FROM {t} FOR UPDATE");
                    let update = format!("UPDATE {t} SET mac = $2 WHERE {id} = $1");
                    for r in tx.query(select.as_str(), &[]).await? {
                        let (name, record): (&str, &str) = (r.get(0), r.get(1));
                        let tag = macs.tag(table, name, record);
                        tx.execute(update.as_str(), &[&name, &tag]).await?;
                        n += 1;
                    }
                }
                tx.execute(
                    "INSERT INTO sealed_secrets (name, sealed) VALUES ($1, $2) \
                     ON CONFLICT (name) DO NOTHING",
                    &[&HASH_KEY, &resealed],
                )
                .await?;
                tx.execute(
                    "DELETE FROM sealed_secrets WHERE name = $1",
                    &[&LEGACY_HASH_KEY],
                )
                .await?;
            }
            n
        })?;
        if n > 0 {
            tracing::info!(records = n, "client and user records now carry MACs");
        }
        Ok(())
    }
}

pub(super) fn hash_key_of(plain: &[u8]) -> Result<HashKey, StoreError> {
    let arr: [u8; 32] = plain
        .try_into()
        .map_err(|_| StoreError::Corrupt("sealed hash key"))?;
    Ok(HashKey::new(Zeroizing::new(arr)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_only_migrations_are_storage_tuning_or_notifications() {
        for v in POSTGRES_ONLY {
            let sql = MIGRATIONS[usize::try_from(*v).unwrap() - 1];
            let tuning = sql.contains("SET (fillfactor");
            let notifies = sql.contains("pg_notify('mms_feed'") && sql.contains("CREATE TRIGGER");
            assert!(tuning || notifies, "migration {v} is {sql:?}");
        }
    }
}
