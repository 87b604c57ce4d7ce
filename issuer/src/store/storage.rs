//! The store's interface, split by concern as each caller needs it (the shape of fosite's
//! `storage.go`): a grant holds only the traits it uses. Both backends implement every trait;
//! [`Store`] is all of them at once, for the server, the admin commands and the tests.
//!
//! Every write is durable before its call returns, and every method takes the time as an
//! argument: the store has no clock of its own.

use super::accounts::{ClientChange, ClientRecord, UserChange, UserRecord};
use super::audit::{AuditEvent, EncodedEvent};
use super::edges::EdgeReport;
use super::family::Family;
use super::keys::{KeyInfo, PromoteOutcome, RetireOutcome, Rotated};
use super::revocation::{Cursor, RevocationPage, Revoked};
use super::StoreError;
use crate::secrets::HashKey;
use shared::dpop::replay::{Accepted, Replay};
use shared::KeyRing;
use zeroize::Zeroizing;

/// Registered clients.
#[async_trait::async_trait]
pub trait Clients: Send + Sync {
    /// The client with this id.
    async fn client(&self, id: &str) -> Result<Option<ClientRecord>, StoreError>;
    /// Every client, by id.
    async fn clients(&self) -> Result<Vec<(String, ClientRecord)>, StoreError>;
    /// The clients `filter` selects, by id, at most `filter.limit` of them (the admin API's
    /// pages): read from `filter.after` on in the order of the ids, so a page costs what it
    /// holds, but a search reads until it has found enough.
    async fn clients_page(
        &self,
        filter: &RecordFilter<'_, ClientRecord>,
    ) -> Result<Vec<(String, ClientRecord)>, StoreError>;
    /// Inserts a client; false if the id is taken.
    async fn add_client(&self, id: &str, rec: &ClientRecord) -> Result<bool, StoreError>;
    /// Changes a client at `now`; false if there is no such client. A deactivation revokes the
    /// client's tokens in the same transaction ([`ClientChange::revokes`]).
    async fn update_client(
        &self,
        id: &str,
        change: ClientChange,
        now: u64,
    ) -> Result<bool, StoreError>;
    /// Removes a client at `now` and revokes its tokens; false if there was none.
    async fn remove_client(&self, id: &str, now: u64) -> Result<bool, StoreError>;
}

/// Users of the password grant.
#[async_trait::async_trait]
pub trait Users: Send + Sync {
    /// The user with this name.
    async fn user(&self, name: &str) -> Result<Option<UserRecord>, StoreError>;
    /// Every user, by name.
    async fn users(&self) -> Result<Vec<(String, UserRecord)>, StoreError>;
    /// The users `filter` selects, by name, at most `filter.limit` of them, as
    /// [`Clients::clients_page`] reads clients.
    async fn users_page(
        &self,
        filter: &RecordFilter<'_, UserRecord>,
    ) -> Result<Vec<(String, UserRecord)>, StoreError>;
    /// Inserts a user; false if the name is taken.
    async fn add_user(&self, name: &str, rec: &UserRecord) -> Result<bool, StoreError>;
    /// Changes a user at `now`; false if there is no such user. Disabling a user or setting a new
    /// password revokes the user's tokens in the same transaction ([`UserChange::revokes`]).
    async fn update_user(
        &self,
        name: &str,
        change: &UserChange,
        now: u64,
    ) -> Result<bool, StoreError>;
    /// Removes a user at `now` and revokes the user's tokens; false if there was none.
    async fn remove_user(&self, name: &str, now: u64) -> Result<bool, StoreError>;
}

/// Which clients or users a page of them holds ([`Clients::clients_page`],
/// [`Users::users_page`]).
#[derive(Debug, Clone, Copy)]
pub struct RecordFilter<'a, T> {
    /// Only keys after this one (in the order of their bytes).
    pub after: Option<&'a str>,
    /// Only the records whose key or [`Listed::listed_text`] holds this text, lowercase.
    pub text: Option<&'a str>,
    /// Only the records this keeps (a client's state, say).
    pub keep: fn(&T) -> bool,
    /// Records at most.
    pub limit: usize,
}

impl<T: Listed> RecordFilter<'_, T> {
    /// Every record, `limit` at most.
    pub fn first(limit: usize) -> Self {
        Self {
            after: None,
            text: None,
            keep: |_| true,
            limit,
        }
    }

    /// Whether the record `key`, `rec` is selected.
    pub fn selects(&self, key: &str, rec: &T) -> bool {
        self.after.is_none_or(|a| key > a)
            && (self.keep)(rec)
            && self.text.is_none_or(|t| {
                key.to_lowercase().contains(t) || rec.listed_text().to_lowercase().contains(t)
            })
    }
}

/// Whether `text` is printable ASCII that JSON writes as it is (no quote, no backslash): a record
/// whose text holds it holds it in its JSON too.
pub fn plain_search(text: &str) -> bool {
    text.bytes()
        .all(|b| (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\')
}

/// Whether the stored JSON `raw` of a record may hold the lowercase `text`: false only when both
/// are ASCII (so lowercasing is the same byte by byte), `text` is [`plain_search`], and `raw`
/// lowercased lacks it. A store tests this
/// before it decodes a record for a search, and decodes only what may match.
pub fn may_hold(raw: &[u8], text: &str) -> bool {
    if !plain_search(text) || !raw.is_ascii() {
        return true;
    }
    let lower = raw.to_ascii_lowercase();
    std::str::from_utf8(&lower).map_or(true, |r| r.contains(text))
}

/// A record a list searches by more than its key.
pub trait Listed {
    /// The text a search looks in besides the key (a vendor's names for a client).
    fn listed_text(&self) -> String;
}

impl Listed for ClientRecord {
    fn listed_text(&self) -> String {
        self.vendor
            .as_deref()
            .map_or_else(String::new, |v| format!("{} {}", v.vendor, v.client_name))
    }
}

impl Listed for UserRecord {
    fn listed_text(&self) -> String {
        String::new()
    }
}

/// The signing keys and their lives ([`super::keys`]).
#[async_trait::async_trait]
pub trait SigningKeys: Send + Sync {
    /// Every key still on record, with its state at `now`.
    async fn key_infos(&self, now: u64) -> Result<Vec<KeyInfo>, StoreError>;
    /// The key ring at `now`: the signing key, a pending key (so verifiers learn it before it
    /// signs) and every superseded key not yet retired.
    async fn key_ring(&self, now: u64) -> Result<KeyRing, StoreError>;
    /// Adds a key that signs `delay` seconds from `now` (published at once); the signing key
    /// keeps verifying until it retires ([`super::RotationPlan`]). `None` while another rotation
    /// is pending and `delay` is not 0; with no delay a pending key is retired and replaced.
    async fn rotate_key(&self, now: u64, delay: u64) -> Result<Option<Rotated>, StoreError>;
    /// Retires a superseded key at `now`, ahead of its time (a key thought compromised): it
    /// leaves the ring and verifies nothing more. The signing or a pending key cannot be retired.
    async fn retire_key(&self, kid: u32, now: u64) -> Result<RetireOutcome, StoreError>;
    /// Makes the held key `kid` ([`super::keys::HELD`]) the signing key at `now`; the keys it
    /// was to supersede stop signing now.
    async fn promote_key(&self, kid: u32, now: u64) -> Result<PromoteOutcome, StoreError>;
}

/// What the edges said of themselves in their polls of the edge feed ([`super::edges`]).
#[async_trait::async_trait]
pub trait Edges: Send + Sync {
    /// Drops the edges last seen before `forget_before`, then records `reports`, each merged
    /// over the stored report of its edge ([`EdgeReport::merged_over`]). An edge is its client,
    /// node and VM. A new edge is recorded only if the registry has room for it
    /// ([`super::edges::Admission`]: at most [`super::edges::MAX_EDGES_PER_CLIENT`] edges of one
    /// client, [`super::edges::MAX_EDGES`] in all, even with several issuers writing at once);
    /// answers how many new edges were not recorded.
    async fn record_edges(
        &self,
        reports: Vec<EdgeReport>,
        forget_before: u64,
    ) -> Result<usize, StoreError>;
    /// Every edge held, the most recently seen first.
    async fn edges(&self) -> Result<Vec<EdgeReport>, StoreError>;
}

/// The access token lifetime `issuer serve` runs with, recorded for the admin commands and the
/// other issuers: it decides when superseded keys retire and what `keys filter-config` says.
#[async_trait::async_trait]
pub trait AccessLifetime: Send + Sync {
    /// The lifetime last recorded (seconds), [`super::DEFAULT_ACCESS_TTL`] before any.
    async fn access_ttl(&self) -> Result<u64, StoreError>;
    /// Records the lifetime.
    async fn set_access_ttl(&self, ttl: u64) -> Result<(), StoreError>;
}

/// The write behind readiness: `/readyz` says ready only while this succeeds.
#[async_trait::async_trait]
pub trait Liveness: Send + Sync {
    /// Durably writes the time `now` to one row kept for the purpose (the store does not grow):
    /// proof that the store takes writes now (not read-only, not unreachable, its disk writable).
    async fn probe_write(&self, now: u64) -> Result<(), StoreError>;
}

/// What a [`ChangeListener`] heard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notice {
    /// Listening (again): what changed while not listening was not heard, so read the store.
    Listening,
    /// A revocation was recorded or a signing key changed, by any writer of the store.
    Changed,
}

/// Changes other writers of a shared store make, heard as they commit. Never trusted alone:
/// the issuer reads the store every second all the same, so a notice lost costs time, never a
/// revocation.
#[async_trait::async_trait]
pub trait ChangeListener: Send {
    /// The next notice, (re)connecting first if needed; notices that came together are one.
    /// An error means the listener is not listening now: call again after a pause.
    async fn next(&mut self) -> Result<Notice, StoreError>;
}

/// Whether the store can tell of changes as they commit.
pub trait Notices: Send + Sync {
    /// A listener for a store that other writers share and that notifies (PostgreSQL);
    /// `None` for one without other writers (redb) or without notifications (CockroachDB).
    fn change_listener(&self) -> Option<Box<dyn ChangeListener>> {
        None
    }
}

/// The key under which client secrets and refresh tokens are hashed (sealed under the KEK in a
/// shared database, a 0600 file in a data dir).
pub trait HashKeyed: Send + Sync {
    /// The key.
    fn hash_key(&self) -> &HashKey;
}

/// Refresh token families, each operation applied durably under the refresh policy the store
/// was opened with. An operation that revokes a family (reuse, or [`Families::revoke_family`] of
/// a live one) records the revocation of its access tokens
/// ([`crate::secrets::HashKey::family_revocation`]) in the same transaction.
#[async_trait::async_trait]
pub trait Families: Send + Sync {
    /// Starts a family for `user` at `client` (the password grant), bound to the DPoP key `jkt`
    /// when the request carried a proof, and returns its first token.
    async fn start_family(
        &self,
        client: &str,
        user: &str,
        now: u64,
        jkt: Option<[u8; 32]>,
    ) -> Result<Zeroizing<String>, StoreError>;
    /// Rotates the token `presented` by `client`, with a DPoP proof by the key `proof` or none:
    /// the successor, or why not ([`crate::store::family::Family::step`]). Reuse of a rotated
    /// token outside the retry window revokes its family.
    async fn rotate_family(
        &self,
        presented: &str,
        client: &str,
        now: u64,
        proof: Option<[u8; 32]>,
    ) -> Result<RotateOutcome, StoreError>;
    /// Revokes the family of `token` if `client` owns it.
    async fn revoke_family(
        &self,
        token: &str,
        client: &str,
        now: u64,
    ) -> Result<FamilyRevocation, StoreError>;
    /// What introspection may reveal about a refresh token that is usable at `now`.
    async fn family_info(&self, token: &str, now: u64) -> Result<Option<RefreshInfo>, StoreError>;
    /// The families live at `now` (neither revoked nor expired) that `filter` selects, in the
    /// order of their users' names and then their ids, at most `filter.limit` of them (the admin
    /// API's session pages).
    async fn live_families(
        &self,
        filter: &FamilyFilter<'_>,
        now: u64,
    ) -> Result<Vec<([u8; 16], Family)>, StoreError>;
    /// The family `id` as stored (revoked or expired but not yet swept included).
    async fn family(&self, id: &[u8; 16]) -> Result<Option<Family>, StoreError>;
    /// Revokes the family `id` whoever owns it (an administrator's act), its access tokens with
    /// it as [`Families::revoke_family`] does; returns the family as it was before (`None`: no
    /// such family; one with `revoked_at` set was revoked already and nothing changed).
    async fn revoke_family_id(&self, id: &[u8; 16], now: u64)
        -> Result<Option<Family>, StoreError>;
}

/// Which live families [`Families::live_families`] lists, in the order of their users' names
/// (byte for byte) and then their ids: the order of the index by user both stores keep, so a page
/// costs what it holds whichever owners it selects.
#[derive(Debug, Clone, Copy, Default)]
pub struct FamilyFilter<'a> {
    /// Whose families.
    pub owners: Owners<'a>,
    /// Only families after this one in the list's order.
    pub after: Option<FamilyKey<'a>>,
    /// Families at most.
    pub limit: usize,
}

/// Whose families a [`FamilyFilter`] selects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Owners<'a> {
    /// Every user's.
    #[default]
    All,
    /// The families of the user so named.
    Named(&'a str),
    /// The families of every user whose name starts with this, byte for byte.
    Prefixed(&'a str),
}

impl<'a> Owners<'a> {
    /// Whether the families of `user` are selected.
    pub fn hold(&self, user: &str) -> bool {
        match self {
            Owners::All => true,
            Owners::Named(name) => user == *name,
            Owners::Prefixed(prefix) => user.starts_with(prefix),
        }
    }

    /// The first name in byte order whose families may be selected.
    pub fn first_name(self) -> &'a str {
        match self {
            Owners::All => "",
            Owners::Named(s) | Owners::Prefixed(s) => s,
        }
    }
}

/// Where a family stands in the order of [`FamilyFilter`]: its user's name, then its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct FamilyKey<'a> {
    /// The family's user.
    pub user: &'a str,
    /// The family's id.
    pub id: [u8; 16],
}

impl<'a> FamilyFilter<'a> {
    /// Whether the family `fam` is selected at `now`, `after` aside.
    pub fn selects(&self, fam: &Family, now: u64) -> bool {
        fam.revoked_at.is_none() && now < fam.expires_at && self.owners.hold(&fam.user)
    }

    /// Where the walk of the index by user starts: the first key the owners may hold, or the
    /// cursor if it is past that (then the cursor itself is left out).
    pub fn start(&self) -> FamilyKey<'a> {
        let first = FamilyKey {
            user: self.owners.first_name(),
            id: [0; 16],
        };
        self.after.map_or(first, |after| after.max(first))
    }

    /// Whether `key` comes after the cursor (always, without one).
    pub fn after_cursor(&self, key: FamilyKey<'_>) -> bool {
        self.after.is_none_or(|after| key > after)
    }
}

/// Revocations of access tokens ([`super::revocation`]).
#[async_trait::async_trait]
pub trait Revocations: Send + Sync {
    /// Records that `what` is revoked as of `now`, in force until `until` (by default, until every
    /// access token issued by then has expired); returns the revocation's number.
    async fn revoke(&self, what: Revoked, now: u64, until: Option<u64>) -> Result<u64, StoreError>;
    /// Revocations numbered after `since` and still in force at `now`, in order, at most `limit`
    /// of them (the edge feed's pages; `usize::MAX` for all), with the highest number given out.
    /// A record that does not decode is logged and left out.
    async fn revocations(
        &self,
        since: u64,
        now: u64,
        limit: usize,
    ) -> Result<RevocationPage, StoreError>;
    /// The highest revocation number given out, with the stamp of its entry if the store holds
    /// it with one: a point read, which tells a reader whose cursor is there (and who has read
    /// every entry up to it) that it holds every revocation recorded, by any issuer of the store.
    async fn latest_revocation(&self) -> Result<Cursor, StoreError>;
}

/// Removal of what has run out.
#[async_trait::async_trait]
pub trait Sweep: Send + Sync {
    /// Deletes refresh state past its lifetime, revocations no longer in force and retired keys;
    /// returns how many records went.
    async fn sweep(&self, now: u64) -> Result<u64, StoreError>;
}

/// The audit trail ([`super::audit`]), kept for a retention the caller sweeps by.
#[async_trait::async_trait]
pub trait Audit: Send + Sync {
    /// Records `events` in one durable write, in order.
    async fn record_audit(&self, events: Vec<EncodedEvent>) -> Result<(), StoreError>;
    /// Events at or after `since` (seconds since the epoch), oldest first, at most `limit` of
    /// them. A record that does not decode is logged and left out.
    async fn audit_since(&self, since: u64, limit: usize) -> Result<Vec<AuditEvent>, StoreError>;
    /// A page of events newest first (the admin API's audit trail): those of `page`'s bounds,
    /// each with its key, read from the newest (or the cursor) back, at most `page.scan` of
    /// them, so a page costs what it reads however long the trail. A record that does not
    /// decode is logged and left out.
    async fn audit_page(&self, page: &AuditPage<'_>) -> Result<AuditRead, StoreError>;
    /// Deletes the events recorded before `before`; returns how many went.
    async fn sweep_audit(&self, before: u64) -> Result<u64, StoreError>;
}

/// Where an event stands in the audit trail: its time, then a number the store gives it
/// (redb's count of events, PostgreSQL's random row id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AuditKey {
    /// The event's time (seconds since the epoch).
    pub at: u64,
    /// Its number among the events of that second.
    pub n: i64,
}

/// Which events [`Audit::audit_page`] reads, newest first.
#[derive(Debug, Clone, Copy)]
pub struct AuditPage<'a> {
    /// Only events older than this one (none: from the newest).
    pub before: Option<AuditKey>,
    /// Only events at or after this time.
    pub since: u64,
    /// Only events whose stored record (JSON) holds this text, lowercase, in any case.
    pub text: Option<&'a str>,
    /// Events at most.
    pub limit: usize,
    /// Events read at most, matching or not: a search stops there, and says where.
    pub scan: usize,
}

/// What [`Audit::audit_page`] read.
#[derive(Debug, Default)]
pub struct AuditRead {
    /// The events found, newest first, each with its key.
    pub events: Vec<(AuditKey, AuditEvent)>,
    /// The key of the last event read when the read stopped at `scan` events before `limit`
    /// were found: the next read goes on from there. `None`: nothing more to read, or the page
    /// is full.
    pub stopped_at: Option<AuditKey>,
}

/// The ids of the DPoP proofs the token endpoint accepted, each until its proof expires: a
/// proof is accepted once by all the issuers of a store (`docs/dpop.md`). An id is the
/// caller's digest of the proof's key and `jti`.
#[async_trait::async_trait]
pub trait ProofIds: Send + Sync {
    /// Records `proof` until it expires, or says why not ([`Replay::Replayed`] for a proof
    /// seen before and not expired at `now`; the embedded store's memory also bounds a key's
    /// share and refuses what it forgot, `shared::dpop::replay`).
    async fn first_use(&self, proof: &Accepted, now: u64)
        -> Result<Result<(), Replay>, StoreError>;
}

/// Every trait of the store at once: what a backend is.
pub trait Store:
    Clients
    + Users
    + SigningKeys
    + AccessLifetime
    + Liveness
    + HashKeyed
    + Families
    + Revocations
    + Edges
    + Sweep
    + Audit
    + ProofIds
    + Notices
    + super::backup::Backups
    + std::fmt::Debug
{
}

impl<T> Store for T where
    T: Clients
        + Users
        + SigningKeys
        + AccessLifetime
        + Liveness
        + HashKeyed
        + Families
        + Revocations
        + Edges
        + Sweep
        + Audit
        + ProofIds
        + Notices
        + super::backup::Backups
        + std::fmt::Debug
{
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
    /// The family is bound to a DPoP key and the request has no proof by it: nothing changed.
    DpopKey,
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
            Self::DpopKey => "dpop_key",
        }
    }
}

/// What [`Families::rotate_family`] did.
pub enum RotateOutcome {
    /// The successor, and the user to mint for.
    Rotated(Rotation),
    /// Nothing to mint: why (every reason is `invalid_grant` to the client).
    Refused(RefreshRejection),
}

/// What [`Families::revoke_family`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FamilyRevocation {
    /// No such token (unknown, malformed, or swept): nothing to do.
    Unknown,
    /// The token belongs to another client: nothing changed.
    OtherClient,
    /// The family is revoked (now, or it was already).
    Revoked,
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
