//! The backup of the embedded store (`issuer backup`, `issuer restore`): what a backend offers
//! ([`Backup`], a snapshot of the whole state at one moment, written out later), and the file
//! format ([`BackupWriter`], [`BackupReader`]).
//!
//! A backup is one file: a header (the format's magic and version, the time it was taken, the
//! issuer version that took it, the data dir's hash key), then every table of the database as a
//! name followed by its records (key and value bytes as the database stores them), then a SHA-256
//! digest of every byte before it. The digest detects a damaged or truncated file; it is no
//! signature (whoever can write the file can write a matching digest), so the file is kept where
//! only the operators can read or write it, as the data dir is: it holds every secret of the
//! store.
//!
//! ```text
//! "mms-issuer-backup\n" u32 version | u64 taken_at | u16 len, issuer version | 32 bytes hash key
//! 'T' u16 len, table name                      -- a table; its records follow
//! 'R' u32 len, key | u32 len, value            -- one record
//! 'E' 32 bytes SHA-256 of everything before    -- the end; nothing may follow
//! ```
//! Integers are little-endian.
//!
//! The same format carries a PostgreSQL store to a data dir and back
//! ([`crate::store::contents`]); PostgreSQL's own tools back up the database as well
//! (`docs/deploy-postgres.md`).

use super::StoreError;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::PathBuf;
use zeroize::Zeroizing;

/// The first bytes of every backup.
pub const MAGIC: &[u8] = b"mms-issuer-backup\n";
/// The format version this issuer writes and reads.
pub const VERSION: u32 = 1;
/// The longest table name, key or value a backup may hold (a longer length is damage).
const MAX_FIELD: usize = 64 << 20;

/// Why a backup or a restore failed. Nothing names a secret.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// Reading the database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The backup could not be written out.
    #[error("writing the backup: {0}")]
    Write(std::io::Error),
    /// The backup could not be read.
    #[error("reading the backup: {0}")]
    Read(std::io::Error),
    /// The backup fails the check of secret files, or cannot be opened.
    #[error(transparent)]
    File(#[from] crate::secret_file::FileError),
    /// The file does not start as a backup does.
    #[error("not an issuer backup (it does not start with the backup format's mark)")]
    NotBackup,
    /// The file is a backup of a later format.
    #[error("backup format version {0} is not the one this issuer reads (1); restore it with the issuer version that wrote it")]
    Version(u32),
    /// The file is damaged: truncated, changed, or not well formed.
    #[error("the backup is damaged: {0}")]
    Damaged(String),
    /// A table this issuer does not know, in the backup or the database.
    #[error("table {0:?} is unknown to this issuer version; use the version that wrote it")]
    UnknownTable(String),
    /// The restore's target is not an empty directory.
    #[error("{} is not empty (restore makes a new data dir)", .0.display())]
    NotEmpty(PathBuf),
    /// The data dir to back up has no database.
    #[error("{} holds no data dir (no {file})", .dir.display())]
    NoDataDir {
        /// The directory named.
        dir: PathBuf,
        /// The file missing.
        file: &'static str,
    },
    /// The database is open in a process that does not answer on the admin socket.
    #[error("the database is open in a process that does not answer on its admin socket")]
    Locked,
    /// The restore's target is another user's, or group or others may write it.
    #[error(transparent)]
    Unsafe(#[from] crate::store::redb::owner::DirError),
    /// Writing the new data dir failed (nothing of it is left behind).
    #[error("writing the new data dir: {0}")]
    Target(std::io::Error),
    /// A backup asked of a server on the PostgreSQL store, through its admin socket.
    #[error("a server on the PostgreSQL store takes no backup through its admin socket: run `issuer backup --store URL --kek-file FILE --to FILE`, or use PostgreSQL's own tools (docs/deploy-postgres.md)")]
    Postgres,
    /// The database a restore was to fill holds data already.
    #[error("the database is not empty: it holds {0}; restore into a new, empty database")]
    DatabaseNotEmpty(String),
    /// An issuer serves on the database a restore was to fill (its readiness probe wrote this
    /// many seconds ago).
    #[error("an issuer serves on this database (its readiness probe wrote {0} s ago); stop every issuer on it before a restore")]
    Serving(u64),
}

/// What a backup holds, for the operator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Tables in it.
    pub tables: usize,
    /// Records in it, over all tables.
    pub records: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// When it was taken (seconds since the epoch).
    pub taken_at: u64,
}

/// The state of the store at one moment, to be written out as a backup.
pub trait Snapshot {
    /// Writes the backup of this snapshot to `out` (blocking; the snapshot does not change
    /// while it is written, whatever the store does meanwhile).
    fn write_to(&self, out: &mut dyn Write, taken_at: u64) -> Result<Summary, BackupError>;
}

/// A store that can be backed up while it serves.
pub trait Backup: Send + Sync {
    /// A snapshot of the whole state: everything committed before this call began, and nothing
    /// half of a transaction (blocking).
    fn snapshot(&self) -> Result<Box<dyn Snapshot + '_>, BackupError>;
}

/// Whether a store backs up itself while it serves: the embedded store does. The PostgreSQL store
/// has no [`Backup`]: several issuers serve on it, and `issuer backup --store URL` reads it
/// whole instead ([`crate::store::postgres::PgStore::export`]).
pub trait Backups {
    /// The store's [`Backup`], if it has one.
    fn backups(&self) -> Option<&dyn Backup>;
}

/// The header of a backup.
pub struct Header {
    /// When the backup was taken.
    pub taken_at: u64,
    /// The issuer version that took it.
    pub issuer_version: String,
    /// The data dir's hash key.
    pub hash_key: Zeroizing<[u8; 32]>,
}

/// Writes a backup: [`BackupWriter::start`], then each table and its records, then
/// [`BackupWriter::finish`].
pub struct BackupWriter<'w> {
    out: &'w mut dyn Write,
    digest: Sha256,
    summary: Summary,
}

impl<'w> BackupWriter<'w> {
    /// Writes the header.
    pub fn start(out: &'w mut dyn Write, header: &Header) -> Result<Self, BackupError> {
        let mut w = Self {
            out,
            digest: Sha256::new(),
            summary: Summary {
                taken_at: header.taken_at,
                ..Summary::default()
            },
        };
        w.put(MAGIC)?;
        w.put(&VERSION.to_le_bytes())?;
        w.put(&header.taken_at.to_le_bytes())?;
        w.short(header.issuer_version.as_bytes())?;
        w.put(&*header.hash_key)?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<(), BackupError> {
        self.digest.update(bytes);
        self.summary.bytes += bytes.len() as u64;
        self.out.write_all(bytes).map_err(BackupError::Write)
    }

    fn short(&mut self, bytes: &[u8]) -> Result<(), BackupError> {
        let len = u16::try_from(bytes.len())
            .map_err(|_| BackupError::Damaged("a name longer than 64 KiB".into()))?;
        self.put(&len.to_le_bytes())?;
        self.put(bytes)
    }

    fn long(&mut self, bytes: &[u8]) -> Result<(), BackupError> {
        let len = u32::try_from(bytes.len())
            .ok()
            .filter(|&n| n as usize <= MAX_FIELD)
            .ok_or_else(|| BackupError::Damaged("a record larger than 64 MiB".into()))?;
        self.put(&len.to_le_bytes())?;
        self.put(bytes)
    }

    /// Starts the records of table `name`.
    pub fn table(&mut self, name: &str) -> Result<(), BackupError> {
        self.summary.tables += 1;
        self.put(b"T")?;
        self.short(name.as_bytes())
    }

    /// One record of the current table.
    pub fn record(&mut self, key: &[u8], value: &[u8]) -> Result<(), BackupError> {
        self.summary.records += 1;
        self.put(b"R")?;
        self.long(key)?;
        self.long(value)
    }

    /// Writes the end and its digest, and flushes.
    pub fn finish(mut self) -> Result<Summary, BackupError> {
        self.put(b"E")?;
        let digest = self.digest.clone().finalize();
        self.summary.bytes += digest.len() as u64;
        self.out.write_all(&digest).map_err(BackupError::Write)?;
        self.out.flush().map_err(BackupError::Write)?;
        Ok(self.summary)
    }
}

/// One item of a backup after its header.
pub enum Frame {
    /// The records that follow are of this table.
    Table(String),
    /// A record: key and value bytes.
    Record(Vec<u8>, Zeroizing<Vec<u8>>),
    /// The end, its digest checked, nothing after it.
    End,
}

/// Reads a backup, checking its digest: [`BackupReader::open`] reads the header, then
/// [`BackupReader::next`] gives each [`Frame`] until [`Frame::End`]. Whatever was read before
/// `End` is not known to be intact yet.
pub struct BackupReader<R: Read> {
    inner: R,
    digest: Sha256,
    /// The header.
    pub header: Header,
    done: bool,
}

fn truncated(e: std::io::Error) -> BackupError {
    if e.kind() == std::io::ErrorKind::UnexpectedEof {
        BackupError::Damaged("it ends early (truncated)".into())
    } else {
        BackupError::Read(e)
    }
}

impl<R: Read> BackupReader<R> {
    /// Reads and checks the header of the backup `inner`.
    pub fn open(mut inner: R) -> Result<Self, BackupError> {
        let mut magic = [0u8; MAGIC.len()];
        match inner.read_exact(&mut magic) {
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(BackupError::NotBackup)
            }
            other => other.map_err(BackupError::Read)?,
        }
        if magic != MAGIC {
            return Err(BackupError::NotBackup);
        }
        let mut r = Self {
            inner,
            digest: Sha256::new(),
            header: Header {
                taken_at: 0,
                issuer_version: String::new(),
                hash_key: Zeroizing::new([0; 32]),
            },
            done: false,
        };
        r.digest.update(MAGIC);
        let version = u32::from_le_bytes(r.array()?);
        if version != VERSION {
            return Err(BackupError::Version(version));
        }
        r.header.taken_at = u64::from_le_bytes(r.array()?);
        let name = r.short()?;
        r.header.issuer_version = String::from_utf8(name)
            .map_err(|_| BackupError::Damaged("the issuer version is not text".into()))?;
        let key = r.fill(32)?;
        r.header.hash_key.copy_from_slice(&key);
        Ok(r)
    }

    fn fill(&mut self, len: usize) -> Result<Zeroizing<Vec<u8>>, BackupError> {
        let mut buf = Zeroizing::new(vec![0u8; len]);
        self.inner.read_exact(&mut buf).map_err(truncated)?;
        self.digest.update(&*buf);
        Ok(buf)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], BackupError> {
        let mut buf = [0u8; N];
        self.inner.read_exact(&mut buf).map_err(truncated)?;
        self.digest.update(buf);
        Ok(buf)
    }

    fn short(&mut self) -> Result<Vec<u8>, BackupError> {
        let len = u16::from_le_bytes(self.array()?);
        Ok(self.fill(usize::from(len))?.to_vec())
    }

    fn long(&mut self) -> Result<Zeroizing<Vec<u8>>, BackupError> {
        let len = u32::from_le_bytes(self.array()?) as usize;
        if len > MAX_FIELD {
            return Err(BackupError::Damaged(format!("a record claims {len} bytes")));
        }
        self.fill(len)
    }

    /// The next frame. After [`Frame::End`] the digest matched and the file ended there.
    pub fn next_frame(&mut self) -> Result<Frame, BackupError> {
        if self.done {
            return Ok(Frame::End);
        }
        let [tag] = self.array::<1>()?;
        match tag {
            b'T' => {
                let name = self.short()?;
                String::from_utf8(name)
                    .map(Frame::Table)
                    .map_err(|_| BackupError::Damaged("a table name is not text".into()))
            }
            b'R' => {
                let key = self.long()?.to_vec();
                Ok(Frame::Record(key, self.long()?))
            }
            b'E' => {
                let expected = self.digest.clone().finalize();
                let mut found = [0u8; 32];
                self.inner.read_exact(&mut found).map_err(truncated)?;
                if found.as_slice() != expected.as_slice() {
                    return Err(BackupError::Damaged(
                        "its checksum does not match its content (changed or corrupted)".into(),
                    ));
                }
                let mut more = [0u8; 1];
                if self.inner.read(&mut more).map_err(BackupError::Read)? != 0 {
                    return Err(BackupError::Damaged("bytes follow its end".into()));
                }
                self.done = true;
                Ok(Frame::End)
            }
            other => Err(BackupError::Damaged(format!(
                "an unknown frame (byte {other:#04x})"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut out = Vec::new();
        let header = Header {
            taken_at: 1_700_000_000,
            issuer_version: "0.1.0".into(),
            hash_key: Zeroizing::new([7; 32]),
        };
        let mut w = BackupWriter::start(&mut out, &header).unwrap();
        w.table("clients").unwrap();
        w.record(b"app", b"{}").unwrap();
        w.table("settings").unwrap();
        let summary = w.finish().unwrap();
        assert_eq!((summary.tables, summary.records), (2, 1));
        assert_eq!(summary.bytes, out.len() as u64);
        out
    }

    fn read_all(bytes: &[u8]) -> Result<Vec<String>, BackupError> {
        let mut r = BackupReader::open(bytes)?;
        let mut seen = vec![hex::encode(*r.header.hash_key)];
        loop {
            match r.next_frame()? {
                Frame::Table(t) => seen.push(t),
                Frame::Record(k, v) => seen.push(format!("{}={}", k.len(), v.len())),
                Frame::End => return Ok(seen),
            }
        }
    }

    #[test]
    fn a_backup_reads_back_as_written() {
        let seen = read_all(&sample()).unwrap();
        assert_eq!(seen[0], hex::encode([7; 32]));
        assert_eq!(seen[1..], ["clients", "3=2", "settings"]);
    }

    #[test]
    fn every_changed_or_missing_byte_is_refused() {
        let good = sample();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x20;
            assert!(
                read_all(&bad).is_err(),
                "a change at byte {at} went unnoticed"
            );
            assert!(
                read_all(&good[..at]).is_err(),
                "a backup cut at {at} was read"
            );
        }
        let mut longer = good.clone();
        longer.push(0);
        assert!(matches!(read_all(&longer), Err(BackupError::Damaged(_))));
        assert!(matches!(
            read_all(b"PK\x03\x04 not a backup"),
            Err(BackupError::NotBackup)
        ));
    }
}
