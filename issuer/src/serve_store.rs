//! What `issuer serve` runs on (part of the `issuer` binary): the store its location names, and
//! the password back-off's book beside it.

use crate::Serve;
use anyhow::{bail, Context as _};
use issuer::app::now;
use issuer::store::redb::RedbStore;
use issuer::store::{Location, OpenError, Store};
use issuer::throttle::{MemoryBook, ThrottleBook};
use std::path::PathBuf;
use std::sync::Arc;

/// The state `issuer serve` runs on.
pub struct Opened {
    pub store: Arc<dyn Store>,
    /// The password back-off lives where the state does: with PostgreSQL every issuer shares it.
    pub book: Arc<dyn ThrottleBook>,
    /// The embedded store's data dir, where the admin socket is.
    pub data_dir: Option<PathBuf>,
    /// The store as the log names it.
    pub name: String,
}

pub fn open_store(s: &Serve, runtime: &tokio::runtime::Runtime) -> anyhow::Result<Opened> {
    let refresh = s.refresh_policy();
    match s.dir.location()? {
        Location::Redb(dir) => {
            let cache = s
                .store_cache_mib
                .and_then(|m| usize::try_from(m << 20).ok());
            let store = match RedbStore::open_with_cache(&dir, now(), refresh, cache) {
                Err(OpenError::Locked) => bail!("{} is in use by another issuer", dir.display()),
                other => other.with_context(|| format!("opening {}", dir.display()))?,
            };
            Ok(Opened {
                store: Arc::new(store),
                book: Arc::new(MemoryBook::new(s.throttle_policy().max_delay * 2)),
                name: format!("redb:{}", dir.display()),
                data_dir: Some(dir),
            })
        }
        Location::Postgres(url) => {
            let files = s.dir.pg_files();
            let store =
                runtime.block_on(Location::connect_postgres(&url, &files, now(), refresh))?;
            Ok(Opened {
                store: store.clone(),
                book: store,
                data_dir: None,
                name: "postgres".to_owned(),
            })
        }
    }
}
