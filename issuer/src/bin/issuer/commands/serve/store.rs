//! What `issuer serve` runs on (part of the `issuer` binary): the store its location names, the
//! password back-off's book beside it, and the app over them.
//!
//! The embedded store opens before the issuer listens, and a data dir that does not open
//! (damaged, locked by another issuer, unwritable) ends the command at once: waiting cannot fix
//! it. So does one another user owns, or group or others may write
//! ([`issuer::store::redb::owner`]): they could replace its `hash.key`. PostgreSQL may be unreachable or still starting when the issuer starts (an orchestrator
//! starts both at once): the issuer listens first, answering `/livez` with 200 and everything
//! else with 503, and connects with a bounded back-off until the database answers, logging each
//! failed attempt. What only the operator can fix (the KEK, the password, the URL, a missing
//! privilege) ends the command.

use super::Serve;
use anyhow::{bail, Context as _};
use issuer::app::{now, App, Settings};
use issuer::store::redb::RedbStore;
use issuer::store::{Location, OpenError, Store};
use issuer::throttle::{MemoryBook, Throttle, ThrottleBook};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The first pause after a failed attempt to reach the database; each failure doubles it.
const FIRST_PAUSE: Duration = Duration::from_millis(500);
/// The longest pause between attempts.
const MAX_PAUSE: Duration = Duration::from_secs(10);

/// The state `issuer serve` runs on.
pub struct Opened {
    pub store: Arc<dyn Store>,
    /// The password back-off lives where the state does: with PostgreSQL every issuer shares it.
    pub book: Arc<dyn ThrottleBook>,
    /// The embedded store's data dir, where the admin socket is.
    pub data_dir: Option<PathBuf>,
}

/// Where `issuer serve` gets its store: the embedded one, already open, or a database to
/// connect to.
pub enum Source {
    Redb(Option<Opened>),
    Postgres(String),
}

/// The embedded store, opened now; a PostgreSQL location, connected to later ([`start`]).
pub fn prepare(s: &Serve) -> anyhow::Result<Source> {
    match s.dir.serve_location()? {
        Location::Redb(dir) => {
            issuer::store::redb::owner::check_data_dir(&dir)?;
            let cache = s
                .store_cache_mib
                .and_then(|m| usize::try_from(m << 20).ok());
            let store = match RedbStore::open_with_cache(&dir, now(), s.refresh_policy(), cache) {
                Err(OpenError::Locked) => bail!("{} is in use by another issuer", dir.display()),
                other => other.with_context(|| format!("opening {}", dir.display()))?,
            };
            Ok(Source::Redb(Some(Opened {
                store: Arc::new(store),
                book: Arc::new(MemoryBook::new(s.throttle_policy().max_delay * 2)),
                data_dir: Some(dir),
            })))
        }
        Location::Postgres(url) => Ok(Source::Postgres(url)),
    }
}

/// The app over the store of `source`, with `settings`: on PostgreSQL, once the database
/// answers (see the module's docs).
pub async fn start(s: &Serve, mut source: Source, settings: Settings) -> anyhow::Result<App> {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut pause = FIRST_PAUSE;
    let mut attempt = 0u32;
    loop {
        attempt += 1;
        let opened = match &mut source {
            Source::Redb(opened) => opened.take().context("the embedded store opens once")?,
            Source::Postgres(url) => match connect(s, url).await {
                Ok(opened) => opened,
                Err(e) if e.is_transient() => {
                    waiting(attempt, &e, &mut pause).await;
                    continue;
                }
                Err(e) => return Err(e).context("opening the PostgreSQL store"),
            },
        };
        let throttle = Throttle::new(s.throttle_policy(), opened.book);
        let concurrency = s.password_concurrency.unwrap_or(cpus);
        let store = opened.store;
        let built = match store.set_access_ttl(s.access_ttl).await {
            Ok(()) => App::new(store, settings.clone(), throttle, concurrency).await,
            Err(e) => Err(e),
        };
        match built {
            Ok(app) => return Ok(app),
            Err(e) if e.is_transient() && matches!(source, Source::Postgres(_)) => {
                waiting(attempt, &OpenError::Store(e), &mut pause).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Connects to the database at `url` with the files of `s`.
async fn connect(s: &Serve, url: &str) -> Result<Opened, OpenError> {
    let files = s.dir.pg_files();
    let store = Location::connect_postgres(url, &files, now(), s.refresh_policy()).await?;
    Ok(Opened {
        store: store.clone(),
        book: store,
        data_dir: None,
    })
}

/// Logs the failed attempt and waits `pause`, doubled for the next time up to [`MAX_PAUSE`].
async fn waiting(attempt: u32, e: &OpenError, pause: &mut Duration) {
    tracing::warn!(
        attempt,
        error = e.to_string(),
        retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
        "the database is not available; trying again"
    );
    tokio::time::sleep(*pause).await;
    *pause = (*pause * 2).min(MAX_PAUSE);
}
