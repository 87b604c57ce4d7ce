//! The embedded backend: durable state in one redb file in a data dir (clients, users, signing
//! keys, refresh token families, settings), beside the hash key file. redb lets one process open
//! the file, so this backend serves one issuer.
//!
//! [`RedbFile`] is the synchronous store; [`RedbStore`] puts it behind [`Store`], with refresh
//! token writes group-committed by one writer thread ([`writer`]).
//!
//! Writes use redb's default `Durability::Immediate`: when a function returns, its change is on
//! disk. A refresh rotation is one write transaction, so a successor handed to a client is never
//! lost by a crash and two clients can never receive different successors of one token.

pub mod writer;

use super::keys::KeyRecord;
use super::{
    ClientChange, ClientRecord, KeyInfo, KeyState, RefreshInfo, RefreshOp, RefreshOutcome,
    RefreshPolicy, RefreshRejection, Rotation, Store, StoreError, UserChange, UserRecord,
    DEFAULT_ACCESS_TTL,
};
use crate::secrets::{self, HashKey};
use redb::{
    Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition,
    WriteTransaction,
};
use serde::{Deserialize, Serialize};
use shared::{Key, KeyRing};
use std::fs::{self, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

const CLIENTS: TableDefinition<&str, &[u8]> = TableDefinition::new("clients");
const USERS: TableDefinition<&str, &[u8]> = TableDefinition::new("users");
const KEYS: TableDefinition<u32, &[u8]> = TableDefinition::new("keys");
const REFRESH: TableDefinition<&[u8], &[u8]> = TableDefinition::new("refresh_tokens");
const FAMILIES: TableDefinition<&[u8], &[u8]> = TableDefinition::new("refresh_families");
const SETTINGS: TableDefinition<&str, u64> = TableDefinition::new("settings");

/// A table of JSON records by name, and its name for errors.
type Records = (
    TableDefinition<'static, &'static str, &'static [u8]>,
    &'static str,
);
const CLIENT_RECORDS: Records = (CLIENTS, "clients");
const USER_RECORDS: Records = (USERS, "users");

/// File name of the database in the data dir.
pub const DB_FILE: &str = "issuer.redb";
/// File name of the hash key in the data dir.
pub const HASH_KEY_FILE: &str = "hash.key";

macro_rules! db_err {
    ($($t:ty),*) => {$(impl From<$t> for StoreError {
        fn from(e: $t) -> Self { StoreError::Redb(e.into()) }
    })*};
}
db_err!(
    redb::TransactionError,
    redb::TableError,
    redb::StorageError,
    redb::CommitError
);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum RefreshState {
    Active,
    Rotated { at: u64 },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RefreshRecord {
    family: String,
    client: String,
    user: String,
    expires_at: u64,
    state: RefreshState,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct FamilyRecord {
    client: String,
    user: String,
    created_at: u64,
    expires_at: u64,
    revoked_at: Option<u64>,
    current: String,
}

fn enc<T: Serialize>(v: &T) -> Vec<u8> {
    serde_json::to_vec(v).expect("records serialize")
}

fn dec<T: for<'de> Deserialize<'de>>(bytes: &[u8], table: &'static str) -> Result<T, StoreError> {
    serde_json::from_slice(bytes).map_err(|_| StoreError::Corrupt(table))
}

/// The open data dir, synchronous.
pub struct RedbFile {
    db: Database,
    hash_key: HashKey,
    dir: PathBuf,
}

impl std::fmt::Debug for RedbFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbFile").field("dir", &self.dir).finish()
    }
}

fn private_file(path: &Path) -> Result<fs::File, std::io::Error> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    Ok(f)
}

fn load_hash_key(dir: &Path) -> Result<HashKey, StoreError> {
    let path = dir.join(HASH_KEY_FILE);
    match fs::read(&path) {
        Ok(bytes) => {
            let bytes = Zeroizing::new(bytes);
            let arr: [u8; 32] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| StoreError::Corrupt("hash.key"))?;
            Ok(HashKey::new(Zeroizing::new(arr)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let key = secrets::random32();
            let tmp = dir.join("hash.key.tmp");
            let mut f = private_file(&tmp)?;
            f.write_all(&*key)?;
            f.sync_all()?;
            fs::rename(&tmp, &path)?;
            fs::File::open(dir)?.sync_all()?;
            Ok(HashKey::new(key))
        }
        Err(e) => Err(e.into()),
    }
}

impl RedbFile {
    /// Opens (creating if needed) the data dir: the directory 0700, database and hash key 0600.
    /// A new data dir gets its first signing key. Fails with [`StoreError::Locked`] while another
    /// process has the database open.
    pub fn open(dir: &Path, now: u64) -> Result<Self, StoreError> {
        Self::open_with_cache(dir, now, None)
    }

    /// [`RedbFile::open`] with redb's page cache bounded to `cache_bytes` (redb's default: 1 GiB).
    pub fn open_with_cache(
        dir: &Path,
        now: u64,
        cache_bytes: Option<usize>,
    ) -> Result<Self, StoreError> {
        fs::create_dir_all(dir)?;
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
        let hash_key = load_hash_key(dir)?;
        let db_path = dir.join(DB_FILE);
        drop(private_file(&db_path)?);
        let mut builder = redb::Builder::new();
        if let Some(bytes) = cache_bytes {
            builder.set_cache_size(bytes);
        }
        let db = match builder.create(&db_path) {
            Ok(db) => db,
            Err(redb::DatabaseError::DatabaseAlreadyOpen) => return Err(StoreError::Locked),
            Err(e) => return Err(StoreError::Redb(e.into())),
        };
        let store = Self {
            db,
            hash_key,
            dir: dir.to_owned(),
        };
        store.init(now)?;
        Ok(store)
    }

    fn init(&self, now: u64) -> Result<(), StoreError> {
        let tx = self.db.begin_write()?;
        {
            tx.open_table(CLIENTS)?;
            tx.open_table(USERS)?;
            tx.open_table(REFRESH)?;
            tx.open_table(FAMILIES)?;
            tx.open_table(SETTINGS)?;
            let mut keys = tx.open_table(KEYS)?;
            if keys.is_empty()? {
                let rec = KeyRecord {
                    secret: hex::encode(*secrets::random32()),
                    created_at: now,
                    signs_from: now,
                    superseded_at: None,
                };
                keys.insert(1, enc(&rec).as_slice())?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// The data dir.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The hash key of this data dir.
    pub fn hash_key(&self) -> &HashKey {
        &self.hash_key
    }

    // ----- settings -----

    /// The access token lifetime last recorded by `issuer serve`.
    pub fn access_ttl(&self) -> Result<u64, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(SETTINGS)?;
        Ok(t.get("access_ttl")?
            .map(|v| v.value())
            .unwrap_or(DEFAULT_ACCESS_TTL))
    }

    /// Records the access token lifetime (it decides when superseded keys retire).
    pub fn set_access_ttl(&self, ttl: u64) -> Result<(), StoreError> {
        let tx = self.db.begin_write()?;
        tx.open_table(SETTINGS)?.insert("access_ttl", ttl)?;
        tx.commit()?;
        Ok(())
    }

    // ----- clients and users: JSON records by name -----

    fn record<T: for<'de> Deserialize<'de>>(
        &self,
        table: Records,
        name: &str,
    ) -> Result<Option<T>, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(table.0)?;
        t.get(name)?.map(|v| dec(v.value(), table.1)).transpose()
    }

    fn records<T: for<'de> Deserialize<'de>>(
        &self,
        table: Records,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let tx = self.db.begin_read()?;
        let t = tx.open_table(table.0)?;
        t.iter()?
            .map(|r| {
                let (k, v) = r?;
                Ok((k.value().to_owned(), dec(v.value(), table.1)?))
            })
            .collect()
    }

    fn add_record<T: Serialize>(
        &self,
        table: Records,
        name: &str,
        rec: &T,
    ) -> Result<bool, StoreError> {
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(table.0)?;
            if t.get(name)?.is_some() {
                return Ok(false);
            }
            t.insert(name, enc(rec).as_slice())?;
        }
        tx.commit()?;
        Ok(true)
    }

    fn update_record<T: Serialize + for<'de> Deserialize<'de>>(
        &self,
        table: Records,
        name: &str,
        f: impl FnOnce(&mut T),
    ) -> Result<bool, StoreError> {
        let tx = self.db.begin_write()?;
        {
            let mut t = tx.open_table(table.0)?;
            let Some(mut rec) = t
                .get(name)?
                .map(|v| dec::<T>(v.value(), table.1))
                .transpose()?
            else {
                return Ok(false);
            };
            f(&mut rec);
            t.insert(name, enc(&rec).as_slice())?;
        }
        tx.commit()?;
        Ok(true)
    }

    fn remove_record(&self, table: Records, name: &str) -> Result<bool, StoreError> {
        let tx = self.db.begin_write()?;
        let removed = tx.open_table(table.0)?.remove(name)?.is_some();
        tx.commit()?;
        Ok(removed)
    }

    /// The client with this id.
    pub fn client(&self, id: &str) -> Result<Option<ClientRecord>, StoreError> {
        self.record(CLIENT_RECORDS, id)
    }

    /// Every client, by id.
    pub fn clients(&self) -> Result<Vec<(String, ClientRecord)>, StoreError> {
        self.records(CLIENT_RECORDS)
    }

    /// Inserts a client; false if the id is taken.
    pub fn add_client(&self, id: &str, rec: &ClientRecord) -> Result<bool, StoreError> {
        self.add_record(CLIENT_RECORDS, id, rec)
    }

    /// Applies `f` to the client; false if there is no such client.
    pub fn update_client(
        &self,
        id: &str,
        f: impl FnOnce(&mut ClientRecord),
    ) -> Result<bool, StoreError> {
        self.update_record(CLIENT_RECORDS, id, f)
    }

    /// Removes a client; false if there was none.
    pub fn remove_client(&self, id: &str) -> Result<bool, StoreError> {
        self.remove_record(CLIENT_RECORDS, id)
    }

    /// The user with this name.
    pub fn user(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        self.record(USER_RECORDS, name)
    }

    /// Every user, by name.
    pub fn users(&self) -> Result<Vec<(String, UserRecord)>, StoreError> {
        self.records(USER_RECORDS)
    }

    /// Inserts a user; false if the name is taken.
    pub fn add_user(&self, name: &str, rec: &UserRecord) -> Result<bool, StoreError> {
        self.add_record(USER_RECORDS, name, rec)
    }

    /// Applies `f` to the user; false if there is no such user.
    pub fn update_user(
        &self,
        name: &str,
        f: impl FnOnce(&mut UserRecord),
    ) -> Result<bool, StoreError> {
        self.update_record(USER_RECORDS, name, f)
    }

    /// Removes a user; false if there was none.
    pub fn remove_user(&self, name: &str) -> Result<bool, StoreError> {
        self.remove_record(USER_RECORDS, name)
    }

    // ----- keys -----

    /// Every key still on record, with its state at `now`.
    pub fn key_infos(&self, now: u64) -> Result<Vec<KeyInfo>, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.db.begin_read()?;
        let t = tx.open_table(KEYS)?;
        t.iter()?
            .map(|r| {
                let (k, v) = r?;
                let rec: KeyRecord = dec(v.value(), "keys")?;
                Ok(rec.info(k.value(), now, ttl))
            })
            .collect()
    }

    /// The key ring at `now`: the signing key, a pending key (so verifiers learn it before it
    /// signs) and every superseded key not yet retired.
    pub fn key_ring(&self, now: u64) -> Result<KeyRing, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.db.begin_read()?;
        let t = tx.open_table(KEYS)?;
        let mut keys = Vec::new();
        let mut signing = None;
        for r in t.iter()? {
            let (k, v) = r?;
            let rec: KeyRecord = dec(v.value(), "keys")?;
            match rec.state(now, ttl) {
                KeyState::Retired => continue,
                KeyState::Signing => signing = Some(k.value()),
                KeyState::Pending | KeyState::Verifying => {}
            }
            let secret =
                Zeroizing::new(hex::decode(&rec.secret).map_err(|_| StoreError::Corrupt("keys"))?);
            keys.push(Key::from_slice(k.value(), &secret).ok_or(StoreError::Corrupt("keys"))?);
        }
        KeyRing::new(keys, signing).ok_or(StoreError::Corrupt("keys"))
    }

    /// Adds a new key that becomes the signing key `delay` seconds from `now`; until then it is
    /// published (in the ring and the filter configuration) but does not sign. The current signing
    /// key keeps verifying until it retires. Returns the new key id, or `None` while another
    /// rotation is still pending.
    pub fn rotate_key(&self, now: u64, delay: u64) -> Result<Option<u32>, StoreError> {
        let ttl = self.access_ttl()?;
        let switch_at = now + delay;
        let tx = self.db.begin_write()?;
        let kid = {
            let mut t = tx.open_table(KEYS)?;
            let mut superseded = Vec::new();
            let mut last = 0;
            for r in t.iter()? {
                let (k, v) = r?;
                last = k.value();
                let mut rec: KeyRecord = dec(v.value(), "keys")?;
                match rec.state(now, ttl) {
                    KeyState::Pending => return Ok(None),
                    KeyState::Signing => {
                        rec.superseded_at = Some(switch_at);
                        superseded.push((k.value(), enc(&rec)));
                    }
                    _ => {}
                }
            }
            for (k, v) in superseded {
                t.insert(k, v.as_slice())?;
            }
            let kid = last + 1;
            let rec = KeyRecord {
                secret: hex::encode(*secrets::random32()),
                created_at: now,
                signs_from: switch_at,
                superseded_at: None,
            };
            t.insert(kid, enc(&rec).as_slice())?;
            kid
        };
        tx.commit()?;
        Ok(Some(kid))
    }

    // ----- refresh tokens -----

    /// Starts a refresh token family for `user` at `client` and returns its first token.
    fn issue_in(
        &self,
        tx: &WriteTransaction,
        client: &str,
        user: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<Zeroizing<String>, StoreError> {
        let token = secrets::new_refresh_token();
        let hash = self.hash_key.refresh_hash(&token);
        let family = hex::encode(secrets::random16());
        let fam = FamilyRecord {
            client: client.into(),
            user: user.into(),
            created_at: now,
            expires_at: now + policy.absolute_ttl,
            revoked_at: None,
            current: hex::encode(hash),
        };
        let rec = RefreshRecord {
            family: family.clone(),
            client: client.into(),
            user: user.into(),
            expires_at: (now + policy.idle_ttl).min(fam.expires_at),
            state: RefreshState::Active,
        };
        tx.open_table(FAMILIES)?
            .insert(family.as_bytes(), enc(&fam).as_slice())?;
        tx.open_table(REFRESH)?
            .insert(hash.as_slice(), enc(&rec).as_slice())?;
        Ok(token)
    }

    /// Rotates `presented` for `client`: the successor on success, or why not. Reuse of a rotated
    /// token outside the retry window revokes its family in the same transaction.
    fn rotate_in(
        &self,
        tx: &WriteTransaction,
        presented: &str,
        client: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<Result<Rotation, RefreshRejection>, StoreError> {
        if !secrets::looks_like_refresh_token(presented) {
            return Ok(Err(RefreshRejection::Unknown));
        }
        let hash = self.hash_key.refresh_hash(presented);
        let outcome: Result<Rotation, RefreshRejection> = 'outcome: {
            let mut refresh = tx.open_table(REFRESH)?;
            let mut families = tx.open_table(FAMILIES)?;
            let Some(mut rec) = refresh
                .get(hash.as_slice())?
                .map(|v| dec::<RefreshRecord>(v.value(), "refresh_tokens"))
                .transpose()?
            else {
                return Ok(Err(RefreshRejection::Unknown));
            };
            let Some(mut fam) = families
                .get(rec.family.as_bytes())?
                .map(|v| dec::<FamilyRecord>(v.value(), "refresh_families"))
                .transpose()?
            else {
                return Ok(Err(RefreshRejection::Unknown));
            };
            if rec.client != client {
                return Ok(Err(RefreshRejection::OtherClient));
            }
            if fam.revoked_at.is_some() {
                return Ok(Err(RefreshRejection::Revoked));
            }
            if now >= rec.expires_at || now >= fam.expires_at {
                return Ok(Err(RefreshRejection::Expired));
            }
            let successor = self.hash_key.refresh_successor(presented);
            let successor_hash = self.hash_key.refresh_hash(&successor);
            let retried = match rec.state {
                RefreshState::Active => false,
                RefreshState::Rotated { at }
                    if now.saturating_sub(at) <= policy.retry_window
                        && fam.current == hex::encode(successor_hash) =>
                {
                    true
                }
                RefreshState::Rotated { .. } => {
                    fam.revoked_at = Some(now);
                    families.insert(rec.family.as_bytes(), enc(&fam).as_slice())?;
                    break 'outcome Err(RefreshRejection::ReuseDetected);
                }
            };
            let client_active = tx
                .open_table(CLIENTS)?
                .get(client)?
                .map(|v| dec::<ClientRecord>(v.value(), "clients"))
                .transpose()?
                .is_some_and(|c| c.active);
            let user = tx
                .open_table(USERS)?
                .get(rec.user.as_str())?
                .map(|v| dec::<UserRecord>(v.value(), "users"))
                .transpose()?;
            let user = match user {
                Some(u) if client_active && !u.disabled => u,
                _ => return Ok(Err(RefreshRejection::Inactive)),
            };
            if !retried {
                let next = RefreshRecord {
                    family: rec.family.clone(),
                    client: client.into(),
                    user: rec.user.clone(),
                    expires_at: (now + policy.idle_ttl).min(fam.expires_at),
                    state: RefreshState::Active,
                };
                refresh.insert(successor_hash.as_slice(), enc(&next).as_slice())?;
                rec.state = RefreshState::Rotated { at: now };
                refresh.insert(hash.as_slice(), enc(&rec).as_slice())?;
                fam.current = hex::encode(successor_hash);
                families.insert(rec.family.as_bytes(), enc(&fam).as_slice())?;
            }
            Ok(Rotation {
                successor,
                user_name: rec.user,
                user,
                retried,
            })
        };
        Ok(outcome)
    }

    /// Revokes the family of `token` if `client` owns it. `Ok(None)`: no such token;
    /// `Ok(Some(false))`: it belongs to another client (nothing changed).
    fn revoke_in(
        &self,
        tx: &WriteTransaction,
        token: &str,
        client: &str,
        now: u64,
    ) -> Result<Option<bool>, StoreError> {
        if !secrets::looks_like_refresh_token(token) {
            return Ok(None);
        }
        let hash = self.hash_key.refresh_hash(token);
        {
            let refresh = tx.open_table(REFRESH)?;
            let mut families = tx.open_table(FAMILIES)?;
            let Some(rec) = refresh
                .get(hash.as_slice())?
                .map(|v| dec::<RefreshRecord>(v.value(), "refresh_tokens"))
                .transpose()?
            else {
                return Ok(None);
            };
            if rec.client != client {
                return Ok(Some(false));
            }
            let fam = families
                .get(rec.family.as_bytes())?
                .map(|v| dec::<FamilyRecord>(v.value(), "refresh_families"))
                .transpose()?;
            if let Some(mut fam) = fam {
                if fam.revoked_at.is_none() {
                    fam.revoked_at = Some(now);
                    families.insert(rec.family.as_bytes(), enc(&fam).as_slice())?;
                }
            }
        }
        Ok(Some(true))
    }

    /// Applies refresh token operations in order in **one** write transaction and commits it once
    /// (durably), or aborts it if none of them wrote. Each operation sees the effects of those
    /// before it. This is the group commit behind [`crate::writer::RefreshWriter`].
    pub fn apply_refresh_ops(
        &self,
        ops: &[(RefreshOp, u64)],
        policy: &RefreshPolicy,
    ) -> Result<Vec<RefreshOutcome>, StoreError> {
        let tx = self.db.begin_write()?;
        let mut wrote = false;
        let mut outcomes = Vec::with_capacity(ops.len());
        for (op, now) in ops {
            let outcome = match op {
                RefreshOp::Issue { client, user } => {
                    wrote = true;
                    RefreshOutcome::Issued(self.issue_in(&tx, client, user, *now, policy)?)
                }
                RefreshOp::Rotate { presented, client } => {
                    let r = self.rotate_in(&tx, presented, client, *now, policy)?;
                    wrote |= match &r {
                        Ok(rotation) => !rotation.retried,
                        Err(rejection) => *rejection == RefreshRejection::ReuseDetected,
                    };
                    RefreshOutcome::Rotated(r)
                }
                RefreshOp::Revoke { token, client } => {
                    let r = self.revoke_in(&tx, token, client, *now)?;
                    wrote |= r == Some(true);
                    RefreshOutcome::Revoked(r)
                }
            };
            outcomes.push(outcome);
        }
        if wrote {
            tx.commit()?;
        } else {
            tx.abort()?;
        }
        Ok(outcomes)
    }

    fn apply_one(
        &self,
        op: RefreshOp,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<RefreshOutcome, StoreError> {
        let mut outcomes = self.apply_refresh_ops(&[(op, now)], policy)?;
        outcomes.pop().ok_or(StoreError::Corrupt("empty batch"))
    }

    /// Starts a refresh token family for `user` at `client` and returns its first token.
    pub fn issue_refresh(
        &self,
        client: &str,
        user: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<Zeroizing<String>, StoreError> {
        let op = RefreshOp::Issue {
            client: client.into(),
            user: user.into(),
        };
        match self.apply_one(op, now, policy)? {
            RefreshOutcome::Issued(t) => Ok(t),
            _ => Err(StoreError::Corrupt("batch outcome")),
        }
    }

    /// Rotates `presented` for `client` (see [`RefreshOp::Rotate`]).
    pub fn rotate_refresh(
        &self,
        presented: &str,
        client: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Result<Result<Rotation, RefreshRejection>, StoreError> {
        let op = RefreshOp::Rotate {
            presented: Zeroizing::new(presented.into()),
            client: client.into(),
        };
        match self.apply_one(op, now, policy)? {
            RefreshOutcome::Rotated(r) => Ok(r),
            _ => Err(StoreError::Corrupt("batch outcome")),
        }
    }

    /// Revokes the family of `token` (see [`RefreshOp::Revoke`]).
    pub fn revoke_refresh(
        &self,
        token: &str,
        client: &str,
        now: u64,
    ) -> Result<Option<bool>, StoreError> {
        let op = RefreshOp::Revoke {
            token: Zeroizing::new(token.into()),
            client: client.into(),
        };
        match self.apply_one(
            op,
            now,
            &RefreshPolicy {
                idle_ttl: 0,
                absolute_ttl: 0,
                retry_window: 0,
            },
        )? {
            RefreshOutcome::Revoked(r) => Ok(r),
            _ => Err(StoreError::Corrupt("batch outcome")),
        }
    }

    /// What introspection may reveal about a refresh token that is currently usable.
    pub fn refresh_info(&self, token: &str, now: u64) -> Result<Option<RefreshInfo>, StoreError> {
        if !secrets::looks_like_refresh_token(token) {
            return Ok(None);
        }
        let hash = self.hash_key.refresh_hash(token);
        let tx = self.db.begin_read()?;
        let refresh = tx.open_table(REFRESH)?;
        let families = tx.open_table(FAMILIES)?;
        let Some(rec) = refresh
            .get(hash.as_slice())?
            .map(|v| dec::<RefreshRecord>(v.value(), "refresh_tokens"))
            .transpose()?
        else {
            return Ok(None);
        };
        let Some(fam) = families
            .get(rec.family.as_bytes())?
            .map(|v| dec::<FamilyRecord>(v.value(), "refresh_families"))
            .transpose()?
        else {
            return Ok(None);
        };
        let usable = rec.state == RefreshState::Active
            && fam.revoked_at.is_none()
            && now < rec.expires_at
            && now < fam.expires_at;
        Ok(usable.then(|| RefreshInfo {
            client: rec.client,
            user: rec.user,
            expires_at: rec.expires_at.min(fam.expires_at),
        }))
    }

    /// Deletes refresh tokens and families whose lifetime has passed and keys that have retired.
    /// Returns how many records went.
    pub fn sweep(&self, now: u64) -> Result<u64, StoreError> {
        let ttl = self.access_ttl()?;
        let tx = self.db.begin_write()?;
        let mut removed = 0u64;
        {
            let mut refresh = tx.open_table(REFRESH)?;
            refresh.retain(|_, v| {
                let keep =
                    serde_json::from_slice::<RefreshRecord>(v).map_or(true, |r| r.expires_at > now);
                removed += u64::from(!keep);
                keep
            })?;
            let mut families = tx.open_table(FAMILIES)?;
            families.retain(|_, v| {
                let keep =
                    serde_json::from_slice::<FamilyRecord>(v).map_or(true, |f| f.expires_at > now);
                removed += u64::from(!keep);
                keep
            })?;
            let mut keys = tx.open_table(KEYS)?;
            keys.retain(|_, v| {
                let keep = serde_json::from_slice::<KeyRecord>(v)
                    .map_or(true, |k| k.state(now, ttl) != KeyState::Retired);
                removed += u64::from(!keep);
                keep
            })?;
        }
        tx.commit()?;
        Ok(removed)
    }
}

/// [`RedbFile`] behind the [`Store`] interface. Refresh operations go through one writer thread
/// that group-commits them; the sweep runs on the blocking pool.
#[derive(Debug)]
pub struct RedbStore {
    file: std::sync::Arc<RedbFile>,
    writer: writer::RefreshWriter,
}

impl RedbStore {
    /// Opens the data dir (see [`RedbFile::open`]) and starts its refresh writer with `policy`.
    pub fn open(dir: &Path, now: u64, policy: RefreshPolicy) -> Result<Self, StoreError> {
        Self::open_with_cache(dir, now, policy, None)
    }

    /// [`RedbStore::open`] with the page cache bounded (see [`RedbFile::open_with_cache`]).
    pub fn open_with_cache(
        dir: &Path,
        now: u64,
        policy: RefreshPolicy,
        cache_bytes: Option<usize>,
    ) -> Result<Self, StoreError> {
        let file = std::sync::Arc::new(RedbFile::open_with_cache(dir, now, cache_bytes)?);
        let writer = writer::RefreshWriter::start(file.clone(), policy)?;
        Ok(Self { file, writer })
    }

    /// The data dir.
    pub fn dir(&self) -> &Path {
        self.file.dir()
    }
}

#[async_trait::async_trait]
impl Store for RedbStore {
    fn hash_key(&self) -> &HashKey {
        self.file.hash_key()
    }
    async fn access_ttl(&self) -> Result<u64, StoreError> {
        self.file.access_ttl()
    }
    async fn set_access_ttl(&self, ttl: u64) -> Result<(), StoreError> {
        self.file.set_access_ttl(ttl)
    }
    async fn client(&self, id: &str) -> Result<Option<ClientRecord>, StoreError> {
        self.file.client(id)
    }
    async fn clients(&self) -> Result<Vec<(String, ClientRecord)>, StoreError> {
        self.file.clients()
    }
    async fn add_client(&self, id: &str, rec: &ClientRecord) -> Result<bool, StoreError> {
        self.file.add_client(id, rec)
    }
    async fn update_client(&self, id: &str, change: ClientChange) -> Result<bool, StoreError> {
        self.file.update_client(id, |c| change.apply(c))
    }
    async fn remove_client(&self, id: &str) -> Result<bool, StoreError> {
        self.file.remove_client(id)
    }
    async fn user(&self, name: &str) -> Result<Option<UserRecord>, StoreError> {
        self.file.user(name)
    }
    async fn users(&self) -> Result<Vec<(String, UserRecord)>, StoreError> {
        self.file.users()
    }
    async fn add_user(&self, name: &str, rec: &UserRecord) -> Result<bool, StoreError> {
        self.file.add_user(name, rec)
    }
    async fn update_user(&self, name: &str, change: &UserChange) -> Result<bool, StoreError> {
        self.file.update_user(name, |u| change.apply(u))
    }
    async fn remove_user(&self, name: &str) -> Result<bool, StoreError> {
        self.file.remove_user(name)
    }
    async fn key_infos(&self, now: u64) -> Result<Vec<KeyInfo>, StoreError> {
        self.file.key_infos(now)
    }
    async fn key_ring(&self, now: u64) -> Result<KeyRing, StoreError> {
        self.file.key_ring(now)
    }
    async fn rotate_key(&self, now: u64, delay: u64) -> Result<Option<u32>, StoreError> {
        self.file.rotate_key(now, delay)
    }
    async fn refresh(&self, op: RefreshOp, now: u64) -> Result<RefreshOutcome, StoreError> {
        self.writer.submit(op, now).await
    }
    async fn refresh_info(&self, token: &str, now: u64) -> Result<Option<RefreshInfo>, StoreError> {
        self.file.refresh_info(token, now)
    }
    async fn sweep(&self, now: u64) -> Result<u64, StoreError> {
        let file = self.file.clone();
        tokio::task::spawn_blocking(move || file.sweep(now))
            .await
            .map_err(|_| StoreError::Stopped("sweep task"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{GrantKind, KEY_RETIRE_MARGIN};
    use shared::Key;

    const POLICY: RefreshPolicy = RefreshPolicy {
        idle_ttl: 100,
        absolute_ttl: 250,
        retry_window: 10,
    };

    fn store_with_user(dir: &Path) -> RedbFile {
        let s = RedbFile::open(dir, 1_000).unwrap();
        let client = ClientRecord {
            secret_hash: hex::encode([0u8; 32]),
            active: true,
            grants: vec![GrantKind::Password],
            impersonate: false,
            impersonate_claim_types: vec![],
            created_at: 0,
        };
        assert!(s.add_client("app", &client).unwrap());
        let user = UserRecord {
            password_hash: String::new(),
            disabled: false,
            roles: vec!["r".into()],
            claims: vec![],
            created_at: 0,
        };
        assert!(s.add_user("alice", &user).unwrap());
        s
    }

    #[test]
    fn idle_and_absolute_lifetimes_and_the_sweep() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store_with_user(tmp.path());
        let rt = s.issue_refresh("app", "alice", 1_000, &POLICY).unwrap();
        // Idle: unused for 100 s, it expires.
        assert_eq!(
            s.rotate_refresh(&rt, "app", 1_100, &POLICY).unwrap().err(),
            Some(RefreshRejection::Expired)
        );
        // Used in time, it rotates; each successor's idle expiry is capped by the absolute one.
        let mut current = s
            .rotate_refresh(&rt, "app", 1_090, &POLICY)
            .unwrap()
            .unwrap()
            .successor;
        for t in [1_150, 1_220] {
            current = s
                .rotate_refresh(&current, "app", t, &POLICY)
                .unwrap()
                .unwrap()
                .successor;
        }
        assert_eq!(
            s.rotate_refresh(&current, "app", 1_250, &POLICY)
                .unwrap()
                .err(),
            Some(RefreshRejection::Expired)
        );
        // The sweep deletes the family and all its tokens once the absolute lifetime is over.
        assert_eq!(
            s.sweep(1_249).unwrap(),
            2,
            "only the two idle-expired tokens go early"
        );
        assert_eq!(s.sweep(1_400).unwrap(), 3);
        assert_eq!(
            s.rotate_refresh(&current, "app", 1_240, &POLICY)
                .unwrap()
                .err(),
            Some(RefreshRejection::Unknown)
        );
    }

    #[test]
    fn state_survives_reopening() {
        let tmp = tempfile::tempdir().unwrap();
        let rt = {
            let s = store_with_user(tmp.path());
            s.issue_refresh("app", "alice", 1_000, &POLICY).unwrap()
        };
        let s = RedbFile::open(tmp.path(), 1_001).unwrap();
        assert!(s.client("app").unwrap().is_some());
        let next = s
            .rotate_refresh(&rt, "app", 1_001, &POLICY)
            .unwrap()
            .unwrap();
        assert!(!next.retried);
        assert_eq!(next.user_name, "alice");
        assert!(matches!(
            RedbFile::open(tmp.path(), 1_002),
            Err(StoreError::Locked)
        ));
    }

    #[test]
    fn superseded_keys_verify_until_they_retire() {
        let tmp = tempfile::tempdir().unwrap();
        let s = RedbFile::open(tmp.path(), 1_000).unwrap();
        s.set_access_ttl(600).unwrap();
        assert_eq!(s.rotate_key(2_000, 0).unwrap(), Some(2));
        let ring = s.key_ring(2_000).unwrap();
        assert_eq!(ring.signing_key().map(Key::id), Some(2));
        assert!(ring.get(1).is_some());
        let retire = 2_000 + 600 + KEY_RETIRE_MARGIN;
        assert!(s.key_ring(retire - 1).unwrap().get(1).is_some());
        assert!(s.key_ring(retire).unwrap().get(1).is_none());
        let states: Vec<_> = s
            .key_infos(retire)
            .unwrap()
            .iter()
            .map(|k| k.state.as_str())
            .collect();
        assert_eq!(states, ["retired", "signing"]);
        assert_eq!(s.sweep(retire).unwrap(), 1);
        assert_eq!(s.key_infos(retire).unwrap().len(), 1);
    }

    #[test]
    fn a_delayed_rotation_publishes_the_key_before_it_signs() {
        let tmp = tempfile::tempdir().unwrap();
        let s = RedbFile::open(tmp.path(), 1_000).unwrap();
        assert_eq!(s.rotate_key(1_000, 300).unwrap(), Some(2));
        assert_eq!(
            s.rotate_key(1_100, 0).unwrap(),
            None,
            "one pending rotation at a time"
        );
        let before = s.key_ring(1_299).unwrap();
        assert_eq!(before.signing_key().map(Key::id), Some(1));
        assert!(before.get(2).is_some(), "the pending key is published");
        let states: Vec<_> = s
            .key_infos(1_299)
            .unwrap()
            .iter()
            .map(|k| k.state.as_str())
            .collect();
        assert_eq!(states, ["signing", "pending"]);
        let after = s.key_ring(1_300).unwrap();
        assert_eq!(after.signing_key().map(Key::id), Some(2));
        assert!(after.get(1).is_some(), "the old key still verifies");
    }

    #[test]
    fn one_batch_applies_in_order_and_never_forks() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store_with_user(tmp.path());
        let rt = s.issue_refresh("app", "alice", 1_000, &POLICY).unwrap();
        let rotate = |t: &str| RefreshOp::Rotate {
            presented: Zeroizing::new(t.into()),
            client: "app".into(),
        };
        let out = s
            .apply_refresh_ops(
                &[
                    (rotate(&rt), 1_001),
                    (rotate(&rt), 1_001),
                    (
                        RefreshOp::Issue {
                            client: "app".into(),
                            user: "alice".into(),
                        },
                        1_001,
                    ),
                ],
                &POLICY,
            )
            .unwrap();
        let successors: Vec<(String, bool)> = out[..2]
            .iter()
            .map(|o| match o {
                RefreshOutcome::Rotated(Ok(r)) => (r.successor.to_string(), r.retried),
                _ => panic!("rotation failed"),
            })
            .collect();
        assert_eq!(successors[0].0, successors[1].0, "one successor");
        assert_eq!((successors[0].1, successors[1].1), (false, true));
        assert!(matches!(out[2], RefreshOutcome::Issued(_)));
        // The batch was committed: the successor rotates on after reopening.
        drop(s);
        let s = RedbFile::open(tmp.path(), 1_002).unwrap();
        let next = &successors[0].0;
        // Reuse of the stale token and a use of the successor in one batch: the reuse comes first
        // and revokes the family, so the successor is refused too.
        let out = s
            .apply_refresh_ops(&[(rotate(&rt), 1_050), (rotate(next), 1_050)], &POLICY)
            .unwrap();
        assert!(matches!(
            out[0],
            RefreshOutcome::Rotated(Err(RefreshRejection::ReuseDetected))
        ));
        assert!(matches!(
            out[1],
            RefreshOutcome::Rotated(Err(RefreshRejection::Revoked))
        ));
        // A batch that writes nothing commits nothing, and says so.
        let out = s
            .apply_refresh_ops(&[(rotate("mmrt1.nonsense"), 1_101)], &POLICY)
            .unwrap();
        assert!(matches!(
            out[0],
            RefreshOutcome::Rotated(Err(RefreshRejection::Unknown))
        ));
    }
}
