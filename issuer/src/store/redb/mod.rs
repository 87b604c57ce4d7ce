//! The embedded backend: durable state in one redb file in a data dir (clients, users, signing
//! keys, refresh token families, settings), beside the hash key file. redb lets one process open
//! the file, so this backend serves one issuer.
//!
//! [`RedbFile`] is the synchronous store; [`RedbStore`] puts it behind [`Store`], with refresh
//! token writes group-committed by one writer thread ([`writer`]).
//!
//! This file opens the data dir and defines both; each trait of the store has its own file, named
//! as in the PostgreSQL backend: `accounts` ([`crate::store::Clients`], [`crate::store::Users`]),
//! `keys` ([`crate::store::SigningKeys`]), `refresh` ([`crate::store::Families`]), `revocations`,
//! `edges`, `audit`, [`sweep`], `settings` ([`crate::store::HashKeyed`],
//! [`crate::store::AccessLifetime`], [`crate::store::Liveness`]) and [`backup`]
//! ([`crate::store::backup::Backups`]), with [`contents`] (a backup file as
//! [`crate::store::contents::Contents`], the move to PostgreSQL and back). The password back-off
//! of this backend is in memory
//! ([`crate::store::throttle::MemoryBook`]).
//!
//! Writes use redb's default `Durability::Immediate`: when a function returns, its change is on
//! disk. A refresh rotation is one write transaction, so a successor handed to a client is never
//! lost by a crash and two clients can never receive different successors of one token.

mod accounts;
mod audit;
pub mod backup;
mod by_user;
pub mod contents;
mod edges;
pub mod journal;
mod keys;
pub mod owner;
pub mod proofs;
mod refresh;
mod revocations;
mod settings;
pub mod sweep;
pub mod writer;

use super::keys::KeyRecord;
use super::{DiskFault, OpenError, RefreshPolicy, StoreError};
use crate::secrets::{self, HashKey};
use redb::{Database, ReadableDatabase, ReadableTableMetadata, TableDefinition};
pub use refresh::{FamilyDone, FamilyOp};
use serde::{Deserialize, Serialize};
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
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
        redb::Error::Io(io) => StoreError::Disk(DiskFault::Io(io)),
        redb::Error::PreviousIo => StoreError::Disk(DiskFault::EarlierWrite),
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
            .ok_or(StoreError::Disk(DiskFault::Reopening))
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
            Err(OpenError::Locked) => Err(StoreError::Disk(DiskFault::StillClosing)),
            Err(OpenError::Store(e)) => Err(e),
            Err(e) => Err(StoreError::Disk(DiskFault::Reopen(Box::new(e)))),
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
            if by_user::build_unless_whole(&tx)? {
                tracing::info!("refresh families indexed by user");
            }
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
}

/// [`RedbFile`] behind the [`crate::store::Store`] traits. Refresh operations, journal merges and the sweep
/// go through one writer thread that group-commits the operations.
#[derive(Debug)]
pub struct RedbStore {
    file: std::sync::Arc<RedbFile>,
    writer: writer::RefreshWriter,
    proofs: proofs::SeenProofs,
}

impl RedbStore {
    /// Opens the data dir (see [`RedbFile::open`]) and starts its refresh writer with `policy`.
    pub fn open(dir: &Path, now: u64, policy: RefreshPolicy) -> Result<Self, OpenError> {
        Self::open_with_cache(dir, now, policy, None)
    }

    /// [`RedbStore::open`] with the page cache bounded (see [`RedbFile::open_with_cache`]).
    pub fn open_with_cache(
        dir: &Path,
        now: u64,
        policy: RefreshPolicy,
        cache_bytes: Option<usize>,
    ) -> Result<Self, OpenError> {
        let file = std::sync::Arc::new(RedbFile::open_with_cache(dir, now, cache_bytes)?);
        let writer = writer::RefreshWriter::spawn(file.clone(), policy)?;
        Ok(Self {
            file,
            writer,
            proofs: proofs::SeenProofs::default(),
        })
    }

    /// The data dir.
    pub fn dir(&self) -> &Path {
        self.file.dir()
    }

    /// Passes `result` on, noting a failed write so that the next operation reopens the database.
    fn watch<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Disk(_)) = &result {
            self.file.mark_failed();
        }
        result
    }
}

#[cfg(test)]
mod tests;
