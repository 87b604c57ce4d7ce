//! Why a store operation failed. Opening a store can fail in ways no later operation can
//! ([`OpenError`]: the database is locked by another process, the configuration or the
//! key-encryption key is wrong); once open, an operation fails with a [`StoreError`]. Their
//! details go to logs and to the operator, never to a client.

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// Another process (normally `issuer serve`) has the embedded database open.
    #[error("the database is open in another process")]
    Locked,
    /// The store's settings are unusable (the location, the URL, a CA file).
    #[error("store configuration: {0}")]
    Config(String),
    /// The key-encryption key is missing, unreadable or does not open the stored secrets.
    #[error("{0}")]
    Kek(String),
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
    pub fn sql_state(&self) -> Option<&tokio_postgres::error::SqlState> {
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
            e => Self::Kek(e.to_string()),
        }
    }
}

/// Why an operation on an open store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The embedded database reported an error.
    #[error("database: {0}")]
    Redb(::redb::Error),
    /// The embedded database could not write to its disk (full, or failing). Nothing of the
    /// failed transaction was acknowledged (a commit that reported failure may still have reached
    /// the disk; the store then reads its state back); the store reopens the database before its
    /// next operation, and a client gets 503 until that works.
    #[error("the data dir's disk refused a write: {0}")]
    Disk(String),
    /// A file of the data dir could not be read or written.
    #[error("data dir: {0}")]
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
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// A PostgreSQL connection reached a server that refuses writes or is going away, as in a
    /// failover ([`ConnectionFault`]): the connection is dropped from the pool, never reused; a
    /// client gets 503.
    #[error("the database connection is unusable ({0}): {1}")]
    Failover(ConnectionFault, String),
    /// PostgreSQL reported an error: its SQLSTATE when the server sent one (as tokio-postgres
    /// keeps it), and what it said with its causes (never a password).
    #[error("postgres: {message}")]
    Postgres {
        code: Option<tokio_postgres::error::SqlState>,
        message: String,
    },
    /// The group commit this operation was part of failed (logged once by the writer).
    #[error("refresh batch failed: {0}")]
    Batch(String),
    /// A background task of the store has stopped.
    #[error("the store's {0} has stopped")]
    Stopped(&'static str),
}

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
