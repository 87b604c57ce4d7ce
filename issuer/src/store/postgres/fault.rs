//! What a PostgreSQL error means for the operation and for the connection it failed on: a
//! lost race to run again, a failover that spoils the connection (dropped, never reused), the
//! database unreachable, or a fault to report.

use crate::store::{ConnectionFault, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};
use tokio_postgres::error::SqlState;

/// What a SQLSTATE says about the operation and the connection it failed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    /// A lost race: run the transaction again.
    Contention,
    /// The connection met a failover: drop it.
    Failover(ConnectionFault),
    /// The database cannot be reached now.
    Unavailable,
    /// Anything else: a fault to report.
    Other,
}

fn class_of(code: &SqlState) -> Class {
    if *code == SqlState::T_R_SERIALIZATION_FAILURE || *code == SqlState::T_R_DEADLOCK_DETECTED {
        Class::Contention
    } else if *code == SqlState::READ_ONLY_SQL_TRANSACTION {
        Class::Failover(ConnectionFault::ReadOnly)
    } else if *code == SqlState::ADMIN_SHUTDOWN
        || *code == SqlState::CRASH_SHUTDOWN
        || *code == SqlState::CANNOT_CONNECT_NOW
    {
        Class::Failover(ConnectionFault::ShuttingDown)
    } else if code.code().starts_with("08") || code.code().starts_with("57P") {
        Class::Unavailable
    } else {
        Class::Other
    }
}

/// A database failure, classified: worth another attempt, the connection spoiled by a failover,
/// the database unreachable, or another.
pub(crate) fn classify(e: tokio_postgres::Error) -> StoreError {
    match e.code() {
        Some(c) => match class_of(c) {
            Class::Contention => StoreError::Contention,
            Class::Failover(fault) => StoreError::Failover(fault, describe(&e)),
            Class::Unavailable => StoreError::Unavailable(describe(&e)),
            Class::Other => StoreError::Postgres {
                code: Some(c.clone()),
                message: describe(&e),
            },
        },
        // A setting the server needs is missing (a password): no retry helps.
        None if e.to_string() == "invalid configuration" => StoreError::Postgres {
            code: None,
            message: describe(&e),
        },
        None => StoreError::Unavailable(describe(&e)),
    }
}

/// How long the readiness probe fails after a prepared statement was found missing.
const NOT_READY_AFTER_LOST: u64 = 60;

/// Prepared statements found missing on a connection, which only a pooler that hands one
/// connection's transactions to different server connections does (PgBouncer in transaction
/// mode without `max_prepared_statements`). Such a store fails some operations at random,
/// however often others pass, so the readiness probe fails from the first one seen until
/// [`NOT_READY_AFTER_LOST`] after the last, saying why.
#[derive(Debug, Default)]
pub(crate) struct LostStatements {
    /// How many were seen, and how many the last probe had seen.
    seen: AtomicU64,
    probed: AtomicU64,
    /// The probe fails until then (seconds since the epoch).
    until: AtomicU64,
}

impl LostStatements {
    /// Counts `result` if it is a missing prepared statement.
    pub(crate) fn note<T>(&self, result: &Result<T, StoreError>) {
        if let Err(e) = result {
            if e.sql_state() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) {
                self.seen.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The readiness probe's verdict at `now`: an error while a missing statement was seen lately.
    pub(crate) fn check(&self, now: u64) -> Result<(), StoreError> {
        let seen = self.seen.load(Ordering::Relaxed);
        if self.probed.swap(seen, Ordering::Relaxed) != seen {
            self.until
                .store(now + NOT_READY_AFTER_LOST, Ordering::Relaxed);
        }
        if now < self.until.load(Ordering::Relaxed) {
            return Err(StoreError::Postgres {
                code: Some(SqlState::INVALID_SQL_STATEMENT_NAME),
                message: format!("26000: prepared statements went missing{POOLER_HINT}"),
            });
        }
        Ok(())
    }
}

/// Said after a prepared statement of this connection went missing: what causes that.
const POOLER_HINT: &str = " (the connection's prepared statements are gone: is this a pooler in \
     transaction mode that does not keep them, PgBouncer before 1.21 or without \
     max_prepared_statements? See docs/deploy-postgres.md, \"A pooler in front\")";

/// The error with its causes (tokio-postgres says only "invalid configuration" or "error
/// connecting to server" and keeps what is wrong in the source): "invalid configuration: password
/// missing". A password is never part of either.
fn describe(e: &tokio_postgres::Error) -> String {
    let mut text = match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    };
    if e.code() == Some(&SqlState::INVALID_SQL_STATEMENT_NAME) {
        text.push_str(POOLER_HINT);
    }
    if e.as_db_error().is_none() {
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_statement_fails_the_probe_a_minute_after_the_last() {
        let lost = LostStatements::default();
        assert!(lost.check(100).is_ok());
        lost.note::<()>(&Err(StoreError::Postgres {
            code: Some(SqlState::INVALID_SQL_STATEMENT_NAME),
            message: "26000".into(),
        }));
        lost.note::<()>(&Err(StoreError::Contention));
        lost.note(&Ok(()));
        let err = lost.check(101).unwrap_err().to_string();
        assert!(err.contains("max_prepared_statements"), "{err}");
        assert!(lost.check(160).is_err());
        assert!(lost.check(161).is_ok());
    }

    #[test]
    fn failover_codes_spoil_the_connection() {
        let class = |code: &str| class_of(&SqlState::from_code(code));
        assert_eq!(class("25006"), Class::Failover(ConnectionFault::ReadOnly));
        for code in ["57P01", "57P02", "57P03"] {
            assert_eq!(
                class(code),
                Class::Failover(ConnectionFault::ShuttingDown),
                "{code}"
            );
        }
        assert_eq!(class("40001"), Class::Contention);
        assert_eq!(class("40P01"), Class::Contention);
        for code in ["08006", "08001", "57P04"] {
            assert_eq!(class(code), Class::Unavailable, "{code}");
        }
        for code in ["23505", "42P01", "28P01", "42501"] {
            assert_eq!(class(code), Class::Other, "{code}");
        }
        let read_only = StoreError::Failover(ConnectionFault::ReadOnly, "25006".into());
        assert!(read_only.is_transient());
        let refused = StoreError::Postgres {
            code: Some(SqlState::INVALID_PASSWORD),
            message: "28P01: password authentication failed".into(),
        };
        assert!(!refused.is_transient());
        assert_eq!(refused.sql_state(), Some(&SqlState::INVALID_PASSWORD));
    }
}
