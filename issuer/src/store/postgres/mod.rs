//! The PostgreSQL backend: the state of any number of issuers on one database, written to
//! CockroachDB's rules (`docs/deploy-postgres.md`):
//!
//! - every transaction is SERIALIZABLE and retried here, bounded, when the database asks for it
//!   (SQLSTATE 40001 serialization failure, 40P01 deadlock): a lost race never reaches a client;
//! - no advisory locks, no sequences, no `LISTEN/NOTIFY`: changes are read fresh by every request
//!   or polled (the key ring once a second);
//! - the schema is created and migrated by the issuer itself, one versioned migration at a time,
//!   under a lock row (a lease in a table, not an advisory lock): of issuers starting at once one
//!   migrates, the others wait for it;
//! - a connection that finds the server read-only or shutting down (a failover) is dropped, never
//!   reused (`fault`, `retrying!`); `target_session_attrs=read-write` in a multi-host URL
//!   makes new connections find the primary;
//! - signing keys and the hash key are sealed under the key-encryption key ([`Kek`]);
//! - client and user records carry a MAC under a key derived from the hash key ([`records`]), so
//!   write access to the database alone grants no power.
//!
//! This file connects and holds the retrying transactions ([`retrying!`], [`serializable!`]); each
//! trait of the store has its own file, named as in the redb backend: [`accounts`]
//! ([`crate::store::Clients`], [`crate::store::Users`]), [`keys`] ([`crate::store::SigningKeys`]),
//! [`refresh`] ([`crate::store::Families`]), [`revocations`], [`edges`], [`audit`], [`sweep`],
//! [`settings`] ([`crate::store::HashKeyed`], [`crate::store::AccessLifetime`],
//! [`crate::store::Liveness`]), [`backup`] ([`crate::store::backup::Backups`]) and [`throttle`]
//! ([`crate::store::throttle::ThrottleBook`]). Beside them, `import` and `export` move the
//! whole store in and out as [`crate::store::contents::Contents`] (`issuer restore` and `issuer
//! backup --store URL`).

mod accounts;
mod audit;
mod backup;
mod connect;
mod edges;
mod export;
mod fault;
mod import;
mod keys;
mod listen;
mod proofs;
mod records;
mod refresh;
mod revocations;
mod schema;
mod settings;
mod sweep;
mod throttle;
mod tls;

use connect::pool_config;
pub use connect::ConnectOptions;
pub(crate) use fault::classify;
pub use import::SERVING_WINDOW;

use super::kek::{Kek, KekError};
use super::{OpenError, RefreshPolicy, StoreError};
use crate::secrets::HashKey;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use records::RecordKey;
use std::time::Duration;
use zeroize::Zeroizing;

/// Most attempts of one transaction that the database keeps asking to retry. PostgreSQL's
/// serializable isolation tracks reads per index page, so concurrent rotations on a small table
/// conflict often and need a few rounds; the pauses add up to about 2.5 s at most.
pub(crate) const MAX_ATTEMPTS: u32 = 40;
/// Connections per issuer. A commit waits for PostgreSQL's WAL flush, which concurrent commits
/// share, so more transactions in flight help, until the database's processes compete for the
/// CPU (`docs/deploy-postgres.md` has the figures).
const POOL_SIZE: usize = 16;
/// How long a request waits for a connection or the database before it is answered 503.
const WAIT: Duration = Duration::from_secs(5);
/// How long one attempt of an operation may take, its commit included ([`retrying!`]), before
/// the request is answered 503: well inside a proxy's usual route timeout (Envoy's is 15 s).
pub(crate) const ANSWER_WITHIN: Duration = WAIT;

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        classify(e)
    }
}

/// A sealed value that does not open once the store is open: the database changed under it.
impl From<KekError> for StoreError {
    fn from(_: KekError) -> Self {
        StoreError::Corrupt("a sealed secret")
    }
}

/// Runs `$body` (with `$conn` a pooled connection; `?` on database errors) as statements in
/// transactions of their own, retrying the whole body while the database reports contention. A
/// connection that met a failover ([`StoreError::Failover`]) is dropped from the pool with the
/// idle ones ([`PgStore::discard`]); a refused write (read-only) is tried once more on a fresh
/// connection, which `target_session_attrs=read-write` points at the new primary.
///
/// Each attempt is bounded by [`ANSWER_WITHIN`] (or `within` the given `Option<Duration>`, `None`
/// for no bound): a commit on a demoted primary waits for its synchronous standby forever, and
/// a request must be answered 503 instead. An attempt that ran out of time may have committed;
/// its connection, still waiting, is dropped ([`PgStore::abandon`]). A client's retry is safe:
/// a rotation retried inside the window gets the same successor.
macro_rules! retrying {
    ($store:expr, |$conn:ident| $body:block) => {
        $crate::store::postgres::retrying!(
            $store,
            within Some($crate::store::postgres::ANSWER_WITHIN),
            |$conn| $body
        )
    };
    ($store:expr, within $within:expr, |$conn:ident| $body:block) => {{
        let within: Option<std::time::Duration> = $within;
        let mut attempt = 0u32;
        let mut fresh = false;
        loop {
            let result: Result<_, StoreError> = match $store.connection().await {
                Err(e) => Err(e),
                Ok(mut held) => {
                    let attempt = async {
                        let $conn = &mut held;
                        Ok($body)
                    };
                    let result: Result<_, StoreError> = match within {
                        None => attempt.await,
                        Some(bound) => tokio::time::timeout(bound, attempt)
                            .await
                            .unwrap_or(Err(StoreError::Unavailable(
                                $crate::store::Unreachable::Unanswered(bound),
                            ))),
                    };
                    match &result {
                        Err(StoreError::Failover(..)) => $store.discard(held),
                        Err(StoreError::Unavailable($crate::store::Unreachable::Unanswered(
                            bound,
                        ))) => $store.abandon(held, *bound),
                        _ => {}
                    }
                    result
                }
            };
            match result {
                Err(StoreError::Contention)
                    if attempt + 1 < $crate::store::postgres::MAX_ATTEMPTS =>
                {
                    attempt += 1;
                    $crate::store::postgres::back_off(attempt).await;
                }
                Err(StoreError::Failover($crate::store::ConnectionFault::ReadOnly, _))
                    if !fresh =>
                {
                    fresh = true;
                }
                other => {
                    $store.lost.note(&other);
                    break other;
                }
            }
        }
    }};
}
pub(crate) use retrying;

/// Runs `$body` (with `$tx` a SERIALIZABLE transaction; `?` on database errors) and commits,
/// retrying the whole transaction while the database reports contention ([`retrying!`], whose
/// `within` it takes too).
macro_rules! serializable {
    ($store:expr, |$tx:ident| $body:block) => {
        $crate::store::postgres::serializable!(
            $store,
            within Some($crate::store::postgres::ANSWER_WITHIN),
            |$tx| $body
        )
    };
    ($store:expr, within $within:expr, |$tx:ident| $body:block) => {
        $crate::store::postgres::retrying!($store, within $within, |conn| {
            let $tx = conn
                .build_transaction()
                .isolation_level(tokio_postgres::IsolationLevel::Serializable)
                .start()
                .await?;
            let out = $body;
            $tx.commit().await?;
            out
        })
    };
}
pub(crate) use serializable;

/// A short, growing pause with full jitter before another attempt, so that transactions that
/// collided do not collide again.
pub(crate) async fn back_off(attempt: u32) {
    let ceiling = 2u64.saturating_pow(attempt.min(7));
    let pause = 1 + rand::random::<u64>() % ceiling;
    tokio::time::sleep(Duration::from_millis(pause)).await;
}

/// The issuer's state in PostgreSQL (or a database speaking its protocol).
pub struct PgStore {
    pool: Pool,
    kek: Kek,
    hash_key: HashKey,
    records: RecordKey,
    policy: RefreshPolicy,
    /// Prepared statements found missing (a pooler in transaction mode): not ready a while.
    lost: fault::LostStatements,
    /// Where the change listener connects; `None` on an engine without notifications.
    listen: Option<listen::ListenTo>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore").finish_non_exhaustive()
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("records serialize")
}

/// Seconds as the database's BIGINT.
fn int(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn uint(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl PgStore {
    /// Connects to `url` (libpq form, `postgres://user@host:port/db?...`), migrates the schema,
    /// and opens the sealed secrets with `kek`. A new database gets its hash key and first
    /// signing key; a database whose secrets do not open with `kek` is an error, never a new key.
    pub async fn connect(
        url: &str,
        kek: Kek,
        now: u64,
        policy: RefreshPolicy,
    ) -> Result<Self, OpenError> {
        Self::connect_with(url, None, kek, now, policy).await
    }

    /// [`PgStore::connect`], with TLS to the database when the URL says `sslmode=require` or a
    /// `ca_file` (PEM) is given. The server's certificate is always verified, against `ca_file` or
    /// the system's roots, for the host name or address of the URL (stricter than libpq's
    /// `require`, which checks nothing).
    pub async fn connect_with(
        url: &str,
        ca_file: Option<&std::path::Path>,
        kek: Kek,
        now: u64,
        policy: RefreshPolicy,
    ) -> Result<Self, OpenError> {
        let options = ConnectOptions {
            ca_file,
            password: None,
            listen_url: None,
        };
        Self::connect_options(url, options, kek, now, policy).await
    }

    /// [`PgStore::connect_with`], with the password from `options` (read from a file) when the
    /// URL holds none.
    pub async fn connect_options(
        url: &str,
        options: ConnectOptions<'_>,
        kek: Kek,
        now: u64,
        policy: RefreshPolicy,
    ) -> Result<Self, OpenError> {
        let ca_file = options.ca_file;
        let config = pool_config(url, options.password.clone())?;
        let mut listen_config = match options.listen_url {
            Some(listen) => pool_config(listen, options.password)?,
            None => config.clone(),
        };
        listen_config.application_name(listen::APPLICATION_NAME);
        let manager_config = ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        // Each URL says whether its connections use TLS (a pooler on the host and the database
        // behind it may differ).
        let connector = |config: &tokio_postgres::Config| {
            let tls = match config.get_ssl_mode() {
                tokio_postgres::config::SslMode::Disable => false,
                tokio_postgres::config::SslMode::Require => true,
                _ => ca_file.is_some(),
            };
            tls.then(|| tls::connector(ca_file)).transpose()
        };
        let listen = listen::ListenTo {
            tls: connector(&listen_config)?,
            config: listen_config,
        };
        let manager = match connector(&config)? {
            Some(tls) => Manager::from_config(config, tls, manager_config),
            None => Manager::from_config(config, tokio_postgres::NoTls, manager_config),
        };
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .wait_timeout(Some(WAIT))
            .create_timeout(Some(WAIT))
            .recycle_timeout(Some(WAIT))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(OpenError::Pool)?;
        let placeholder = HashKey::new(Zeroizing::new([0; 32]));
        let mut store = Self {
            pool,
            kek,
            records: RecordKey::derive(&placeholder),
            hash_key: placeholder,
            policy,
            lost: Default::default(),
            listen: None,
        };
        store.migrate(now).await?;
        if store.notifies().await? {
            store.listen = Some(listen);
        }
        store.hash_key = store.init_secrets(now).await?;
        store.records = RecordKey::derive(&store.hash_key);
        Ok(store)
    }

    /// Drops `conn` (it met a failover: read-only or its server going away) and the idle
    /// connections, which reached the same server: the next requests connect afresh.
    pub(crate) fn discard(&self, conn: deadpool_postgres::Object) {
        drop(deadpool_postgres::Object::take(conn));
        let dropped = self.pool.retain(|_, _| false).removed.len();
        tracing::warn!(
            idle_dropped = dropped,
            "a database connection met a failover; reconnecting"
        );
    }

    /// Drops `conn`, which did not answer `within` its bound ([`retrying!`]): its server may
    /// still be waiting (for a standby that is gone) and the connection cannot be reused. The
    /// idle ones are kept: a slow answer alone says nothing of them.
    pub(crate) fn abandon(&self, conn: deadpool_postgres::Object, within: Duration) {
        drop(deadpool_postgres::Object::take(conn));
        tracing::warn!(
            within_ms = within.as_millis() as u64,
            "the database did not answer in time; its connection is dropped"
        );
    }

    pub(crate) async fn connection(&self) -> Result<deadpool_postgres::Object, StoreError> {
        self.pool.get().await.map_err(fault::classify_pool)
    }
}
