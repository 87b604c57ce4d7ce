//! The life of a signing key, the same on every backend: published (pending), signing,
//! verifying after it was superseded, retired once every token it signed has expired.

use serde::{Deserialize, Serialize};

/// Seconds a superseded signing key keeps verifying beyond the access token lifetime.
pub const KEY_RETIRE_MARGIN: u64 = 300;

/// A rotation with this delay publishes a key that signs only once promoted
/// ([`Promotion`]): `keys rotate --when-edges-ready`, which promotes it when every edge holds it.
/// Its `signs_from` (and the `superseded_at` of the key it supersedes) lie this far ahead.
pub const HELD: u64 = 1 << 62;

/// Where a key is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyState {
    /// Published (in the ring and the filter configuration), not signing yet.
    Pending,
    /// Published, and signs only once promoted (`keys rotate --when-edges-ready`).
    Held,
    /// The key that signs new tokens.
    Signing,
    /// Superseded; verifies tokens it signed until they have expired.
    Verifying,
    /// No longer verifies; swept.
    Retired,
}

impl KeyState {
    /// The state's name, as `keys list` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Held => "held",
            Self::Signing => "signing",
            Self::Verifying => "verifying",
            Self::Retired => "retired",
        }
    }
}

impl std::fmt::Display for KeyState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// A stored signing key: the secret (hex) and its times. The secret is wiped on drop.
#[derive(Serialize, Deserialize)]
pub struct KeyRecord {
    /// The 32-byte secret, hex.
    pub secret: String,
    /// Seconds since the epoch.
    pub created_at: u64,
    /// Signs from this time on (until superseded); verifies from creation.
    pub signs_from: u64,
    /// When it stopped signing.
    pub superseded_at: Option<u64>,
    /// When an administrator retired it ahead of time (`keys retire`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_at: Option<u64>,
}

impl KeyRecord {
    /// When the key stops verifying: retired by hand, or once every token it signed expired
    /// after it was superseded.
    pub fn retires_at(&self, access_ttl: u64) -> Option<u64> {
        let natural = self
            .superseded_at
            .map(|t| t + access_ttl + KEY_RETIRE_MARGIN);
        match (natural, self.retired_at) {
            (Some(n), Some(r)) => Some(n.min(r)),
            (n, r) => n.or(r),
        }
    }

    /// Its state at `now`.
    pub fn state(&self, now: u64, access_ttl: u64) -> KeyState {
        match (self.superseded_at, self.retires_at(access_ttl)) {
            _ if self.retired_at.is_some_and(|r| r <= now) => KeyState::Retired,
            _ if self.signs_from >= HELD => KeyState::Held,
            _ if self.signs_from > now => KeyState::Pending,
            (Some(_), Some(r)) if r <= now => KeyState::Retired,
            (Some(s), _) if s <= now => KeyState::Verifying,
            _ => KeyState::Signing,
        }
    }

    /// Its public description at `now`.
    pub fn info(&self, kid: u32, now: u64, access_ttl: u64) -> KeyInfo {
        KeyInfo {
            kid,
            state: self.state(now, access_ttl),
            created_at: self.created_at,
            signs_from: self.signs_from,
            superseded_at: self.superseded_at,
            retires_at: self.retires_at(access_ttl),
        }
    }
}

impl Drop for KeyRecord {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut self.secret);
    }
}

/// What `keys rotate` changes in the keys there are, the same on every backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RotationPlan {
    /// When the new key starts signing.
    pub signs_from: u64,
    /// Keys signing now: they stop at `signs_from` and verify until they retire.
    pub supersede: Vec<u32>,
    /// Pending keys an emergency rotation (no delay) replaces: they never signed, so they are
    /// retired at once, whatever made them pending.
    pub drop_pending: Vec<u32>,
}

impl RotationPlan {
    /// The plan for a rotation at `now` whose key signs `delay` seconds later, given every key's
    /// id and record. `None` while a rotation is pending and `delay` is not 0: one scheduled
    /// rotation at a time, but a rotation without delay (a compromised key) is never refused.
    pub fn of<'a>(
        keys: impl IntoIterator<Item = (u32, &'a KeyRecord)>,
        now: u64,
        delay: u64,
        access_ttl: u64,
    ) -> Option<Self> {
        let mut plan = Self {
            signs_from: now.saturating_add(delay),
            supersede: Vec::new(),
            drop_pending: Vec::new(),
        };
        for (kid, rec) in keys {
            match rec.state(now, access_ttl) {
                KeyState::Pending | KeyState::Held if delay > 0 => return None,
                KeyState::Pending | KeyState::Held => plan.drop_pending.push(kid),
                KeyState::Signing => plan.supersede.push(kid),
                KeyState::Verifying | KeyState::Retired => {}
            }
        }
        Some(plan)
    }
}

/// What `keys rotate` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotated {
    /// The new key.
    pub kid: u32,
    /// Pending keys it replaced (retired at once).
    pub dropped: Vec<u32>,
}

/// What `keys retire` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetireOutcome {
    /// The key verifies nothing from now on.
    Retired,
    /// No such key.
    Unknown,
    /// The key signs, or is about to: rotate first.
    InUse(KeyState),
    /// It was retired already.
    AlreadyRetired,
}

impl RetireOutcome {
    /// What retiring a key in this record means at `now`.
    pub fn of(rec: &KeyRecord, now: u64, access_ttl: u64) -> Self {
        match rec.state(now, access_ttl) {
            KeyState::Verifying => Self::Retired,
            KeyState::Retired => Self::AlreadyRetired,
            state => Self::InUse(state),
        }
    }
}

/// A held key made the signing key (see [`HELD`]): what a backend changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Promotion {
    /// The key that signs from now on.
    pub kid: u32,
    /// Its `signs_from` until now: the `superseded_at` of the keys it supersedes, which become
    /// the time of the promotion.
    pub held_from: u64,
}

/// What promoting a key did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromoteOutcome {
    /// The key signs from now on.
    Promoted,
    /// No such key.
    Unknown,
    /// The key is not held: it signs, signs at a set time, or no longer signs.
    NotHeld(KeyState),
}

impl Promotion {
    /// Promoting key `kid` of `rec` at `now`, or why not (never [`PromoteOutcome::Promoted`]).
    pub fn of(
        kid: u32,
        rec: Option<&KeyRecord>,
        now: u64,
        access_ttl: u64,
    ) -> Result<Self, PromoteOutcome> {
        let rec = rec.ok_or(PromoteOutcome::Unknown)?;
        match rec.state(now, access_ttl) {
            KeyState::Held => Ok(Self {
                kid,
                held_from: rec.signs_from,
            }),
            state => Err(PromoteOutcome::NotHeld(state)),
        }
    }

    /// Applies the promotion at `now` to the record of key `kid`; true if it changed.
    pub fn apply(&self, kid: u32, rec: &mut KeyRecord, now: u64) -> bool {
        if kid == self.kid {
            rec.signs_from = now;
            true
        } else if rec.superseded_at == Some(self.held_from) {
            rec.superseded_at = Some(now);
            true
        } else {
            false
        }
    }
}

/// A signing key's place in its life, as `keys list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyInfo {
    /// Key id.
    pub kid: u32,
    /// Where it is in its life.
    pub state: KeyState,
    /// Seconds since the epoch.
    pub created_at: u64,
    /// When it starts (or started) signing.
    pub signs_from: u64,
    /// When it stopped signing.
    pub superseded_at: Option<u64>,
    /// When it stops verifying.
    pub retires_at: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(signs_from: u64, superseded_at: Option<u64>) -> KeyRecord {
        KeyRecord {
            secret: String::new(),
            created_at: 0,
            signs_from,
            superseded_at,
            retired_at: None,
        }
    }

    #[test]
    fn a_held_key_signs_once_promoted() {
        // Key 1 signs; key 2 is held (published by a rotation with the delay HELD at 100).
        let held = 100 + HELD;
        let mut keys = [(1, rec(0, Some(held))), (2, rec(held, None))];
        assert_eq!(keys[1].1.state(500, 60), KeyState::Held);
        assert_eq!(keys[0].1.state(500, 60), KeyState::Signing);
        let plan = |keys: &[(u32, KeyRecord)], now, delay| {
            RotationPlan::of(keys.iter().map(|(k, r)| (*k, r)), now, delay, 60)
        };
        assert_eq!(plan(&keys, 500, 5), None, "one rotation at a time");
        assert_eq!(plan(&keys, 500, 0).unwrap().drop_pending, vec![2]);
        assert_eq!(
            Promotion::of(1, Some(&keys[0].1), 500, 60),
            Err(PromoteOutcome::NotHeld(KeyState::Signing))
        );
        assert_eq!(
            Promotion::of(3, None, 500, 60),
            Err(PromoteOutcome::Unknown)
        );
        let p = Promotion::of(2, Some(&keys[1].1), 500, 60).unwrap();
        for (kid, rec) in &mut keys {
            assert!(p.apply(*kid, rec, 500));
        }
        assert_eq!(keys[1].1.state(500, 60), KeyState::Signing);
        assert_eq!(keys[0].1.state(500, 60), KeyState::Verifying);
        assert_eq!(keys[0].1.retires_at(60), Some(500 + 60 + KEY_RETIRE_MARGIN));
    }

    #[test]
    fn a_rotation_without_delay_replaces_a_pending_one() {
        // Key 1 signs until 1_000, when pending key 2 would take over; key 0 verifies.
        let keys = [
            (0, rec(0, Some(50))),
            (1, rec(50, Some(1_000))),
            (2, rec(1_000, None)),
        ];
        let at = |now, delay| RotationPlan::of(keys.iter().map(|(k, r)| (*k, r)), now, delay, 60);
        assert_eq!(at(100, 300), None, "one scheduled rotation at a time");
        assert_eq!(
            at(100, 0),
            Some(RotationPlan {
                signs_from: 100,
                supersede: vec![1],
                drop_pending: vec![2],
            })
        );
        // Once key 2 signs, a rotation supersedes it, delayed or not.
        assert_eq!(
            at(1_000, 300),
            Some(RotationPlan {
                signs_from: 1_300,
                supersede: vec![2],
                drop_pending: vec![],
            })
        );
    }
}
