//! The issuer's durable state behind one narrow interface, [`Store`]: clients, users, signing
//! keys, refresh token families and settings. Two backends implement it:
//!
//! - [`redb`]: one embedded file in a data dir, one process (the default, nothing to run);
//! - PostgreSQL, for several issuers on one database (see `docs/deploy-postgres.md`).
//!
//! Every write is durable before its call returns: a refresh token handed to a client is never
//! lost by a crash, and two clients never receive different successors of one token.

pub mod family;
pub mod kek;
pub mod keys;
pub mod location;
pub mod postgres;
pub mod redb;
/// Revocations: the types and the in-memory set are shared with the Envoy filter.
pub mod revocation {
    pub use shared::revocation::*;

    /// Seconds a revocation stays in force past the last expiry of the tokens it covers: any edge
    /// may accept a token until its `exp` plus its clock skew, which is at most this.
    pub const REVOCATION_MARGIN: u64 = shared::token::MAX_CLOCK_SKEW;
}

pub use keys::{KeyInfo, KeyState, RetireOutcome, Rotated, RotationPlan, KEY_RETIRE_MARGIN};
pub use location::{Location, PgFiles};

use crate::secrets::HashKey;
use serde::{Deserialize, Serialize};
use shared::token::Claim;
use shared::KeyRing;
use zeroize::Zeroizing;

/// Access token lifetime assumed until `issuer serve` records its own.
pub const DEFAULT_ACCESS_TTL: u64 = 3600;

/// Storage failures. Their details go to logs only.
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
    /// A stored record does not decode.
    #[error("corrupt record in {0}")]
    Corrupt(&'static str),
    /// A stored record fails its integrity check (written without the key-encryption key); it
    /// is never used, nor changed into a genuine one.
    #[error("a record in {0} fails its integrity check (tampered); remove it and add it again")]
    Tampered(&'static str),
    /// Another process (normally `issuer serve`) has the database open.
    #[error("the database is open in another process")]
    Locked,
    /// The database asked for the transaction to be retried (serialization failure or deadlock)
    /// more often than the store retries; a client gets 503 and may retry.
    #[error("the database reported contention on every attempt")]
    Contention,
    /// The database cannot be reached or is shutting down; a client gets 503.
    #[error("the database is unavailable: {0}")]
    Unavailable(String),
    /// PostgreSQL reported an error.
    #[error("postgres: {0}")]
    Postgres(String),
    /// The key-encryption key is missing, unreadable or does not open the stored secrets.
    #[error("{0}")]
    Kek(String),
    /// The store's settings are unusable.
    #[error("store configuration: {0}")]
    Config(String),
    /// The group commit this operation was part of failed (logged once by the writer).
    #[error("refresh batch failed: {0}")]
    Batch(String),
    /// A background task of the store has stopped.
    #[error("the store's {0} has stopped")]
    Stopped(&'static str),
}

/// A change to a client, applied by [`Store::update_client`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientChange {
    /// Allow (`true`) or stop (`false`) it getting tokens.
    SetActive(bool),
}

impl ClientChange {
    /// What the change revokes: a deactivated client's tokens.
    pub fn revokes(self, id: &str) -> Option<revocation::Revoked> {
        match self {
            Self::SetActive(false) => Some(revocation::Revoked::Client { id: id.into() }),
            Self::SetActive(true) => None,
        }
    }

    /// Applies the change to a record.
    pub fn apply(self, rec: &mut ClientRecord) {
        match self {
            Self::SetActive(active) => rec.active = active,
        }
    }
}

/// A change to a user, applied by [`Store::update_user`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserChange {
    /// Disable the user at `at`: sign-ins and refreshes stop, and so do for good the refresh
    /// token families started before (enabling the user again does not revive them), as do access
    /// tokens issued before (a revocation).
    Disable {
        /// When (seconds since the epoch).
        at: u64,
    },
    /// Enable the user again.
    Enable,
    /// A new Argon2id hash (PHC string), set at `at`: refresh token families started before
    /// stop working, as do access tokens issued before (a revocation).
    SetPassword {
        /// The PHC string.
        hash: String,
        /// When (seconds since the epoch).
        at: u64,
    },
}

impl UserChange {
    /// What the change revokes: the tokens of a user disabled or given a new password.
    pub fn revokes(&self, name: &str) -> Option<revocation::Revoked> {
        match self {
            Self::Disable { .. } | Self::SetPassword { .. } => {
                Some(revocation::Revoked::User { name: name.into() })
            }
            Self::Enable => None,
        }
    }

    /// Applies the change to a record.
    pub fn apply(&self, rec: &mut UserRecord) {
        match self {
            Self::Disable { at } => {
                rec.disabled = true;
                rec.disabled_at = Some(*at);
            }
            Self::Enable => rec.disabled = false,
            Self::SetPassword { hash, at } => {
                rec.password_hash.clone_from(hash);
                rec.password_changed_at = Some(*at);
            }
        }
    }
}

/// The issuer's state, whichever backend holds it. Implementations are shared by every request
/// and background task of a server, and by the admin commands.
#[async_trait::async_trait]
pub trait Store: Send + Sync + std::fmt::Debug {
    /// The key under which client secrets and refresh tokens are hashed.
    fn hash_key(&self) -> &HashKey;

    /// The access token lifetime last recorded by `issuer serve` (it decides when superseded keys
    /// retire and what `keys filter-config` says).
    async fn access_ttl(&self) -> Result<u64, StoreError>;
    /// Records the access token lifetime.
    async fn set_access_ttl(&self, ttl: u64) -> Result<(), StoreError>;

    /// The client with this id.
    async fn client(&self, id: &str) -> Result<Option<ClientRecord>, StoreError>;
    /// Every client, by id.
    async fn clients(&self) -> Result<Vec<(String, ClientRecord)>, StoreError>;
    /// Inserts a client; false if the id is taken.
    async fn add_client(&self, id: &str, rec: &ClientRecord) -> Result<bool, StoreError>;
    /// Changes a client; false if there is no such client. A deactivation revokes the client's
    /// tokens in the same transaction ([`ClientChange::revokes`]).
    async fn update_client(&self, id: &str, change: ClientChange) -> Result<bool, StoreError>;
    /// Removes a client and revokes its tokens; false if there was none.
    async fn remove_client(&self, id: &str) -> Result<bool, StoreError>;

    /// The user with this name.
    async fn user(&self, name: &str) -> Result<Option<UserRecord>, StoreError>;
    /// Every user, by name.
    async fn users(&self) -> Result<Vec<(String, UserRecord)>, StoreError>;
    /// Inserts a user; false if the name is taken.
    async fn add_user(&self, name: &str, rec: &UserRecord) -> Result<bool, StoreError>;
    /// Changes a user; false if there is no such user. Disabling a user or setting a new password
    /// revokes the user's tokens in the same transaction ([`UserChange::revokes`]).
    async fn update_user(&self, name: &str, change: &UserChange) -> Result<bool, StoreError>;
    /// Removes a user and revokes the user's tokens; false if there was none.
    async fn remove_user(&self, name: &str) -> Result<bool, StoreError>;

    /// Every key still on record, with its state at `now`.
    async fn key_infos(&self, now: u64) -> Result<Vec<KeyInfo>, StoreError>;
    /// The key ring at `now`: the signing key, a pending key (so verifiers learn it before it
    /// signs) and every superseded key not yet retired.
    async fn key_ring(&self, now: u64) -> Result<KeyRing, StoreError>;
    /// Adds a key that signs `delay` seconds from `now` (published at once); the signing key
    /// keeps verifying until it retires ([`RotationPlan`]). `None` while another rotation is
    /// pending and `delay` is not 0; with no delay a pending key is retired and replaced.
    async fn rotate_key(&self, now: u64, delay: u64) -> Result<Option<Rotated>, StoreError>;
    /// Retires a superseded key at `now`, ahead of its time (a key thought compromised): it
    /// leaves the ring and verifies nothing more. The signing or a pending key cannot be retired.
    async fn retire_key(&self, kid: u32, now: u64) -> Result<RetireOutcome, StoreError>;

    /// Applies one refresh token operation durably, under the refresh policy the store was opened
    /// with, and returns its outcome. An operation that revokes a family (reuse, or
    /// [`RefreshOp::Revoke`] of a live one) records the revocation of its access tokens
    /// ([`crate::secrets::HashKey::family_revocation`]) in the same transaction.
    async fn refresh(&self, op: RefreshOp, now: u64) -> Result<RefreshOutcome, StoreError>;
    /// What introspection may reveal about a refresh token that is usable at `now`.
    async fn refresh_info(&self, token: &str, now: u64) -> Result<Option<RefreshInfo>, StoreError>;
    /// Records that `what` is revoked as of `now`, in force until `until` (by default, until every
    /// access token issued by then has expired); returns the revocation's number.
    async fn revoke(
        &self,
        what: revocation::Revoked,
        now: u64,
        until: Option<u64>,
    ) -> Result<u64, StoreError>;
    /// Revocations numbered after `since` and still in force at `now`, in order, at most `limit`
    /// of them (the edge feed's pages; `usize::MAX` for all), with the highest number given out.
    /// A record that does not decode is logged and left out.
    async fn revocations(
        &self,
        since: u64,
        now: u64,
        limit: usize,
    ) -> Result<revocation::RevocationPage, StoreError>;

    /// Deletes refresh state past its lifetime, revocations no longer in force and retired keys;
    /// returns how many records went.
    async fn sweep(&self, now: u64) -> Result<u64, StoreError>;
}

/// The grants a client may be allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash)]
#[serde(rename_all = "snake_case")]
pub enum GrantKind {
    /// Resource owner password credentials (and refreshing what it issued).
    Password,
    /// Client credentials.
    ClientCredentials,
}

impl GrantKind {
    /// Parses `password` or `client_credentials`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "password" => Some(Self::Password),
            "client_credentials" => Some(Self::ClientCredentials),
            _ => None,
        }
    }
}

/// A registered client.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientRecord {
    /// Keyed hash of the secret (hex).
    pub secret_hash: String,
    /// Only active clients get tokens.
    pub active: bool,
    /// Grants the client may use.
    pub grants: Vec<GrantKind>,
    /// May impersonate with the client credentials grant.
    pub impersonate: bool,
    /// If not empty, the only claim types it may impersonate with.
    pub impersonate_claim_types: Vec<String>,
    /// May read the edge feed (verification keys and revocations), as an Envoy filter does.
    #[serde(default)]
    pub edge: bool,
    /// Seconds since the epoch.
    pub created_at: u64,
}

impl ClientRecord {
    /// The secret hash as bytes (`None` if the record is damaged).
    pub fn secret_hash_bytes(&self) -> Option<[u8; 32]> {
        hex::decode(&self.secret_hash).ok()?.try_into().ok()
    }
}

/// A user of the password grant.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UserRecord {
    /// Argon2id hash in PHC string form.
    pub password_hash: String,
    /// Disabled users cannot sign in or refresh.
    pub disabled: bool,
    /// Roles put into the user's tokens.
    pub roles: Vec<String>,
    /// Claims put into the user's tokens, as (type, value).
    pub claims: Vec<(String, String)>,
    /// Seconds since the epoch.
    pub created_at: u64,
    /// When the password was last changed (`issuer user passwd`): refresh token families started
    /// at or before stop working.
    #[serde(default)]
    pub password_changed_at: Option<u64>,
    /// When the user was last disabled: refresh token families started at or before stop
    /// working for good, even once the user is enabled again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_at: Option<u64>,
}

impl UserRecord {
    /// Refresh token families started at or before this time no longer work: the last password
    /// change or disable.
    pub fn sessions_end_at(&self) -> Option<u64> {
        self.password_changed_at.max(self.disabled_at)
    }

    /// The user's claims as token claims.
    pub fn token_claims(&self) -> Vec<Claim> {
        self.claims
            .iter()
            .map(|(t, v)| Claim {
                typ: t.clone(),
                value: v.clone(),
            })
            .collect()
    }
}

/// Lifetimes that govern refresh tokens. The default is `issuer serve`'s: 14 days idle, 90 days
/// absolute, a 30-second retry window.
#[derive(Debug, Clone, Copy)]
pub struct RefreshPolicy {
    /// A refresh token unused this long expires.
    pub idle_ttl: u64,
    /// A family expires this long after the password grant that started it.
    pub absolute_ttl: u64,
    /// A rotated token presented again within this many seconds gets the same successor.
    pub retry_window: u64,
}

impl Default for RefreshPolicy {
    fn default() -> Self {
        Self {
            idle_ttl: 14 * 86_400,
            absolute_ttl: 90 * 86_400,
            retry_window: 30,
        }
    }
}

/// A successful rotation: the successor to hand out and the user it belongs to.
pub struct Rotation {
    /// The new refresh token.
    pub successor: Zeroizing<String>,
    /// The user name of the family.
    pub user_name: String,
    /// The user's current record.
    pub user: UserRecord,
    /// True if this was a retry inside the window (the same successor as before).
    pub retried: bool,
}

/// Why a refresh token was not honoured. Every variant is `invalid_grant` to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshRejection {
    /// Not a refresh token, never issued, or swept.
    Unknown,
    /// Issued to another client.
    OtherClient,
    /// Idle or absolute lifetime passed.
    Expired,
    /// Its family was revoked.
    Revoked,
    /// Reuse of a rotated token outside the retry window: the family is now revoked.
    ReuseDetected,
    /// The client or user is no longer active.
    Inactive,
}

impl RefreshRejection {
    /// Label for logs and metrics.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::OtherClient => "other_client",
            Self::Expired => "expired",
            Self::Revoked => "revoked",
            Self::ReuseDetected => "reuse_detected",
            Self::Inactive => "inactive",
        }
    }
}

/// A refresh token operation, applied by [`Store::refresh`].
pub enum RefreshOp {
    /// Start a family for `user` at `client` (password grant).
    Issue {
        /// Client id.
        client: String,
        /// User name.
        user: String,
    },
    /// Rotate a presented token: the successor, or why not. Reuse of a rotated token outside the
    /// retry window revokes its family.
    Rotate {
        /// The token presented.
        presented: Zeroizing<String>,
        /// The authenticated client.
        client: String,
    },
    /// Revoke the family of a token if `client` owns it. `None`: no such token; `Some(false)`: it
    /// belongs to another client (nothing changes).
    Revoke {
        /// The token presented.
        token: Zeroizing<String>,
        /// The authenticated client.
        client: String,
    },
}

/// The result of one [`RefreshOp`].
pub enum RefreshOutcome {
    /// The first token of the new family.
    Issued(Zeroizing<String>),
    /// The rotation, or why not.
    Rotated(Result<Rotation, RefreshRejection>),
    /// Whether a family was revoked.
    Revoked(Option<bool>),
}

/// What introspection may say about a refresh token.
pub struct RefreshInfo {
    /// Client it was issued to.
    pub client: String,
    /// User of its family.
    pub user: String,
    /// When it expires if unused.
    pub expires_at: u64,
}
