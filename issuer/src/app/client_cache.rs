//! Registered clients, cached for a second: every token request authenticates its client, and
//! with the PostgreSQL store that would be a database round trip each time. A change made through
//! this issuer's admin socket clears the cache at once; one made elsewhere (another issuer's host,
//! straight to the database) is seen within [`CLIENT_TTL`].

use crate::store::{ClientRecord, Store, StoreError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a cached client (or its absence) is believed.
pub const CLIENT_TTL: Duration = Duration::from_secs(1);
/// Most clients cached; a full cache starts over (unknown ids a client invents cannot grow it).
const MAX_CLIENTS: usize = 10_000;

/// The cache.
#[derive(Debug, Default)]
pub struct ClientCache {
    entries: Mutex<HashMap<String, (Instant, Option<ClientRecord>)>>,
}

impl ClientCache {
    /// The client with this id, from the cache if it is fresh, else from `store`.
    pub async fn get(
        &self,
        store: &dyn Store,
        id: &str,
    ) -> Result<Option<ClientRecord>, StoreError> {
        let now = Instant::now();
        if let Some((at, rec)) = self.lock().get(id) {
            if now.duration_since(*at) < CLIENT_TTL {
                return Ok(rec.clone());
            }
        }
        let rec = store.client(id).await?;
        let mut entries = self.lock();
        if entries.len() >= MAX_CLIENTS {
            entries.clear();
        }
        entries.insert(id.to_owned(), (now, rec.clone()));
        Ok(rec)
    }

    /// Forgets everything (after an admin change through this issuer).
    pub fn clear(&self) {
        self.lock().clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Option<ClientRecord>)>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}
