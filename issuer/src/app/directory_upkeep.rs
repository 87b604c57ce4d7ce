//! The issuer's side of its directory: attached at start, replaced whole by a reload, its
//! servers probed and its users rechecked on a schedule.

use super::{directory_users, now, App};
use crate::config::DirectoryConfig;
use crate::directory::Directory;
use crate::store::StoreError;
use std::sync::Arc;

impl App {
    /// Signs users the store does not hold in with `directory` (and re-reads them at refresh).
    pub fn with_directory(mut self, directory: Arc<Directory>) -> Self {
        self.metrics.add_directory(directory.metrics());
        let users = Arc::new(directory_users::DirectoryUsers {
            directory: std::sync::RwLock::new(directory),
            users: self.store.clone(),
            audit: self.audit.clone(),
        });
        self.password.directory = Some(users.clone());
        self.refresh.directory = Some(users);
        self
    }

    /// Puts a directory of `config` in place of the one in use (a reload). `Ok(false)` when the
    /// issuer started without a directory: adding one takes a restart.
    pub fn replace_directory(
        &self,
        config: DirectoryConfig,
    ) -> Result<bool, crate::tls_client::TlsClientError> {
        match &self.password.directory {
            Some(users) => users.replace(config).map(|()| true),
            None => Ok(false),
        }
    }

    /// Whether the issuer signs users in with a directory.
    pub fn has_directory(&self) -> bool {
        self.password.directory.is_some()
    }

    /// How often the directory's users are rechecked; `None` without a directory.
    pub fn directory_recheck_every(&self) -> Option<std::time::Duration> {
        let users = self.password.directory.as_ref()?;
        Some(users.directory().recheck_every())
    }

    /// Seconds between probes of the directory's servers, with a directory.
    pub fn directory_probe_every(&self) -> Option<std::time::Duration> {
        let users = self.password.directory.as_ref()?;
        Some(users.directory().probe_every())
    }

    /// Probes every directory server once ([`crate::directory::Directory::probe`]).
    pub async fn probe_directory(&self) {
        if let Some(users) = &self.password.directory {
            users.directory().probe().await;
        }
    }

    /// One round of the directory recheck, if this issuer takes the round's lease (one issuer of
    /// several on PostgreSQL does it for all): every directory user who may hold a live refresh
    /// token family is re-read, and those disabled or removed are disabled here, their tokens
    /// revoked. `None` without a directory or the lease.
    pub async fn recheck_directory(&self) -> Result<Option<usize>, StoreError> {
        let Some(users) = &self.password.directory else {
            return Ok(None);
        };
        let at = now();
        // Held a second less than a round, so the next round's taker finds it free.
        let every = users.directory().recheck_every().as_secs();
        let lease = every.saturating_sub(1).max(1);
        let throttle = &self.password.throttle;
        if !throttle.try_lease("directory-recheck", at, lease).await? {
            return Ok(None);
        }
        let disabled = users
            .recheck(at, self.settings.refresh.absolute_ttl)
            .await?;
        if disabled > 0 {
            self.reload_revocations().await;
        }
        Ok(Some(disabled))
    }
}
