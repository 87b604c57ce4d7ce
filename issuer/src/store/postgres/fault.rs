//! What a PostgreSQL error means for the operation and for the connection it failed on: a
//! lost race to run again, a failover that spoils the connection (dropped, never reused), the
//! database unreachable, or a fault to report.

use crate::store::{ConnectionFault, DriverError, StoreError, Unreachable};
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

/// What an error without a SQLSTATE says, by what it is: the connection closed, an I/O error
/// in its causes, or no cause at all (a timeout, an answer the driver could not read) mean the
/// database cannot be reached now; any other cause is a setting the driver refused before
/// asking the server (a password missing, no host): no retry helps. Never by the error's text.
fn class_without_code(closed: bool, cause: Option<&(dyn std::error::Error + 'static)>) -> Class {
    let mut io = false;
    let mut next = cause;
    while let Some(c) = next {
        io |= c.is::<std::io::Error>();
        next = c.source();
    }
    if closed || io || cause.is_none() {
        Class::Unavailable
    } else {
        Class::Other
    }
}

/// A database failure, classified by its SQLSTATE or, without one, by the type of its causes:
/// worth another attempt, the connection spoiled by a failover, the database unreachable, or
/// another. The driver's error is kept as the source.
pub(crate) fn classify(e: tokio_postgres::Error) -> StoreError {
    let class = match e.code() {
        Some(code) => class_of(code),
        None => class_without_code(e.is_closed(), std::error::Error::source(&e)),
    };
    let code = e.code().cloned();
    let e = DriverError::new(e);
    match class {
        Class::Contention => StoreError::Contention,
        Class::Failover(fault) => StoreError::Failover(fault, e),
        Class::Unavailable => StoreError::Unavailable(Unreachable::Driver(e)),
        Class::Other => StoreError::Postgres {
            code,
            source: Some(e),
        },
    }
}

/// The pool's failure to give a connection: the driver's error classified, or the pool's own
/// (no connection within its wait, the pool closed), the database unreachable.
pub(crate) fn classify_pool(e: deadpool_postgres::PoolError) -> StoreError {
    match e {
        deadpool_postgres::PoolError::Backend(e) => classify(e),
        other => StoreError::Unavailable(Unreachable::Pool(other)),
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
                source: None,
            });
        }
        Ok(())
    }
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
            source: None,
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
        let read_only =
            StoreError::Failover(ConnectionFault::ReadOnly, DriverError::new(driver_error()));
        assert!(read_only.is_transient());
        let refused = StoreError::Postgres {
            code: Some(SqlState::INVALID_PASSWORD),
            source: None,
        };
        assert!(!refused.is_transient());
        assert_eq!(refused.sql_state(), Some(&SqlState::INVALID_PASSWORD));
    }

    /// An error of the driver's, as tests can make one (a timeout: no SQLSTATE, no cause).
    fn driver_error() -> tokio_postgres::Error {
        tokio_postgres::Error::__private_api_timeout()
    }

    /// A cause of no type the classification knows, whatever it says.
    #[derive(Debug)]
    struct Said(&'static str);

    impl std::fmt::Display for Said {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Said {}

    #[test]
    fn without_a_sqlstate_the_type_of_the_cause_decides_never_its_text() {
        // The words tokio-postgres uses for one kind, on a cause of the other, and back.
        for text in [
            "invalid configuration",
            "password missing",
            "connection refused",
        ] {
            let io = std::io::Error::other(text);
            assert_eq!(class_without_code(false, Some(&io)), Class::Unavailable);
            let setting = Said(text);
            assert_eq!(class_without_code(false, Some(&setting)), Class::Other);
            assert_eq!(class_without_code(true, Some(&setting)), Class::Unavailable);
        }
        assert_eq!(class_without_code(false, None), Class::Unavailable);
        assert!(classify(driver_error()).is_transient());
    }

    #[test]
    fn the_driver_error_is_the_source() {
        use std::error::Error as _;
        let e = classify(driver_error());
        assert!(
            matches!(e, StoreError::Unavailable(Unreachable::Driver(_))),
            "{e:?}"
        );
        let cause = e.source().expect("a source");
        assert!(cause.is::<Unreachable>(), "{cause:?}");
        let told = crate::display::Causes(&e).to_string();
        assert_eq!(
            told,
            "the database is unavailable: timeout waiting for server"
        );
        let failover = StoreError::Failover(
            ConnectionFault::ShuttingDown,
            DriverError::new(driver_error()),
        );
        let source = failover
            .source()
            .and_then(|s| s.downcast_ref::<DriverError>());
        assert!(
            source.is_some_and(|d| d.get().code().is_none()),
            "{failover:?}"
        );
        let lost = StoreError::Postgres {
            code: Some(SqlState::INVALID_SQL_STATEMENT_NAME),
            source: Some(DriverError::new(driver_error())),
        };
        assert!(lost.source().unwrap().is::<DriverError>());
        assert!(
            lost.to_string().contains("max_prepared_statements"),
            "{lost}"
        );
    }
}
