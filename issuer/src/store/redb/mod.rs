//! The embedded backend: durable state in one redb file in a data dir (clients, users, signing
//! keys, refresh token families, settings), beside the hash key file. redb lets one process open
//! the file, so this backend serves one issuer.
//!
//! [`RedbFile`] is the synchronous store; [`RedbStore`] puts it behind [`Store`], with refresh
//! token writes group-committed by one writer thread ([`writer`]).
//!
//! Writes use redb's default `Durability::Immediate`: when a function returns, its change is on
//! disk. A refresh rotation is one write transaction, so a successor handed to a client is never
//! lost by a crash and two clients can never receive different successors of one token.

mod accounts;
mod audit;
pub mod backup;
mod edges;
pub mod journal;
pub mod owner;
mod refresh;
mod revocations;
mod store;
pub mod sweep;
pub mod writer;

use super::keys::{KeyRecord, PromoteOutcome, Promotion, RetireOutcome, Rotated, RotationPlan};
use super::{KeyInfo, KeyState, OpenError, StoreError, DEFAULT_ACCESS_TTL};
use crate::secrets::{self, HashKey};
use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
pub use refresh::{FamilyDone, FamilyOp};
use serde::{Deserialize, Serialize};
use shared::{Key, KeyRing};
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
pub use store::RedbStore;
use zeroize::Zeroizing;

const CLIENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("clients");
const USERS: TableDefinition<&str, &[u8]> = TableDefinition::new("users");
const KEYS: TableDefinition<u32, &[u8]> = TableDefinition::new("keys");
/// One [`super::family::Family`] per refresh token family, by its 16-byte id.
const FAMILY_RECORDS: TableDefinition<&[u8], &[u8]> =
    TableDefinition::new("refresh_family_records");
/// Family changes not yet merged into [`FAMILY_RECORDS`], in commit order ([`journal`]).
const FAMILY_JOURNAL: TableDefinition<u64, &[u8]> = TableDefinition::new("refresh_family_journal");
const SETTINGS: TableDefinition<&str, u64> = TableDefinition::new("settings");
/// Revocations of access tokens by number ([`crate::store::revocation`]).
const REVOCATIONS: TableDefinition<u64, &[u8]> = TableDefinition::new("revocations");
/// The edges' last reports by node and VM ([`crate::store::edges`]).
const EDGES: TableDefinition<&str, &[u8]> = TableDefinition::new("edges");
/// The audit trail by (time, number) ([`crate::store::audit`]).
const AUDIT: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("audit");

/// A table of JSON records by name, and its name for errors.
type Records = (
    TableDefinition<'static, &'static str, &'static [u8]>,
    &'static str,
);
const CLIENT_RECORDS: Records = (CLIENTS, "clients");
const USER_RECORDS: Records = (USERS, "users");

/// File name of the database in the data dir.
pub const DB_FILE: &str = "issuer.redb";
/// File name of the hash key in the data dir.
pub const HASH_KEY_FILE: &str = "hash.key";

/// A redb error as a store error: a failed read or write of the file (which redb latches until the
/// database is reopened) is [`StoreError::Disk`].
fn from_redb(e: redb::Error) -> StoreError {
    match e {
        redb::Error::Io(io) => StoreError::Disk(io.to_string()),
        redb::Error::PreviousIo => StoreError::Disk("an earlier write failed".into()),
        other => StoreError::Redb(other),
    }
}

macro_rules! db_err {
    ($($t:ty),*) => {$(impl From<$t> for StoreError {
        fn from(e: $t) -> Self { from_redb(e.into()) }
    })*};
}
db_err!(
    redb::Error,
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

fn enc<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("records serialize")
}

fn dec<T: for<'de> Deserialize<'de>>(bytes: &[u8], table: &'static str) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|_| StoreError::Corrupt(table))
}

/// The open data dir, synchronous.
///
/// After a failed write redb refuses every operation until the database is reopened
/// ([`RedbFile::mark_failed`]); the next operation then reopens it (redb repairs the file if it
/// must) and, until that succeeds, fails with [`StoreError::Disk`].
pub struct RedbFile {
    db: RwLock<Option<Arc<Database>>>,
    failed: AtomicBool,
    cache_bytes: Option<usize>,
    overlay: Mutex<journal::Overlay>,
    /// Set by a reopen: the overlay may not match the journal on disk.
    journal_stale: AtomicBool,
    cursors: Mutex<sweep::Cursors>,
    hash_key: HashKey,
    dir: PathBuf,
}

impl std::fmt::Debug for RedbFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbFile").field("dir", &self.dir).finish()
    }
}

fn private_file(path: &Path) -> Result<fs::File, std::io::Error> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

fn load_hash_key(dir: &Path) -> Result<HashKey, StoreError> {
    let path = dir.join(HASH_KEY_FILE);
    match fs::read(&path) {
        Ok(bytes) => {
            let bytes = Zeroizing::new(bytes);
            let arr: [u8; 32] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| StoreError::Corrupt("hash.key"))?;
            Ok(HashKey::new(Zeroizing::new(arr)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = secrets::random32();
            let tmp = dir.join("hash.key.tmp");
            let mut f = private_file(&tmp)?;
            f.write_all(&*key)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            fs::File::open(dir)?.sync_all()?;
            Ok(HashKey::new(key))
        }
        Err(e) => Err(e.into()),
    }
}

/// Opens the database file of `dir`, bounding redb's page cache to `cache_bytes` if given.
fn open_database(dir: &Path, cache_bytes: Option<usize>) -> Result<Database, OpenError> {
    let mut builder = redb::Builder::new();
    if let Some(bytes) = cache_bytes {
        builder.set_cache_size(bytes);
    }
    match builder.create(dir.join(DB_FILE)) {
        Ok(db) => Ok(db),
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => Err(OpenError::Locked),
        Err(e) => Err(from_redb(e.into()).into()),
    }
}

impl RedbFile {
    /// Opens (creating if needed) the data dir: the directory 0700, database and hash key 0600.
    /// A new data dir gets its first signing key. Fails with [`OpenError::Locked`] while another
    /// process has the database open.
    pub fn open(dir: &Path, now: u64) -> Result<Self, OpenError> {
        Self::open_with_cache(dir, now, None)
    }

    /// [`RedbFile::open`] with redb's page cache bounded to `cache_bytes` (redb's default: 1 GiB).
    pub fn open_with_cache(
        dir: &Path,
        now: u64,
        cache_bytes: Option<usize>,
    ) -> Result<Self, OpenError> {
        fs::create_dir_all(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        let hash_key = load_hash_key(dir)?;
        drop(private_file(&dir.join(DB_FILE))?);
        let db = open_database(dir, cache_bytes)?;
        let store = Self {
            db: RwLock::new(Some(Arc::new(db))),
            failed: AtomicBool::new(false),
            cache_bytes,
            overlay: Mutex::default(),
            journal_stale: AtomicBool::new(false),
            cursors: Mutex::default(),
            hash_key,
            dir: dir.to_owned(),
        };
        store.init(now)?;
        store.load_journal()?;
        Ok(store)
    }

    /// Notes that a write failed: the next operation reopens the database first.
    pub fn mark_failed(&self) {
        self.failed.store(true, Ordering::Release);
    }

    /// The open database, reopened first if a write failed since.
    fn database(&self) -> Result<Arc<Database>, StoreError> {
        if self.failed.load(Ordering::Acquire) {
            self.reopen()?;
        }
        self.db
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| StoreError::Disk("the database is being reopened".into()))
    }

    fn reopen(&self) -> Result<(), StoreError> {
        let mut slot = self.db.write().unwrap_or_else(PoisonError::into_inner);
        if !self.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        // redb closes the file when the last handle goes; a transaction still running on the
        // failed handle keeps it open, and this is tried again by the next operation.
        drop(slot.take());
        match open_database(&self.dir, self.cache_bytes) {
            Ok(db) => {
                *slot = Some(Arc::new(db));
                self.failed.store(false, Ordering::Release);
                // A commit that reported failure may still have reached the disk.
                self.journal_stale.store(true, Ordering::Release);
                tracing::warn!("the database was reopened after a failed write");
                Ok(())
            }
            Err(OpenError::Locked) => Err(StoreError::Disk(
                "the database is still closing after a failed write".into(),
            )),
            Err(OpenError::Store(e)) => Err(e),
            Err(e) => Err(StoreError::Disk(e.to_string())),
        }
    }

    fn begin_write(&self) -> Result<redb::WriteTransaction, StoreError> {
        Ok(self.database()?.begin_write()?)
    }

    fn begin_read(&self) -> Result<redb::ReadTransaction, StoreError> {
        Ok(self.database()?.begin_read()?)
    }

    fn init(&self, now: u64) -> Result<(), StoreError> {
        let tx = self.begin_write()?;
        {
            tx.open_table(CLIENTS)?;
            tx.open_table(USERS)?;
            tx.open_table(FAMILY_RECORDS)?;
            tx.open_table(FAMILY_JOURNAL)?;
            tx.open_table(SETTINGS)?;
            tx.open_table(REVOCATIONS)?;
            tx.open_table(EDGES)?;
            tx.open_table(AUDIT)?;
            let mut keys = tx.open_table(KEYS)?;
            if keys.is_empty()? {
                let rec = KeyRecord {
                    secret: hex::encode(*secrets::random32()),
                    created_at: now,
                    signs_from: now,
                    superseded_at: None,
                    retired_at: None,
                };
                keys.insert(1, enc(&rec).as_slice())?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The data dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The hash key of this data dir.
    pub fn hash_key(&self) -> &HashKey {
        &self.hash_key
    }

    // ----- settings -----

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

    // ----- keys -----

    /// Every key still on record, with its state at `now`.
    pub fn key_infos(&self, now: u64) -> Result<Vec<KeyInfo>, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.begin_read()?;
        let t = tx.open_table(KEYS)?;
        t.iter()?
            .map(|r| {
                let (k, v) = r?;
                let rec: KeyRecord = dec(v.value(), "keys")?;
                Ok(rec.info(k.value(), now, ttl))
            })
            .collect()
    }

    /// The key ring at `now`: the signing key, a pending key (so verifiers learn it before it
    /// signs) and every superseded key not yet retired.
    pub fn key_ring(&self, now: u64) -> Result<KeyRing, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.begin_read()?;
        let t = tx.open_table(KEYS)?;
        let mut keys = Vec::new();
        let mut signing = None;
        for r in t.iter()? {
            let (k, v) = r?;
            let rec: KeyRecord = dec(v.value(), "keys")?;
            match rec.state(now, ttl) {
                KeyState::Retired => continue,
                KeyState::Signing => signing = Some(k.value()),
                KeyState::Pending | KeyState::Held | KeyState::Verifying => {}
            }
            let secret =
                Zeroizing::new(hex::decode(&rec.secret).map_err(|_| StoreError::Corrupt("keys"))?);
            keys.push(Key::from_slice(k.value(), &secret).ok_or(StoreError::Corrupt("keys"))?);
        }
        KeyRing::new(keys, signing).ok_or(StoreError::Corrupt("keys"))
    }

    /// Adds a new key that becomes the signing key `delay` seconds from `now`; until then it is
    /// published (in the ring and the filter configuration) but does not sign. The current signing
    /// key keeps verifying until it retires. Returns the new key id, or `None` while another
    /// rotation is still pending.
    pub fn rotate_key(&self, now: u64, delay: u64) -> Result<Option<Rotated>, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.begin_write()?;
        let rotated = {
            let mut t = tx.open_table(KEYS)?;
            let mut records = Vec::new();
            for r in t.iter()? {
                let (k, v) = r?;
                records.push((k.value(), dec::<KeyRecord>(v.value(), "keys")?));
            }
            let Some(plan) =
                RotationPlan::of(records.iter().map(|(k, r)| (*k, r)), now, delay, ttl)
            else {
                return Ok(None);
            };
            let last = records.last().map_or(0, |(k, _)| *k);
            for (kid, mut rec) in records {
                if plan.supersede.contains(&kid) {
                    rec.superseded_at = Some(plan.signs_from);
                } else if plan.drop_pending.contains(&kid) {
                    rec.retired_at = Some(now);
                } else {
                    continue;
                }
                t.insert(kid, enc(&rec).as_slice())?;
            }
            let kid = last + 1;
            let rec = KeyRecord {
                secret: hex::encode(*secrets::random32()),
                created_at: now,
                signs_from: plan.signs_from,
                superseded_at: None,
                retired_at: None,
            };
            t.insert(kid, enc(&rec).as_slice())?;
            Rotated {
                kid,
                dropped: plan.drop_pending,
            }
        };
        tx.commit()?;
        Ok(Some(rotated))
    }

    /// See [`Store::retire_key`].
    pub fn retire_key(&self, kid: u32, now: u64) -> Result<RetireOutcome, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.begin_write()?;
        let outcome = {
            let mut t = tx.open_table(KEYS)?;
            let found = t.get(kid)?.map(|v| dec::<KeyRecord>(v.value(), "keys"));
            match found {
                None => RetireOutcome::Unknown,
                Some(rec) => {
                    let mut rec = rec?;
                    let outcome = RetireOutcome::of(&rec, now, ttl);
                    if outcome == RetireOutcome::Retired {
                        rec.retired_at = Some(now);
                        t.insert(kid, enc(&rec).as_slice())?;
                    }
                    outcome
                }
            }
        };
        tx.commit()?;
        Ok(outcome)
    }

    /// See [`crate::store::SigningKeys::promote_key`].
    pub fn promote_key(&self, kid: u32, now: u64) -> Result<PromoteOutcome, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.begin_write()?;
        {
            let mut t = tx.open_table(KEYS)?;
            let mut records = Vec::new();
            for r in t.iter()? {
                let (k, v) = r?;
                records.push((k.value(), dec::<KeyRecord>(v.value(), "keys")?));
            }
            let held = records.iter().find(|(k, _)| *k == kid).map(|(_, r)| r);
            let promotion = match Promotion::of(kid, held, now, ttl) {
                Ok(p) => p,
                Err(outcome) => return Ok(outcome),
            };
            for (k, mut rec) in records {
                if promotion.apply(k, &mut rec, now) {
                    t.insert(k, enc(&rec).as_slice())?;
                }
            }
        }
        tx.commit()?;
        Ok(PromoteOutcome::Promoted)
    }
}

#[cfg(test)]
mod tests;
