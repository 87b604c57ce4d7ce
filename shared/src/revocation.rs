//! Revocations of access tokens: what the issuer's store records when an access token is revoked
//! or a user or client loses its tokens, and the in-memory set that answers "is this token
//! revoked?" in the issuer (introspection) and at the edge (the Envoy filter, through the edge
//! feed).
//!
//! Access tokens are verified offline, so a revocation is a durable entry in force until every
//! token it covers would have expired anyway: one token until its `exp`, a user's or a client's
//! tokens until the access token lifetime after the moment of revocation, each plus the keys'
//! 300 s margin for clocks (`KEY_RETIRE_MARGIN`). Entries are numbered in
//! the order they were recorded, never reusing a number, so a reader that has seen entries up to
//! N asks for those after N.
//!
//! A store restored from a backup numbers again from the backup's last entry, so a number alone
//! does not say which history it belongs to: a reader at N may have seen another entry N than
//! the store holds now, and asking for those after N would skip the new ones up to N. Each entry
//! therefore gets a random 64-bit stamp when it is recorded, and a reader's cursor is the number
//! with the stamp of its entry ([`Cursor`]). The store answers whether it still holds that entry
//! with that stamp ([`RevocationPage::continues`]); if not, the reader reads everything in force
//! again (a full snapshot), which it adds to what it holds. The store never sweeps its newest
//! entry, so a reader that is up to date keeps a cursor the store can check however long
//! nothing new is recorded.

use crate::token::{SubjectKind, TokenBody, JTI_LEN};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// What a revocation covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Revoked {
    /// One access token, by its id (hex).
    Token {
        /// The token id, 32 hex digits.
        jti: String,
    },
    /// Every token of a user (disabled, removed, or given a new password) issued at or before
    /// the revocation.
    User {
        /// The user name.
        name: String,
    },
    /// Every token of a client (deactivated or removed) issued at or before the revocation.
    Client {
        /// The client id.
        id: String,
    },
    /// Every access token of a refresh token family (revoked for reuse or through the revoke
    /// endpoint): tokens whose id begins with the family's tag ([`FAMILY_TAG_LEN`] bytes).
    Family {
        /// The family tag, 16 hex digits.
        tag: String,
    },
}

/// Length in bytes of a family tag: an access token minted for a refresh token family (password
/// and refresh grants) has an id whose first bytes are its family's tag, derived by the issuer
/// with a keyed hash of the family, and whose other bytes are random. The token format is
/// unchanged (`mmat1`): to any other reader the id is still 16 opaque bytes.
pub const FAMILY_TAG_LEN: usize = 8;

/// How long after a client's revocation tokens it is issued still count as covered: an issuer
/// may keep a deactivated client in its client cache for up to a second and mint for it
/// meanwhile.
pub const CLIENT_GRACE: u64 = 1;

/// Revocations after a cursor, and the highest number given out so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RevocationPage {
    /// The revocations, in order.
    pub entries: Vec<Revocation>,
    /// The highest revocation number given out (in force or not).
    pub latest: u64,
    /// The stamp of the entry numbered `latest`, if the store holds it with one.
    pub latest_stamp: Option<u64>,
    /// The stamp of the entry numbered as the cursor the page was read after, if the store
    /// holds it with one.
    pub since_stamp: Option<u64>,
}

impl RevocationPage {
    /// True if a reader at `since` (with the stamp of its entry, if it has one) may go on with
    /// the entries of this page, read after `since`: the store has given out that number, and
    /// its entry is the one the reader saw. False for a cursor of another history (the store was
    /// restored from a backup), or one whose entry was swept (a reader behind by longer than the
    /// entries live): that reader must read everything in force again. A cursor without a stamp
    /// (recorded before stamps, or from a reader that sends none) is checked by its number only.
    pub fn continues(&self, since: u64, stamp: Option<u64>) -> bool {
        since <= self.latest && stamp.is_none_or(|s| self.since_stamp == Some(s))
    }

    /// The stamp of the entry numbered `seq` as far as this page knows it: one of its entries,
    /// the latest, or the one it was read after (`since`).
    pub fn stamp_of(&self, seq: u64, since: u64) -> Option<u64> {
        match self.entries.iter().find(|e| e.seq == seq) {
            Some(e) => e.stamp,
            None if seq == self.latest => self.latest_stamp,
            None if seq == since => self.since_stamp,
            None => None,
        }
    }
}

/// Where a reader of the revocations stands: the number of the last entry it has, and that
/// entry's stamp if it had one. Written `N` or `N.STAMP` (the stamp in 16 lower-case hex digits)
/// in the edge feed's `since`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Cursor {
    /// The number of the last entry read (0: none).
    pub seq: u64,
    /// Its stamp.
    pub stamp: Option<u64>,
}

impl Cursor {
    /// Parses `N` or `N.STAMP`: N in 1 to 20 ASCII digits, STAMP in exactly 16 lower-case hex
    /// digits; anything else (a sign, a space, upper case) is `None`.
    pub fn parse(s: &str) -> Option<Self> {
        let (seq, stamp) = match s.split_once('.') {
            Some((seq, stamp)) => (seq, Some(parse_stamp(stamp)?)),
            None => (s, None),
        };
        if seq.is_empty() || seq.len() > 20 || !seq.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        Some(Self {
            seq: seq.parse().ok()?,
            stamp,
        })
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.stamp {
            Some(stamp) => write!(f, "{}.{}", self.seq, stamp_hex(stamp)),
            None => write!(f, "{}", self.seq),
        }
    }
}

/// A stamp as the edge feed writes it: 16 lower-case hex digits.
pub fn stamp_hex(stamp: u64) -> String {
    format!("{stamp:016x}")
}

/// A stamp from exactly 16 lower-case hex digits.
pub fn parse_stamp(hex: &str) -> Option<u64> {
    if hex.len() != 16 || !hex.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// A recorded revocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revocation {
    /// Its number: each recorded revocation gets the next, never reused.
    pub seq: u64,
    /// What it covers.
    pub what: Revoked,
    /// When it was recorded (seconds since the epoch): tokens issued at or before are covered.
    pub at: u64,
    /// When every token it covers has expired; the sweep deletes it then (unless it is the
    /// newest).
    pub until: u64,
    /// A random number drawn when it was recorded, which a cursor at this entry carries as the
    /// proof of the history it belongs to (see the module's documentation). `None` for an entry
    /// recorded before stamps, and for entries as the edge feed sends them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stamp: Option<u64>,
}

/// The revocations in force, as a reader of the store holds them.
#[derive(Debug, Clone)]
pub struct RevocationSet {
    tokens: HashMap<[u8; JTI_LEN], u64>,
    families: HashMap<[u8; FAMILY_TAG_LEN], u64>,
    users: HashMap<String, (u64, u64)>,
    clients: HashMap<String, (u64, u64)>,
    cursor: u64,
    /// The stamp of the cursor's entry, if known.
    stamp: Option<u64>,
    /// The earliest `until` of those held (`u64::MAX` when none is), so a sweep with nothing due
    /// costs nothing: the issuer and every edge VM apply the feed every second.
    next_due: u64,
}

impl Default for RevocationSet {
    fn default() -> Self {
        Self {
            tokens: HashMap::new(),
            families: HashMap::new(),
            users: HashMap::new(),
            clients: HashMap::new(),
            cursor: 0,
            stamp: None,
            next_due: u64::MAX,
        }
    }
}

impl RevocationSet {
    /// The number of the last revocation applied: ask the store for those after it.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The cursor with the stamp of its entry, if known: what to ask the store with.
    pub fn position(&self) -> Cursor {
        Cursor {
            seq: self.cursor,
            stamp: self.stamp,
        }
    }

    /// Applies revocations recorded after [`RevocationSet::cursor`], in order, and forgets those
    /// no longer in force at `now`. An entry at or before the cursor is old news and skipped.
    /// The cursor takes the number and the stamp of the last entry applied.
    pub fn apply(&mut self, entries: &[Revocation], now: u64) {
        for e in entries {
            if e.seq > self.cursor {
                self.insert(e);
                self.cursor = e.seq;
                self.stamp = e.stamp;
            }
        }
        self.expire(now);
    }

    /// Adds every revocation of a full snapshot (all in force, as of revocation number
    /// `cursor`) to those held, and continues from `cursor`, even one below the held cursor: the
    /// store was restored from a backup and numbers again from there. Nothing held is dropped
    /// before its time, so no answer can take a revocation back. The cursor's stamp is unknown
    /// until [`RevocationSet::stamp_cursor`] gives it.
    pub fn apply_snapshot(&mut self, entries: &[Revocation], cursor: u64, now: u64) {
        for e in entries {
            self.insert(e);
        }
        self.cursor = cursor;
        self.stamp = None;
        self.expire(now);
    }

    /// Records `stamp` as the stamp of the entry numbered `cursor`, the cursor held (the store or
    /// the edge feed says so); for any other number the cursor's stamp becomes unknown.
    pub fn stamp_cursor(&mut self, cursor: u64, stamp: Option<u64>) {
        self.stamp = stamp.filter(|_| cursor == self.cursor);
    }

    /// Forgets the revocations no longer in force at `now`. Walks the set only when one is due.
    pub fn expire(&mut self, now: u64) {
        if self.next_due > now {
            return;
        }
        let mut next = u64::MAX;
        let mut keep = |until: u64| {
            let kept = until > now;
            if kept {
                next = next.min(until);
            }
            kept
        };
        self.tokens.retain(|_, until| keep(*until));
        self.families.retain(|_, until| keep(*until));
        self.users.retain(|_, (_, until)| keep(*until));
        self.clients.retain(|_, (_, until)| keep(*until));
        self.next_due = next;
    }

    fn insert(&mut self, e: &Revocation) {
        self.next_due = self.next_due.min(e.until);
        match &e.what {
            Revoked::Token { jti } => {
                // An id that is not 32 hex digits names no token the issuer minted.
                if let Some(jti) = parse_jti(jti) {
                    let until = self.tokens.entry(jti).or_insert(e.until);
                    *until = (*until).max(e.until);
                }
            }
            Revoked::Family { tag } => {
                if let Some(tag) = parse_hex(tag) {
                    let until = self.families.entry(tag).or_insert(e.until);
                    *until = (*until).max(e.until);
                }
            }
            Revoked::User { name } => {
                let slot = self.users.entry(name.clone()).or_insert((e.at, e.until));
                *slot = (slot.0.max(e.at), slot.1.max(e.until));
            }
            Revoked::Client { id } => {
                let slot = self.clients.entry(id.clone()).or_insert((e.at, e.until));
                *slot = (slot.0.max(e.at), slot.1.max(e.until));
            }
        }
    }

    /// True if a revocation in force covers the token: its id, or its user's or client's
    /// revocation at or after its `iat` (for a client, [`CLIENT_GRACE`] later still). A token
    /// from token exchange is covered by the revocation of any client its actor chain names
    /// (every actor and the origin), and by its family's, whose tag it carries over from the
    /// subject token.
    pub fn covers(&self, body: &TokenBody) -> bool {
        let before = |slot: Option<&(u64, u64)>, grace: u64| {
            slot.is_some_and(|(at, _)| body.iat <= at.saturating_add(grace))
        };
        let chain_revoked = || {
            body.act.as_ref().is_some_and(|chain| {
                !self.clients.is_empty()
                    && chain
                        .clients()
                        .any(|c| before(self.clients.get(c), CLIENT_GRACE))
            })
        };
        self.has_token(&body.jti)
            || self.has_family(&body.jti)
            || before(self.clients.get(&body.client), CLIENT_GRACE)
            || chain_revoked()
            || (body.identity.kind == SubjectKind::User
                && before(self.users.get(&body.identity.subject), 0))
    }

    /// True if the token with this id is revoked by a revocation of its own.
    pub fn has_token(&self, jti: &[u8; JTI_LEN]) -> bool {
        self.tokens.contains_key(jti)
    }

    /// True if a family revocation covers the token with this id.
    fn has_family(&self, jti: &[u8; JTI_LEN]) -> bool {
        !self.families.is_empty()
            && jti[..FAMILY_TAG_LEN]
                .try_into()
                .is_ok_and(|tag| self.has_family_tag(&tag))
    }

    /// True if the family with this tag is revoked.
    fn has_family_tag(&self, tag: &[u8; FAMILY_TAG_LEN]) -> bool {
        self.families.contains_key(tag)
    }

    /// How many revocations are in force.
    pub fn len(&self) -> usize {
        self.tokens.len() + self.families.len() + self.users.len() + self.clients.len()
    }

    /// True if none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A token id from its 32 lower- or upper-case hex digits.
pub fn parse_jti(hex: &str) -> Option<[u8; JTI_LEN]> {
    parse_hex(hex)
}

/// `N` bytes from exactly `2 * N` hex digits.
pub fn parse_hex<const N: usize>(hex: &str) -> Option<[u8; N]> {
    let digits = hex.as_bytes();
    if digits.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    let nibble = |c: u8| {
        char::from(c)
            .to_digit(16)
            .and_then(|d| u8::try_from(d).ok())
    };
    for (byte, pair) in out.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

#[cfg(test)]
mod tests;
