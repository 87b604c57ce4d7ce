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
    /// When every token it covers has expired; the sweep deletes it then.
    pub until: u64,
}

/// The revocations in force, as a reader of the store holds them.
#[derive(Debug, Clone)]
pub struct RevocationSet {
    tokens: HashMap<[u8; JTI_LEN], u64>,
    families: HashMap<[u8; FAMILY_TAG_LEN], u64>,
    users: HashMap<String, (u64, u64)>,
    clients: HashMap<String, (u64, u64)>,
    cursor: u64,
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
            next_due: u64::MAX,
        }
    }
}

impl RevocationSet {
    /// The number of the last revocation applied: ask the store for those after it.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// Applies revocations recorded after [`RevocationSet::cursor`], in order, and forgets those
    /// no longer in force at `now`. An entry at or before the cursor is old news and skipped.
    pub fn apply(&mut self, entries: &[Revocation], now: u64) {
        for e in entries {
            if e.seq > self.cursor {
                self.insert(e);
                self.cursor = e.seq;
            }
        }
        self.expire(now);
    }

    /// Adds every revocation of a full snapshot (all in force, as of revocation number
    /// `cursor`) to those held, and continues from `cursor`, even one below the held cursor: the
    /// store was restored from a backup and numbers again from there. Nothing held is dropped
    /// before its time, so no answer can take a revocation back.
    pub fn apply_snapshot(&mut self, entries: &[Revocation], cursor: u64, now: u64) {
        for e in entries {
            self.insert(e);
        }
        self.cursor = cursor;
        self.expire(now);
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
    /// revocation at or after its `iat` (for a client, [`CLIENT_GRACE`] later still).
    pub fn covers(&self, body: &TokenBody) -> bool {
        let before = |slot: Option<&(u64, u64)>, grace: u64| {
            slot.is_some_and(|(at, _)| body.iat <= at.saturating_add(grace))
        };
        self.has_token(&body.jti)
            || self.has_family(&body.jti)
            || before(self.clients.get(&body.client), CLIENT_GRACE)
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
mod tests {
    use super::*;
    use crate::token::Identity;

    fn body(kind: SubjectKind, subject: &str, client: &str, iat: u64) -> TokenBody {
        TokenBody {
            kid: 1,
            jti: [7; 16],
            iat,
            exp: iat + 600,
            client: client.into(),
            identity: Identity {
                kind,
                subject: subject.into(),
                roles: vec![],
                claims: vec![],
            },
        }
    }

    fn entry(seq: u64, what: Revoked, at: u64) -> Revocation {
        Revocation {
            seq,
            what,
            at,
            until: at + 600,
        }
    }

    #[test]
    fn tokens_issued_before_a_revocation_are_covered_and_later_ones_not() {
        let mut set = RevocationSet::default();
        let alice = body(SubjectKind::User, "alice", "app", 1_000);
        assert!(!set.covers(&alice));
        set.apply(
            &[entry(
                1,
                Revoked::User {
                    name: "alice".into(),
                },
                1_000,
            )],
            1_001,
        );
        assert!(set.covers(&alice), "issued in the second of the revocation");
        assert!(!set.covers(&body(SubjectKind::User, "alice", "app", 1_001)));
        assert!(!set.covers(&body(SubjectKind::User, "bob", "app", 900)));
        // An impersonated subject of the same name is not the user.
        assert!(!set.covers(&body(SubjectKind::Impersonation, "alice", "app", 900)));
        set.apply(
            &[entry(2, Revoked::Client { id: "app".into() }, 1_010)],
            1_011,
        );
        assert!(set.covers(&body(SubjectKind::Client, "", "app", 1_005)));
        assert!(
            set.covers(&body(SubjectKind::Client, "", "app", 1_011)),
            "minted through a client cache a second old"
        );
        assert!(!set.covers(&body(SubjectKind::Client, "", "app", 1_012)));
        set.apply(
            &[entry(
                3,
                Revoked::Token {
                    jti: "07".repeat(16),
                },
                1_020,
            )],
            1_021,
        );
        assert!(set.covers(&body(SubjectKind::User, "carol", "other", 1_019)));
        assert_eq!((set.cursor(), set.len()), (3, 3));
    }

    #[test]
    fn entries_apply_once_in_order_and_expire() {
        let mut set = RevocationSet::default();
        let e = entry(
            5,
            Revoked::User {
                name: "alice".into(),
            },
            1_000,
        );
        set.apply(std::slice::from_ref(&e), 1_001);
        set.apply(
            &[entry(4, Revoked::Client { id: "app".into() }, 1_000)],
            1_001,
        );
        assert_eq!(set.len(), 1, "an entry at or before the cursor is old news");
        set.apply(&[], 1_600);
        assert!(
            set.is_empty(),
            "gone once every token it covered has expired"
        );
        assert_eq!(set.cursor(), 5);
    }

    #[test]
    fn each_entry_goes_at_its_own_until_and_not_before() {
        let mut set = RevocationSet::default();
        let until = |seq, until| Revocation {
            seq,
            what: Revoked::Token {
                jti: format!("{seq:032x}"),
            },
            at: 1_000,
            until,
        };
        set.apply(&[until(1, 1_300), until(2, 1_100), until(3, 1_200)], 1_000);
        let held = |set: &RevocationSet| {
            (1..=4)
                .filter(|&n| set.has_token(&parse_jti(&format!("{n:032x}")).unwrap()))
                .collect::<Vec<_>>()
        };
        set.apply(&[], 1_099);
        assert_eq!(held(&set), [1, 2, 3]);
        set.apply(&[], 1_100);
        assert_eq!(held(&set), [1, 3]);
        set.apply(&[until(4, 1_150)], 1_101);
        assert_eq!(held(&set), [1, 3, 4]);
        set.apply(&[], 1_150);
        assert_eq!(held(&set), [1, 3], "one added later is due in its turn");
        set.apply(&[], 1_299);
        assert_eq!(held(&set), [1]);
        set.apply(&[], 1_300);
        assert!(set.is_empty());
    }

    #[test]
    fn a_snapshot_adds_to_what_is_held_and_resets_the_cursor() {
        let mut set = RevocationSet::default();
        let alice = Revoked::User {
            name: "alice".into(),
        };
        set.apply(&[entry(9, alice, 1_000)], 1_001);
        set.apply_snapshot(
            &[entry(2, Revoked::Client { id: "app".into() }, 1_000)],
            2,
            1_001,
        );
        assert_eq!((set.cursor(), set.len()), (2, 2), "alice stays revoked");
        assert!(set.covers(&body(SubjectKind::User, "alice", "web", 999)));
    }

    #[test]
    fn a_family_revocation_covers_the_tokens_tagged_with_it() {
        let mut set = RevocationSet::default();
        let tag = Revoked::Family {
            tag: "07".repeat(FAMILY_TAG_LEN),
        };
        set.apply(&[entry(1, tag, 1_000)], 1_001);
        let mut tagged = body(SubjectKind::User, "alice", "app", 2_000);
        tagged.jti = [7, 7, 7, 7, 7, 7, 7, 7, 1, 2, 3, 4, 5, 6, 7, 8];
        assert!(set.covers(&tagged), "whenever it was issued");
        tagged.jti[7] = 8;
        assert!(!set.covers(&tagged));
    }

    #[test]
    fn token_ids_parse_from_hex_only() {
        assert_eq!(parse_jti(&"0a".repeat(16)), Some([10; 16]));
        assert_eq!(parse_jti(&"0A".repeat(16)), Some([10; 16]));
        for bad in [
            "",
            "0a",
            &"0g".repeat(16),
            &"+a".repeat(16),
            &"0a".repeat(17),
        ] {
            assert_eq!(parse_jti(bad), None, "{bad}");
        }
    }
}
