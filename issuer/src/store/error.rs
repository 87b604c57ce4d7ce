//! Why a store operation failed. Opening a store can fail in ways no later operation can
//! ([`OpenError`]: the database is locked by another process, the configuration or the
//! key-encryption key is wrong); once open, an operation fails with a [`StoreError`]. Their
//! details go to logs and to the operator, never to a client.
//!
//! Each error keeps its cause as a value: the driver's error (redb's, tokio-postgres', the
//! pool's, an I/O error) is its [`std::error::Error::source`], never flattened into text, and
//! the error's own text does not repeat it (`{:#}` of anyhow, or [`crate::display::Causes`],
//! tells the whole chain). A cause whose text may quote a secret is kept [`Redacted`], and
//! tokio-postgres' error is told by [`DriverError`], without the server's DETAIL.

use std::sync::Arc;
use tokio_postgres::error::SqlState;

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another process (normally `issuer serve`) has the embedded database open.
    #[error("the database is open in another process")]
    Locked,
    /// The store's settings are unusable (the location, a password file, both a password file
    /// and a password in the URL).
    #[error("store configuration: {0}")]
    Config(String),
    /// The PostgreSQL URL does not parse. The parser's error is kept, but never shown: it may
    /// quote the URL, and with it a password.
    #[error("store configuration: the PostgreSQL URL does not parse")]
    Url(#[source] Redacted<tokio_postgres::Error>),
    /// No TLS configuration could be made for the database (`--store-ca-file`).
    #[error("store configuration (--store-ca-file)")]
    Tls(#[source] crate::tls_client::TlsClientError),
    /// The connection pool could not be built.
    #[error("store configuration: the connection pool")]
    Pool(#[source] deadpool_postgres::BuildError),
    /// The key-encryption key is missing, unreadable or does not open the stored secrets.
    #[error(transparent)]
    Kek(super::kek::KekError),
    /// What opening read or wrote failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A file of secrets (the KEK file, the password file) fails its check or cannot be read.
    #[error(transparent)]
    File(#[from] crate::secret_file::FileError),
}

impl OpenError {
    /// True when trying again later may succeed: the database is unreachable, starting, shutting
    /// down or read-only (`issuer serve` keeps trying); false for what only the operator can fix.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Store(e) if e.is_transient())
    }
}

impl StoreError {
    /// True for a failure of the moment ([`StoreError::Unavailable`], [`StoreError::Failover`],
    /// [`StoreError::Contention`], [`StoreError::Disk`]), which a client is answered 503 for and
    /// `issuer serve` keeps trying to open a store through. The one definition of transient.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unavailable(_) | Self::Failover(..) | Self::Contention | Self::Disk(_)
        )
    }

    /// The SQLSTATE PostgreSQL answered with, if it was one it sent.
    pub fn sql_state(&self) -> Option<&SqlState> {
        match self {
            Self::Postgres { code, .. } => code.as_ref(),
            _ => None,
        }
    }
}

impl From<std::io::Error> for OpenError {
    fn from(e: std::io::Error) -> Self {
        Self::Store(StoreError::Io(e))
    }
}

impl From<super::kek::KekError> for OpenError {
    fn from(e: super::kek::KekError) -> Self {
        match e {
            super::kek::KekError::File(e) => Self::File(e),
            e => Self::Kek(e),
        }
    }
}

/// Why an operation on an open store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The embedded database reported an error (its source).
    #[error("database")]
    Redb(#[source] ::redb::Error),
    /// The embedded database could not write to its disk (full, or failing). Nothing of the
    /// failed transaction was acknowledged (a commit that reported failure may still have reached
    /// the disk; the store then reads its state back); the store reopens the database before its
    /// next operation, and a client gets 503 until that works.
    #[error("the data dir's disk refused a write")]
    Disk(#[source] DiskFault),
    /// A file of the data dir could not be read or written.
    #[error("data dir")]
    Io(#[from] std::io::Error),
    /// A stored record does not decode, or a sealed one does not open.
    #[error("corrupt record in {0}")]
    Corrupt(&'static str),
    /// A stored record fails its integrity check (written without the key-encryption key); it
    /// is never used, nor changed into a genuine one.
    #[error("a record in {0} fails its integrity check (tampered); remove it and add it again")]
    Tampered(&'static str),
    /// The database asked for the transaction to be retried (serialization failure or deadlock)
    /// more often than the store retries; a client gets 503 and may retry.
    #[error("the database reported contention on every attempt")]
    Contention,
    /// The database cannot be reached or is shutting down; a client gets 503.
    #[error("the database is unavailable")]
    Unavailable(#[source] Unreachable),
    /// A PostgreSQL connection reached a server that refuses writes or is going away, as in a
    /// failover ([`ConnectionFault`]): the connection is dropped from the pool, never reused; a
    /// client gets 503. The driver's error is the source.
    #[error("the database connection is unusable ({0})")]
    Failover(ConnectionFault, #[source] DriverError),
    /// PostgreSQL reported an error: its SQLSTATE when the server sent one (as tokio-postgres
    /// keeps it), and the driver's error as the source. No source: prepared statements went
    /// missing lately (the readiness probe's verdict).
    #[error("postgres{}", Hint(code.as_ref()))]
    Postgres {
        code: Option<SqlState>,
        #[source]
        source: Option<DriverError>,
    },
    /// The group commit this operation was part of failed (logged once by the writer); the
    /// batch's error, shared by each of its operations, is the source.
    #[error("refresh batch failed")]
    Batch(#[source] Arc<StoreError>),
    /// A background task of the store has stopped.
    #[error("the store's {0} has stopped")]
    Stopped(&'static str),
}

/// Why the embedded database's disk refused a write ([`StoreError::Disk`]).
#[derive(Debug, thiserror::Error)]
pub enum DiskFault {
    /// A read or write of the file failed.
    #[error(transparent)]
    Io(std::io::Error),
    /// An earlier write failed, and redb refuses the database until it is reopened.
    #[error("an earlier write failed")]
    EarlierWrite,
    /// The database is closed, to be reopened by the next operation.
    #[error("the database is being reopened")]
    Reopening,
    /// The database failed a write and a transaction still holds the file.
    #[error("the database is still closing after a failed write")]
    StillClosing,
    /// Reopening the database after a failed write failed.
    #[error("reopening the database")]
    Reopen(#[source] Box<OpenError>),
    /// The failure of the group commit this operation was part of, shared by all of them.
    #[error(transparent)]
    Batch(Arc<DiskFault>),
}

/// Why the database cannot be reached ([`StoreError::Unavailable`]).
#[derive(Debug, thiserror::Error)]
pub enum Unreachable {
    /// The driver's error: no connection, a connection lost or closed, the server starting or
    /// stopping.
    #[error(transparent)]
    Driver(DriverError),
    /// The pool had no connection to give within its wait, or is closed.
    #[error(transparent)]
    Pool(deadpool_postgres::PoolError),
    /// The change listener's connection cannot serve: it did not answer in time, its server is
    /// read-only, it hears nothing (what is wrong with it).
    #[error("{0}")]
    Listener(&'static str),
    /// An operation, its commit included, took longer than its bound: a commit on a demoted
    /// primary waiting for a standby that is gone, or a server too busy to answer.
    #[error("no answer within {} ms", .0.as_millis())]
    Unanswered(std::time::Duration),
}

/// A cause whose text may quote a secret (the parser of a PostgreSQL URL may quote the URL, and
/// with it a password): kept for the code that inspects it ([`Redacted::inner`]), and told only
/// as withheld.
pub struct Redacted<E>(E);

impl<E> Redacted<E> {
    /// Keeps `e`, whose text is never shown.
    pub fn new(e: E) -> Self {
        Self(e)
    }

    /// The cause itself. Its text may hold a secret: never print it.
    pub fn inner(&self) -> &E {
        &self.0
    }
}

impl<E> std::fmt::Debug for Redacted<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Redacted(..)")
    }
}

impl<E> std::fmt::Display for Redacted<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("details withheld (they may quote a password)")
    }
}

impl<E> std::error::Error for Redacted<E> {}

/// The error of tokio-postgres, told without what may hold a secret: of an error the server
/// sent, its SQLSTATE and message (`28P01: password authentication failed for user "app"`),
/// never its DETAIL or HINT, which may quote a row's values; of any other, the driver's text
/// and causes (`invalid configuration: password missing`, `error connecting to server:
/// Connection refused`). The error itself is [`DriverError::get`].
#[derive(Debug)]
pub struct DriverError(tokio_postgres::Error);

impl DriverError {
    /// Keeps the driver's error.
    pub fn new(e: tokio_postgres::Error) -> Self {
        Self(e)
    }

    /// The driver's error, whole (a server error's DETAIL may quote a row: never log it).
    pub fn get(&self) -> &tokio_postgres::Error {
        &self.0
    }
}

impl std::fmt::Display for DriverError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_db_error() {
            Some(db) => write!(f, "{}: {}", db.code().code(), db.message()),
            None => write!(f, "{}", self.0),
        }
    }
}

impl std::error::Error for DriverError {
    /// The driver's cause (an I/O error, a setting it refused), but not the server's error,
    /// whose text this error's own is.
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self.0.as_db_error() {
            Some(_) => None,
            None => std::error::Error::source(&self.0),
        }
    }
}

/// What [`StoreError::Postgres`] adds to its text for a missing prepared statement: what causes
/// that.
struct Hint<'a>(Option<&'a SqlState>);

impl std::fmt::Display for Hint<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(code) if *code == SqlState::INVALID_SQL_STATEMENT_NAME => {
                write!(f, " ({}{POOLER_HINT})", code.code())
            }
            _ => Ok(()),
        }
    }
}

/// Said after a prepared statement of a connection went missing: what causes that.
pub(crate) const POOLER_HINT: &str = "; the connection's prepared statements are gone: is this a \
     pooler in transaction mode that does not keep them, PgBouncer before 1.21 or without \
     max_prepared_statements? See docs/deploy-postgres.md, \"A pooler in front\"";
/// Why a PostgreSQL connection is no longer worth keeping ([`StoreError::Failover`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionFault {
    /// The server refused a write (SQLSTATE 25006 `read_only_sql_transaction`): a standby, a
    /// demoted primary, or a database set read-only. Nothing was written; the operation is
    /// retried once on a fresh connection.
    ReadOnly,
    /// The server is shutting down or not yet accepting connections (57P01 `admin_shutdown`,
    /// 57P02 `crash_shutdown`, 57P03 `cannot_connect_now`).
    ShuttingDown,
}

impl std::fmt::Display for ConnectionFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ReadOnly => "read-only",
            Self::ShuttingDown => "server shutting down",
        })
    }
}
