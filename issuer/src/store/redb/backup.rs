//! [`Backup`] and [`Backups`] for [`RedbStore`].
//!
//! The embedded store's backup and restore, in the format of [`crate::store::backup`].
//!
//! A backup copies every table from one redb read transaction: redb's read transactions see the
//! database as of the last commit before they began, whatever commits meanwhile, so the copy is
//! consistent while the store serves. A refresh rotation is answered only after its commit
//! ([`super::writer`]), so a backup begun after a client received a token holds the rotation that
//! issued it. Rotations still in the journal are copied as the journal ([`super::journal`]), which
//! the restored store reads back when it opens, as after a restart.
//!
//! The tables are typed; [`tables`] names each with its key and value types, so that a record is
//! copied out as the bytes redb stores and checked to be a well-formed value of its type before it
//! is written back (redb's decoding panics on a malformed one).
//!
//! A restore ([`restore`]) reads the whole backup and checks its digest before it writes
//! anything, then writes the new data dir's files under temporary names in one transaction, and
//! gives them their names only when all is written and synced.

use super::by_user::FAMILIES_BY_USER;
use super::{
    RedbFile, RedbStore, AUDIT, CLIENTS, DB_FILE, EDGES, FAMILY_JOURNAL, FAMILY_RECORDS,
    HASH_KEY_FILE, KEYS, REVOCATIONS, SETTINGS, USERS,
};
use crate::secrets::HashKey;
use crate::store::backup::{
    Backup, BackupError, BackupReader, BackupWriter, Backups, Frame, Header, Snapshot, Summary,
};
use crate::store::StoreError;
use redb::{
    Database, Key, MultimapTableHandle, ReadTransaction, ReadableDatabase, ReadableTable,
    TableDefinition, TableHandle, Value, WriteTransaction,
};
use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use zeroize::Zeroizing;

/// The suffix of a restored file until the restore is complete.
const RESTORING: &str = ".restoring";

fn store_err(e: impl Into<redb::Error>) -> BackupError {
    BackupError::Store(StoreError::from(e.into()))
}

/// A key or value type of a table, and whether bytes are a well-formed value of it.
trait Checked: Value + 'static {
    fn well_formed(bytes: &[u8]) -> bool {
        Self::fixed_width().is_none_or(|n| n == bytes.len())
    }
}

impl Checked for &'static str {
    fn well_formed(bytes: &[u8]) -> bool {
        std::str::from_utf8(bytes).is_ok()
    }
}
impl Checked for &'static [u8] {}
impl Checked for u32 {}
impl Checked for u64 {}
impl Checked for (u64, u64) {}

/// Inserts records into one table of a write transaction.
trait Load {
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), BackupError>;
}

struct Loader<'t, K: Key + 'static, V: Value + 'static>(redb::Table<'t, K, V>);

impl<K: Checked + Key, V: Checked> Load for Loader<'_, K, V> {
    fn insert(&mut self, key: &[u8], value: &[u8]) -> Result<(), BackupError> {
        // Checked by the caller ([`TableCopy::well_formed`]).
        self.0
            .insert(K::from_bytes(key), V::from_bytes(value))
            .map_err(store_err)?;
        Ok(())
    }
}

/// Opens a table of a write transaction for [`Load`].
type OpenLoad = for<'t> fn(&'t WriteTransaction, &str) -> Result<Box<dyn Load + 't>, BackupError>;

/// One table of the data dir: its name, and its copy out and in for its types.
pub(super) struct TableCopy {
    pub(super) name: String,
    dump: fn(&ReadTransaction, &str, &mut BackupWriter<'_>) -> Result<(), BackupError>,
    well_formed: fn(&[u8], &[u8]) -> bool,
    load: OpenLoad,
}

fn dump<K: Checked + Key, V: Checked>(
    tx: &ReadTransaction,
    name: &str,
    w: &mut BackupWriter<'_>,
) -> Result<(), BackupError> {
    let table = tx
        .open_table(TableDefinition::<K, V>::new(name))
        .map_err(store_err)?;
    w.table(name)?;
    for r in table.iter().map_err(store_err)? {
        let (k, v) = r.map_err(store_err)?;
        let (k, v) = (k.value(), v.value());
        w.record(K::as_bytes(&k).as_ref(), V::as_bytes(&v).as_ref())?;
    }
    Ok(())
}

fn well_formed<K: Checked, V: Checked>(key: &[u8], value: &[u8]) -> bool {
    K::well_formed(key) && V::well_formed(value)
}

fn load<'t, K: Checked + Key, V: Checked>(
    tx: &'t WriteTransaction,
    name: &str,
) -> Result<Box<dyn Load + 't>, BackupError> {
    let table = tx
        .open_table(TableDefinition::<K, V>::new(name))
        .map_err(store_err)?;
    Ok(Box::new(Loader(table)))
}

fn table<K: Checked + Key, V: Checked>(def: TableDefinition<'_, K, V>) -> TableCopy {
    TableCopy {
        name: def.name().to_owned(),
        dump: dump::<K, V>,
        well_formed: well_formed::<K, V>,
        load: load::<K, V>,
    }
}

/// Every table of the data dir a backup holds (the index by user aside, which a data dir builds
/// when it lacks it). A table added to the store must be added here: a backup refuses a
/// database with a table it does not know.
fn tables() -> [TableCopy; 9] {
    [
        table(CLIENTS),
        table(USERS),
        table(KEYS),
        table(FAMILY_RECORDS),
        table(FAMILY_JOURNAL),
        table(SETTINGS),
        table(REVOCATIONS),
        table(EDGES),
        table(AUDIT),
    ]
}

/// The data dir as of one read transaction.
pub struct RedbSnapshot {
    tx: ReadTransaction,
    hash_key: HashKey,
    /// The database of a stopped data dir, open for the snapshot alone (dropped after `tx`).
    _db: Option<Database>,
}

impl Snapshot for RedbSnapshot {
    fn write_to(&self, out: &mut dyn Write, taken_at: u64) -> Result<Summary, BackupError> {
        let tables = tables();
        let mut present = Vec::new();
        for handle in self.tx.list_tables().map_err(store_err)? {
            if handle.name() == FAMILIES_BY_USER.name() {
                // Built again from the family table when the restored data dir opens.
                continue;
            }
            match tables.iter().find(|t| t.name == handle.name()) {
                Some(t) => present.push(t),
                None => return Err(BackupError::UnknownTable(handle.name().to_owned())),
            }
        }
        if let Some(m) = self.tx.list_multimap_tables().map_err(store_err)?.next() {
            return Err(BackupError::UnknownTable(m.name().to_owned()));
        }
        let header = Header {
            taken_at,
            issuer_version: env!("CARGO_PKG_VERSION").to_owned(),
            hash_key: Zeroizing::new(*self.hash_key.bytes()),
        };
        let mut w = BackupWriter::start(out, &header)?;
        // In the order of `tables`, whatever order the database lists them in.
        for t in tables
            .iter()
            .filter(|t| present.iter().any(|p| p.name == t.name))
        {
            (t.dump)(&self.tx, &t.name, &mut w)?;
        }
        w.finish()
    }
}

impl RedbFile {
    /// A snapshot of the whole data dir as of now, while it serves.
    pub fn snapshot(&self) -> Result<RedbSnapshot, StoreError> {
        Ok(RedbSnapshot {
            tx: self.begin_read()?,
            hash_key: self.hash_key().clone(),
            _db: None,
        })
    }
}

/// A snapshot of the stopped data dir `dir`. Fails with [`BackupError::Locked`] while a process
/// has the database open, and writes nothing unless redb must repair a database a crash left.
pub fn snapshot_stopped(dir: &Path) -> Result<RedbSnapshot, BackupError> {
    for file in [DB_FILE, HASH_KEY_FILE] {
        if !dir.join(file).is_file() {
            return Err(BackupError::NoDataDir {
                dir: dir.to_owned(),
                file,
            });
        }
    }
    let bytes = Zeroizing::new(fs::read(dir.join(HASH_KEY_FILE)).map_err(BackupError::Read)?);
    let key: [u8; 32] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| BackupError::Store(StoreError::Corrupt("hash.key")))?;
    let db = match redb::Builder::new().open(dir.join(DB_FILE)) {
        Ok(db) => db,
        Err(redb::DatabaseError::DatabaseAlreadyOpen) => return Err(BackupError::Locked),
        Err(e) => return Err(store_err(e)),
    };
    Ok(RedbSnapshot {
        tx: db.begin_read().map_err(store_err)?,
        hash_key: HashKey::new(Zeroizing::new(key)),
        _db: Some(db),
    })
}

/// Where the frames of a backup go as [`walk`] checks them.
pub(super) trait Sink {
    fn table(&mut self, table: &TableCopy) -> Result<(), BackupError>;
    fn record(&mut self, key: &[u8], value: &[u8]) -> Result<(), BackupError>;
}

/// Reads the frames of `reader` to its end into `sink`, checking that each table is known and
/// comes once, and each record is a well-formed record of its table. Returns the tables and
/// records seen.
pub(super) fn walk<R: Read>(
    reader: &mut BackupReader<R>,
    sink: &mut dyn Sink,
) -> Result<(usize, u64), BackupError> {
    let tables = tables();
    let mut seen: Vec<&str> = Vec::new();
    let mut current: Option<&TableCopy> = None;
    let mut records = 0u64;
    loop {
        match reader.next_frame()? {
            Frame::Table(name) => {
                let t = tables
                    .iter()
                    .find(|t| t.name == name)
                    .ok_or(BackupError::UnknownTable(name))?;
                if seen.contains(&t.name.as_str()) {
                    return Err(BackupError::Damaged(format!("table {} twice", t.name)));
                }
                seen.push(&t.name);
                current = Some(t);
                sink.table(t)?;
            }
            Frame::Record(key, value) => {
                let t = current
                    .ok_or_else(|| BackupError::Damaged("a record outside any table".into()))?;
                if !(t.well_formed)(&key, &value) {
                    return Err(BackupError::Damaged(format!(
                        "a record of {} that is not well formed",
                        t.name
                    )));
                }
                sink.record(&key, &value)?;
                records += 1;
            }
            Frame::End => return Ok((seen.len(), records)),
        }
    }
}

/// A sink that keeps nothing: the check alone.
struct Check;

impl Sink for Check {
    fn table(&mut self, _: &TableCopy) -> Result<(), BackupError> {
        Ok(())
    }
    fn record(&mut self, _: &[u8], _: &[u8]) -> Result<(), BackupError> {
        Ok(())
    }
}

/// Writes into the tables of a write transaction.
struct Restore<'t> {
    tx: &'t WriteTransaction,
    table: Option<Box<dyn Load + 't>>,
}

impl Sink for Restore<'_> {
    fn table(&mut self, table: &TableCopy) -> Result<(), BackupError> {
        // One table open at a time.
        drop(self.table.take());
        self.table = Some((table.load)(self.tx, &table.name)?);
        Ok(())
    }
    fn record(&mut self, key: &[u8], value: &[u8]) -> Result<(), BackupError> {
        match &mut self.table {
            Some(t) => t.insert(key, value),
            None => Err(BackupError::Damaged("a record outside any table".into())),
        }
    }
}

/// Opens the backup at `from`, a file that passes the check of secret files
/// ([`crate::secret_file`]): whoever may change it chooses what a restore believes.
pub(super) fn open_backup(from: &Path) -> Result<BackupReader<BufReader<File>>, BackupError> {
    let file =
        crate::secret_file::open("backup", from, crate::secret_file::Rule::Secret)?.into_file();
    BackupReader::open(BufReader::with_capacity(1 << 20, file))
}

/// Reads the whole backup at `from` and checks it (digest, tables, records); writes nothing.
pub fn verify(from: &Path) -> Result<Summary, BackupError> {
    let mut reader = open_backup(from)?;
    let (tables, records) = walk(&mut reader, &mut Check)?;
    Ok(Summary {
        tables,
        records,
        bytes: fs::metadata(from).map_err(BackupError::Read)?.len(),
        taken_at: reader.header.taken_at,
    })
}

/// Whether `dir` is absent (false) or an empty directory (true); anything else is refused.
fn empty_or_absent(dir: &Path) -> Result<bool, BackupError> {
    match fs::read_dir(dir).map(|mut entries| entries.next().is_none()) {
        Ok(true) => Ok(true),
        Ok(false) => Err(BackupError::NotEmpty(dir.to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(BackupError::Target(e)),
    }
}

/// Makes the new data dir `dir` (absent, or empty, this user's and writable by no one else) of
/// the backup at `from`: the directory 0700, the database and the hash key 0600. The backup is
/// read and checked whole first; if it is damaged, or anything fails, nothing is left behind.
pub fn restore(from: &Path, dir: &Path) -> Result<Summary, BackupError> {
    empty_or_absent(dir)?;
    super::owner::check_data_dir(dir)?;
    let summary = verify(from)?;
    let existed = empty_or_absent(dir)?;
    if !existed {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(BackupError::Target)?;
    }
    let written = fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
        .map_err(BackupError::Target)
        .and_then(|()| write_data_dir(from, dir));
    if let Err(e) = written {
        for file in [DB_FILE, HASH_KEY_FILE] {
            let _ = fs::remove_file(dir.join(format!("{file}{RESTORING}")));
            let _ = fs::remove_file(dir.join(file));
        }
        if !existed {
            let _ = fs::remove_dir(dir);
        }
        return Err(e);
    }
    Ok(summary)
}

/// A new file of the data dir, 0600, that must not exist yet.
fn new_private_file(path: &Path) -> Result<File, BackupError> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(BackupError::Target)
}

fn write_data_dir(from: &Path, dir: &Path) -> Result<(), BackupError> {
    let mut reader = open_backup(from)?;
    let key_tmp = dir.join(format!("{HASH_KEY_FILE}{RESTORING}"));
    let mut key_file = new_private_file(&key_tmp)?;
    key_file
        .write_all(&*reader.header.hash_key)
        .and_then(|()| key_file.sync_all())
        .map_err(BackupError::Target)?;
    let db_tmp = dir.join(format!("{DB_FILE}{RESTORING}"));
    drop(new_private_file(&db_tmp)?);
    {
        let db = redb::Builder::new().create(&db_tmp).map_err(store_err)?;
        let tx = db.begin_write().map_err(store_err)?;
        let mut sink = Restore {
            tx: &tx,
            table: None,
        };
        walk(&mut reader, &mut sink)?;
        drop(sink);
        // Only a backup whose digest matched reaches this commit.
        tx.commit().map_err(store_err)?;
    }
    fs::rename(&key_tmp, dir.join(HASH_KEY_FILE)).map_err(BackupError::Target)?;
    fs::rename(&db_tmp, dir.join(DB_FILE)).map_err(BackupError::Target)?;
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(BackupError::Target)
}

impl Backup for RedbStore {
    fn snapshot(&self) -> Result<Box<dyn Snapshot + '_>, BackupError> {
        Ok(Box::new(self.watch(self.file.snapshot())?))
    }
}

impl Backups for RedbStore {
    fn backups(&self) -> Option<&dyn Backup> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::revocation::Revoked;

    /// Writes `bytes` to `path`, 0600 as a backup must be.
    fn write_private(path: &Path, bytes: &[u8]) {
        fs::write(path, bytes).unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(0o600)).unwrap();
    }

    /// A backup with a matching digest of one table and one record.
    fn crafted(table: &str, key: &[u8], value: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let header = Header {
            taken_at: 1,
            issuer_version: "crafted".into(),
            hash_key: Zeroizing::new([1; 32]),
        };
        let mut w = BackupWriter::start(&mut out, &header).unwrap();
        w.table(table).unwrap();
        w.record(key, value).unwrap();
        w.finish().unwrap();
        out
    }

    #[test]
    fn a_crafted_backup_with_a_matching_digest_is_still_checked_record_by_record() {
        let tmp = tempfile::tempdir().unwrap();
        let (file, dir) = (tmp.path().join("crafted"), tmp.path().join("new"));
        for (bytes, refused) in [
            (
                crafted("settings", b"access_ttl", &[1, 2, 3]),
                "not well formed",
            ),
            (crafted("clients", &[0xff, 0xfe], b"{}"), "not well formed"),
            (crafted("audit", &[0; 15], b"{}"), "not well formed"),
            (crafted("bogus", b"k", b"v"), "unknown to this issuer"),
        ] {
            write_private(&file, &bytes);
            let e = restore(&file, &dir).expect_err("refused");
            assert!(e.to_string().contains(refused), "{e}");
            assert!(!dir.exists(), "{e}: something was written");
        }
        write_private(
            &file,
            &crafted("settings", b"access_ttl", &60u64.to_le_bytes()),
        );
        restore(&file, &dir).unwrap();
        assert_eq!(RedbFile::open(&dir, 1).unwrap().access_ttl().unwrap(), 60);
    }

    #[test]
    fn a_restored_data_dir_holds_what_the_backup_saw() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        let file = RedbFile::open(&a, 1_000).unwrap();
        file.revoke(Revoked::User { name: "bob".into() }, 1_000, None)
            .unwrap();
        let snapshot = file.snapshot().unwrap();
        // Written after the snapshot began: not in the backup.
        file.revoke(
            Revoked::User {
                name: "carol".into(),
            },
            1_001,
            None,
        )
        .unwrap();
        let mut out = Vec::new();
        let summary = snapshot.write_to(&mut out, 1_002).unwrap();
        assert_eq!(summary.tables, tables().len());
        let backup = tmp.path().join("backup");
        write_private(&backup, &out);
        assert_eq!(verify(&backup).unwrap().records, summary.records);
        restore(&backup, &b).unwrap();
        let restored = RedbFile::open(&b, 1_003).unwrap();
        let page = restored.revocations(0, 1_003, usize::MAX).unwrap();
        assert_eq!(page.entries.len(), 1, "bob's alone");
        assert_eq!(page.latest, 1);
        assert_eq!(restored.hash_key().bytes(), file.hash_key().bytes());
        let keys = |f: &RedbFile| -> Vec<(u32, Vec<u8>)> {
            let ring = f.key_ring(1_003).unwrap();
            ring.keys()
                .iter()
                .map(|k| (k.id(), k.secret().to_vec()))
                .collect()
        };
        assert_eq!(keys(&restored), keys(&file));
    }
}
