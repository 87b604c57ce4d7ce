//! Edge sync: what the filter learns from the issuer's edge feed (`GET /apiv2/oauth/edge`, see
//! `docs/issuer.md`) after Envoy loaded it, as pure logic. Where the feed is and how often to
//! poll it is the configuration's ([`crate::config::EdgeSync`]); the answer's JSON is the one
//! type the issuer writes ([`shared::edge_feed::FeedAnswer`]). The adapters fetch, through
//! [`crate::sync`]; this module says what to ask for ([`EdgeState::request_path`]), whether an
//! answer is acceptable ([`parse_answer`]) and what it changes ([`EdgeState::apply`]).
//!
//! An answer changes the state only as a whole and only if every part of it is valid: a wrong
//! status, an oversized or malformed body, or a cursor older than the one held is refused and
//! changes nothing. No answer takes a revocation back: revocations leave the state only when
//! every token they cover has expired.
//!
//! The cursor sent back is the answer's `cursor` with its `cursor_stamp` (`since=N.STAMP`), the
//! proof of the store's history it belongs to: a store restored from a backup, which numbers
//! again from the backup's last revocation, answers a cursor of another history with a full
//! snapshot. An issuer that sends no stamp gets the number alone.

mod poll;

pub use poll::{PollEnd, Poller, Todo, WARN_EVERY};

use crate::cache::{Remember, TokenCache};
use crate::config::{key_ring, Config, EdgeSync, MAX_KEYS};
use shared::edge_feed::FeedAnswer;
use shared::revocation::{parse_stamp, Revocation, RevocationSet};
use shared::KeyRing;
use std::cell::RefCell;
use std::fmt;

/// Largest feed answer read, in bytes. The issuer pages its answers (10,000 revocations, about
/// 900 KiB); anything bigger is refused unread.
pub const MAX_ANSWER_BYTES: usize = 2 << 20;

/// Most revocations accepted in one answer.
pub const MAX_ENTRIES: usize = 20_000;

/// The node name of an edge whose Envoy gives none and whose configuration names none.
pub use shared::edge_feed::UNKNOWN_NODE;

/// Who an edge is, as each of its polls says ([`shared::edge_feed::NODE_HEADER`] and
/// [`shared::edge_feed::VM_HEADER`]), so the issuer can list which edge holds which keys and
/// revocations: the Envoy node and the VM (one per worker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeIdentity {
    /// Envoy's `node.id`, or `unknown` when it has none that is a valid name.
    pub node: String,
    /// The VM ([`shared::edge_feed::vm_name`]).
    pub vm: String,
}

impl EdgeIdentity {
    /// The identity of a VM of the node `node` (Envoy's property, if any) configured first at
    /// `started_nanos` since the epoch, the `ordinal`-th VM of its Envoy.
    pub fn new(node: Option<&[u8]>, started_nanos: u128, ordinal: u32) -> Self {
        let node = node
            .and_then(|n| std::str::from_utf8(n).ok())
            .filter(|n| shared::edge_feed::is_edge_name(n))
            .unwrap_or(UNKNOWN_NODE);
        Self {
            node: node.to_owned(),
            vm: shared::edge_feed::vm_name(started_nanos, ordinal),
        }
    }

    /// The node name a poll gives: Envoy's, else the configured one (`edge_sync.node`), else
    /// `unknown`.
    pub fn node_or<'a>(&'a self, configured: Option<&'a str>) -> &'a str {
        match configured {
            Some(node) if self.node == UNKNOWN_NODE => node,
            _ => &self.node,
        }
    }
}

/// What verification uses at this moment: the key ring, the longest lifetime a token may claim,
/// and the revocations in force. Without edge sync it is the configuration's, forever.
#[derive(Debug, Clone)]
pub struct EdgeState {
    // Changed only by `apply`, which empties the cache whenever it changes any of them.
    pub(crate) ring: KeyRing,
    pub(crate) max_lifetime: u64,
    pub(crate) revoked: RevocationSet,
    /// Tokens verified under this state; emptied whenever it changes. Behind a `RefCell`: the
    /// requests that share the state read all of it and add to this ([`EdgeState::remember`]).
    pub(crate) cache: RefCell<TokenCache>,
    keys_version: Option<String>,
    /// When the last good answer was applied (seconds since the epoch), if ever: what
    /// [`EdgeState::age`] counts from, and whether polls ask for what changed.
    synced_at: Option<u64>,
    /// True once the first full snapshot has arrived to its last page: from then on the state
    /// holds every revocation in force as of some moment.
    caught_up: bool,
    started_at: u64,
    /// Counts the answers that changed the keys or the revocations ([`EdgeState::generation`]).
    generation: u64,
    /// Who verifies ES256 proofs: the module, or the host ([`EdgeState::set_es256`]).
    pub(crate) es256: crate::dpop::Es256By,
}

impl EdgeState {
    /// The state a configuration starts with at `now`: its static key ring, no revocation.
    pub fn new(cfg: &Config, now: u64) -> Self {
        Self {
            ring: cfg.ring.clone(),
            max_lifetime: cfg.max_lifetime,
            revoked: RevocationSet::default(),
            cache: RefCell::new(TokenCache::new(cfg.token_cache_entries)),
            keys_version: None,
            synced_at: None,
            caught_up: false,
            started_at: now,
            generation: 0,
            es256: crate::dpop::Es256By::MODULE,
        }
    }

    /// Has ES256 proofs verified by `by` from now on (the module's own code until then).
    pub fn set_es256(&mut self, by: crate::dpop::Es256By) {
        self.es256 = by;
    }

    /// How many answers have changed the keys or the revocations: a copy of the state with the
    /// same generation verifies the same way ([`EdgeState::follow`]).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Brings this copy (the native filter keeps one per worker thread, with its own token cache)
    /// up to date with `source`: its keys and revocations when they changed (which empties this
    /// copy's cache, as [`EdgeState::apply`] does), and always when it last synced.
    pub fn follow(&mut self, source: &EdgeState) {
        if self.generation != source.generation {
            self.cache.get_mut().clear();
            self.ring = source.ring.clone();
            self.max_lifetime = source.max_lifetime;
            self.revoked = source.revoked.clone();
            self.keys_version = source.keys_version.clone();
            self.generation = source.generation;
        }
        self.synced_at = source.synced_at;
        self.caught_up = source.caught_up;
        self.started_at = source.started_at;
    }

    /// The `:path` of the next poll of `sync`'s feed: a full snapshot before the first good sync, afterwards what
    /// changed since the state's cursor (with its stamp, if the feed gave one) and key ring
    /// version, asking the issuer to hold the poll up to `wait` seconds until there is news
    /// (`&wait=S`; not with 0, nor for a full snapshot, which is news).
    pub fn request_path(&self, sync: &EdgeSync, wait: u64) -> String {
        let mut path = sync.path.clone();
        if self.synced_at.is_some() {
            path.push_str(&format!("?since={}", self.revoked.position()));
            if let Some(v) = &self.keys_version {
                path.push_str(&format!("&keys={v}"));
            }
            if wait > 0 {
                path.push_str(&format!("&wait={wait}"));
            }
        }
        path
    }

    /// Whether a poll now would be for a full snapshot (nothing to wait for).
    pub fn wants_snapshot(&self) -> bool {
        self.synced_at.is_none()
    }

    /// Remembers a token that [`crate::decision::decide`] verified under this state, so its
    /// repeats skip verification until the state changes. The token cache is the one part of
    /// the state a request changes; it is emptied by [`EdgeState::apply`].
    pub fn remember(&self, verified: Remember<'_>) {
        self.cache.borrow_mut().insert(verified);
    }

    /// Revocations in force.
    pub fn revoked(&self) -> &RevocationSet {
        &self.revoked
    }

    /// Seconds since the last good sync (or since the filter started, before the first).
    pub fn age(&self, now: u64) -> u64 {
        now.saturating_sub(self.synced_at.unwrap_or(self.started_at))
    }

    /// True if the filter must refuse every request: it has no key at all (edge sync before its
    /// first answer, without static keys), or its state is older than the configured limit.
    pub fn unusable(&self, sync: Option<&EdgeSync>, now: u64) -> bool {
        self.ring.keys().is_empty()
            || sync
                .and_then(|s| s.max_staleness)
                .is_some_and(|limit| self.age(now) > limit)
    }

    /// Seconds since the VM started (its configuration was applied).
    pub fn running_for(&self, now: u64) -> u64 {
        now.saturating_sub(self.started_at)
    }

    /// True once the first good answer, a full snapshot, has arrived whole (all its pages).
    pub fn caught_up(&self) -> bool {
        self.caught_up
    }

    /// True if a request with a token must get 503 because edge sync has not had its first good
    /// answer whole since the VM started and the start-up grace (`startup_grace_seconds`, by
    /// default none) is over: until then the filter does not know every revocation in force,
    /// and a token it would accept may have been revoked. Always false without edge sync.
    pub fn awaiting_first_answer(&self, sync: Option<&EdgeSync>, now: u64) -> bool {
        sync.is_some_and(|s| !self.caught_up && self.running_for(now) >= s.startup_grace)
    }

    /// Applies a validated answer received at `now`. Anything new (a revocation, a key ring, a
    /// snapshot) empties the token cache: what was verified before may be refused now.
    pub fn apply(&mut self, update: FeedUpdate, now: u64) {
        if update.full || update.keys.is_some() || !update.entries.is_empty() {
            self.cache.get_mut().clear();
            self.generation += 1;
        }
        if update.full {
            self.revoked
                .apply_snapshot(&update.entries, update.cursor, now);
        } else {
            self.revoked.apply(&update.entries, now);
        }
        self.revoked.stamp_cursor(update.cursor, update.stamp);
        if let Some((ring, max_lifetime)) = update.keys {
            self.ring = ring;
            self.max_lifetime = max_lifetime;
        }
        self.keys_version = Some(update.keys_version);
        self.synced_at = Some(now);
        self.caught_up |= !update.more;
    }
}

/// A feed answer that passed every check, ready to apply.
#[derive(Debug)]
pub struct FeedUpdate {
    entries: Vec<Revocation>,
    cursor: u64,
    stamp: Option<u64>,
    full: bool,
    /// True if the issuer has more revocations to send at once.
    pub more: bool,
    keys: Option<(KeyRing, u64)>,
    keys_version: String,
    /// The longest wait the issuer grants a poll that asks for one (`wait_max_seconds`); `None`
    /// from an issuer that answers every poll at once.
    pub wait_max: Option<u64>,
    /// The poll asked to wait and the issuer, at its bound of waiting polls, answered at once.
    pub busy: bool,
}

impl FeedUpdate {
    /// True for a full snapshot, which may restart the cursor (a store restored from a backup).
    pub fn is_full(&self) -> bool {
        self.full
    }
}

/// Why an answer was refused. The message never includes the answer's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FeedError {
    /// Not 200.
    Status(u32),
    /// Larger than [`MAX_ANSWER_BYTES`].
    TooLarge(usize),
    /// Not the feed's JSON, or a field out of its range.
    Malformed(String),
    /// Older than the state held: its cursor or an entry is at or before the held cursor.
    Stale {
        /// The cursor held.
        held: u64,
        /// The answer's.
        got: u64,
    },
}

impl fmt::Display for FeedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Status(s) => write!(f, "the feed answered {s}"),
            Self::TooLarge(n) => write!(f, "the answer is {n} bytes, over {MAX_ANSWER_BYTES}"),
            Self::Malformed(m) => write!(f, "not a feed answer: {m}"),
            Self::Stale { held, got } => {
                write!(
                    f,
                    "an answer older than the state held (cursor {got} < {held})"
                )
            }
        }
    }
}

fn malformed<T>(msg: impl Into<String>) -> Result<T, FeedError> {
    Err(FeedError::Malformed(msg.into()))
}

/// Checks a feed answer (its status and body) against the state held; only a checked answer
/// can be applied.
pub fn parse_answer(status: u32, body: &[u8], state: &EdgeState) -> Result<FeedUpdate, FeedError> {
    if status != 200 {
        return Err(FeedError::Status(status));
    }
    if body.len() > MAX_ANSWER_BYTES {
        return Err(FeedError::TooLarge(body.len()));
    }
    // serde's message could quote a value (a key's secret): only the position is told.
    let raw: FeedAnswer = serde_json::from_slice(body)
        .map_err(|e| FeedError::Malformed(format!("line {} column {}", e.line(), e.column())))?;
    let v = &raw.keys_version;
    if v.is_empty() || v.len() > 64 || !v.bytes().all(|c| c.is_ascii_alphanumeric()) {
        return malformed("keys_version");
    }
    if raw.revoked.len() > MAX_ENTRIES {
        return malformed("too many revocations in one answer");
    }
    let stamp = match raw.cursor_stamp.as_deref().map(parse_stamp) {
        None => None,
        Some(Some(stamp)) => Some(stamp),
        Some(None) => return malformed("cursor_stamp: 16 hex digits"),
    };
    let held = state.revoked.cursor();
    if !raw.full && raw.cursor < held {
        return Err(FeedError::Stale {
            held,
            got: raw.cursor,
        });
    }
    let mut last = 0;
    let mut entries = Vec::with_capacity(raw.revoked.len());
    for e in raw.revoked {
        if e.seq <= last || e.seq > raw.cursor || e.at > e.until {
            return malformed("revocations out of order or beyond the cursor");
        }
        if !raw.full && e.seq <= held {
            return Err(FeedError::Stale { held, got: e.seq });
        }
        let (seq, at, until) = (e.seq, e.at, e.until);
        let Some(what) = e.revoked() else {
            return malformed("a revocation names no token, user or client");
        };
        last = seq;
        entries.push(Revocation {
            seq,
            what,
            at,
            until,
            stamp: None,
        });
    }
    let keys = match (raw.keys, raw.max_token_lifetime_seconds) {
        (Some(keys), Some(lifetime)) => {
            if keys.is_empty() || keys.len() > MAX_KEYS {
                return malformed("keys: 1 to 64 keys");
            }
            if !(1..=86_400).contains(&lifetime) {
                return malformed("max_token_lifetime_seconds: 1 to 86400");
            }
            let ring = key_ring(&keys, "keys").map_err(|e| FeedError::Malformed(e.0))?;
            Some((ring, lifetime))
        }
        (None, None) if state.keys_version.as_deref() == Some(v.as_str()) => None,
        (None, None) => return malformed("a new keys_version without its keys"),
        _ => return malformed("keys and max_token_lifetime_seconds come together"),
    };
    Ok(FeedUpdate {
        // Asking again at once only after progress: a feed that says "more" and sends nothing
        // waits for the next poll.
        more: raw.more && !entries.is_empty(),
        entries,
        cursor: raw.cursor,
        stamp,
        full: raw.full,
        keys,
        keys_version: raw.keys_version,
        wait_max: raw.wait_max_seconds.filter(|w| *w > 0),
        busy: raw.busy,
    })
}

#[cfg(test)]
mod follow_tests;
#[cfg(test)]
mod tests;
