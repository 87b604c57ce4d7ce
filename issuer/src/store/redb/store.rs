//! [`RedbStore`]: the redb file behind the store's traits, with refresh operations, journal
//! merges and the sweep on the writer thread.

use super::{writer, RedbFile};
use crate::secrets::HashKey;
use crate::store::backup::{Backup, BackupError, Backups, Snapshot};
use crate::store::edges::EdgeReport;
use crate::store::keys::{PromoteOutcome, RetireOutcome, Rotated};
use crate::store::revocation::{RevocationPage, Revoked};
use crate::store::{
    AccessLifetime, Audit, AuditEvent, ClientChange, ClientRecord, Clients, Edges, Families,
    FamilyRevocation, HashKeyed, KeyInfo, Liveness, OpenError, RefreshInfo, RefreshPolicy,
    Revocations, RotateOutcome, SigningKeys, StoreError, Sweep, UserChange, UserRecord, Users,
};
use shared::KeyRing;
use std::path::Path;
use zeroize::Zeroizing;

/// [`RedbFile`] behind the [`crate::store::Store`] traits. Refresh operations, journal merges and the sweep
/// go through one writer thread that group-commits the operations.
#[derive(Debug)]
pub struct RedbStore {
    file: std::sync::Arc<RedbFile>,
    writer: writer::RefreshWriter,
}

impl RedbStore {
    /// Opens the data dir (see [`RedbFile::open`]) and starts its refresh writer with `policy`.
    pub fn open(dir: &Path, now: u64, policy: RefreshPolicy) -> Result<Self, OpenError> {
        Self::open_with_cache(dir, now, policy, None)
    }

    /// [`RedbStore::open`] with the page cache bounded (see [`RedbFile::open_with_cache`]).
    pub fn open_with_cache(
        dir: &Path,
        now: u64,
        policy: RefreshPolicy,
        cache_bytes: Option<usize>,
    ) -> Result<Self, OpenError> {
        let file = std::sync::Arc::new(RedbFile::open_with_cache(dir, now, cache_bytes)?);
        let writer = writer::RefreshWriter::spawn(file.clone(), policy)?;
        Ok(Self { file, writer })
    }

    /// The data dir.
    pub fn dir(&self) -> &Path {
        self.file.dir()
    }

    /// Passes `result` on, noting a failed write so that the next operation reopens the database.
    fn watch<T>(&self, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if let Err(StoreError::Disk(_)) = &result {
            self.file.mark_failed();
        }
        result
    }
}

impl Backup for RedbStore {
    fn snapshot(&self) -> Result<Box<dyn Snapshot + '_>, BackupError> {
        Ok(Box::new(self.watch(self.file.snapshot())?))
    }
}

impl Backups for RedbStore {
    fn backups(&self) -> Option<&dyn Backup> {
        Some(self)
    }
}

impl HashKeyed for RedbStore {
    fn hash_key(&self) -> &HashKey {
        self.file.hash_key()
    }
}

#[async_trait::async_trait]
impl AccessLifetime for RedbStore {
    async fn access_ttl(&self) -> Result<u64, StoreError> {
        self.watch(self.file.access_ttl())
    }

    async fn set_access_ttl(&self, ttl: u64) -> Result<(), StoreError> {
        self.watch(self.file.set_access_ttl(ttl))
    }
}

#[async_trait::async_trait]
impl Liveness for RedbStore {
    async fn probe_write(&self, now: u64) -> Result<(), StoreError> {
        self.watch(self.file.probe_write(now))
    }
}

#[async_trait::async_trait]
impl Clients for RedbStore {
    async fn client(&self, id: &str) -> Result<Option<ClientRecord>, StoreError> {
        self.watch(self.file.client(id))
    }

    async fn clients(&self) -> Result<Vec<(String, ClientRecord)>, StoreError> {
        self.watch(self.file.clients())
    }

    async fn add_client(&self, id: &str, rec: &ClientRecord) -> Result<bool, StoreError> {
        self.watch(self.file.add_client(id, rec))
    }

    async fn update_client(
        &self,
        id: &str,
        change: ClientChange,
        now: u64,
    ) -> Result<bool, StoreError> {
        self.watch(self.file.update_client(id, change, now))
    }

    async fn remove_client(&self, id: &str, now: u64) -> Result<bool, StoreError> {
        self.watch(self.file.remove_client(id, now))
    }
}

#[async_trait::async_trait]
impl Users for RedbStore {
    async fn user(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        self.watch(self.file.user(name))
    }

    async fn users(&self) -> Result<Vec<(String, UserRecord)>, StoreError> {
        self.watch(self.file.users())
    }

    async fn add_user(&self, name: &str, rec: &UserRecord) -> Result<bool, StoreError> {
        self.watch(self.file.add_user(name, rec))
    }

    async fn update_user(
        &self,
        name: &str,
        change: &UserChange,
        now: u64,
    ) -> Result<bool, StoreError> {
        self.watch(self.file.update_user(name, change, now))
    }

    async fn remove_user(&self, name: &str, now: u64) -> Result<bool, StoreError> {
        self.watch(self.file.remove_user(name, now))
    }
}

#[async_trait::async_trait]
impl SigningKeys for RedbStore {
    async fn key_infos(&self, now: u64) -> Result<Vec<KeyInfo>, StoreError> {
        self.watch(self.file.key_infos(now))
    }

    async fn key_ring(&self, now: u64) -> Result<KeyRing, StoreError> {
        self.watch(self.file.key_ring(now))
    }

    async fn rotate_key(&self, now: u64, delay: u64) -> Result<Option<Rotated>, StoreError> {
        self.watch(self.file.rotate_key(now, delay))
    }

    async fn retire_key(&self, kid: u32, now: u64) -> Result<RetireOutcome, StoreError> {
        self.watch(self.file.retire_key(kid, now))
    }

    async fn promote_key(&self, kid: u32, now: u64) -> Result<PromoteOutcome, StoreError> {
        self.watch(self.file.promote_key(kid, now))
    }
}

#[async_trait::async_trait]
impl Edges for RedbStore {
    async fn record_edges(
        &self,
        reports: Vec<EdgeReport>,
        forget_before: u64,
    ) -> Result<usize, StoreError> {
        // A synchronous write with fsync: off the runtime's threads.
        let file = self.file.clone();
        let recorded =
            tokio::task::spawn_blocking(move || file.record_edges(reports, forget_before))
                .await
                .map_err(|_| StoreError::Stopped("edge report task"))?;
        self.watch(recorded)
    }

    async fn edges(&self) -> Result<Vec<EdgeReport>, StoreError> {
        self.watch(self.file.edges())
    }
}

#[async_trait::async_trait]
impl Families for RedbStore {
    async fn start_family(
        &self,
        client: &str,
        user: &str,
        now: u64,
    ) -> Result<Zeroizing<String>, StoreError> {
        self.watch(self.writer.start(client, user, now).await)
    }

    async fn rotate_family(
        &self,
        presented: &str,
        client: &str,
        now: u64,
    ) -> Result<RotateOutcome, StoreError> {
        self.watch(self.writer.rotate(presented, client, now).await)
    }

    async fn revoke_family(
        &self,
        token: &str,
        client: &str,
        now: u64,
    ) -> Result<FamilyRevocation, StoreError> {
        self.watch(self.writer.revoke(token, client, now).await)
    }

    async fn family_info(&self, token: &str, now: u64) -> Result<Option<RefreshInfo>, StoreError> {
        self.watch(self.file.refresh_info(token, now))
    }
}

#[async_trait::async_trait]
impl Revocations for RedbStore {
    async fn revoke(&self, what: Revoked, now: u64, until: Option<u64>) -> Result<u64, StoreError> {
        // A synchronous write with fsync, which also waits for the refresh writer's transaction:
        // off the runtime's threads.
        let file = self.file.clone();
        let recorded = tokio::task::spawn_blocking(move || file.revoke(what, now, until))
            .await
            .map_err(|_| StoreError::Stopped("revocation task"))?;
        self.watch(recorded)
    }

    async fn revocations(
        &self,
        since: u64,
        now: u64,
        limit: usize,
    ) -> Result<RevocationPage, StoreError> {
        self.watch(self.file.revocations(since, now, limit))
    }
}

#[async_trait::async_trait]
impl Sweep for RedbStore {
    async fn sweep(&self, now: u64) -> Result<u64, StoreError> {
        self.watch(self.writer.sweep(now).await)
    }
}

#[async_trait::async_trait]
impl Audit for RedbStore {
    async fn record_audit(&self, events: &[AuditEvent]) -> Result<(), StoreError> {
        // A write with fsync: off the runtime's threads, as a revocation.
        let file = self.file.clone();
        let events = events.to_vec();
        let recorded = tokio::task::spawn_blocking(move || file.record_audit(&events))
            .await
            .map_err(|_| StoreError::Stopped("audit task"))?;
        self.watch(recorded)
    }

    async fn audit_since(&self, since: u64, limit: usize) -> Result<Vec<AuditEvent>, StoreError> {
        self.watch(self.file.audit_since(since, limit))
    }

    async fn sweep_audit(&self, before: u64) -> Result<u64, StoreError> {
        let file = self.file.clone();
        let swept = tokio::task::spawn_blocking(move || file.sweep_audit(before))
            .await
            .map_err(|_| StoreError::Stopped("audit task"))?;
        self.watch(swept)
    }
}
