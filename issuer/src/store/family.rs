//! A refresh token family as both backends keep it, one record per family, and the rules of a
//! rotation as a pure function of that record, the presented token and the time.
//!
//! The token names its family and generation ([`RefreshToken`]); the record holds the current
//! generation. A rotation of the current generation is one small update of the record; the
//! previous generation presented again inside the retry window gets the identical successor
//! (derived, never stored); any other earlier generation is reuse and revokes the family.

use super::{RefreshPolicy, RefreshRejection, UserRecord};
use crate::secrets::RefreshToken;
use serde::{Deserialize, Serialize};

/// Everything stored for one refresh token family.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Family {
    /// The client the family was issued to.
    pub client: String,
    /// The user it belongs to.
    pub user: String,
    /// When the password grant started it.
    pub created_at: u64,
    /// The family's absolute end.
    pub absolute_expires_at: u64,
    /// When the current token expires unused (never after `absolute_expires_at`); the sweep
    /// deletes the record after this.
    pub expires_at: u64,
    /// The generation of the current token.
    pub generation: u32,
    /// When the current token was issued by a rotation (`None` for the first token).
    pub rotated_at: Option<u64>,
    /// When the family was revoked, if it was.
    pub revoked_at: Option<u64>,
    /// The thumbprint of the DPoP key the family was started with: every refresh must come with a
    /// proof by that key (`docs/dpop.md`). Absent for a family started without a proof.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jkt: Option<[u8; 32]>,
}

/// What a rotation does to a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Advance the family to the next generation and answer with that token.
    Rotate,
    /// A retry inside the window: answer with the current generation's token; nothing changes.
    Retry,
    /// Reuse outside the window: revoke the family and refuse.
    RevokeForReuse,
    /// Refuse; nothing changes.
    Refuse(RefreshRejection),
}

impl Family {
    /// A new family for `user` at `client`, at generation 0, bound to the DPoP key `jkt` if the
    /// request that started it carried a proof.
    pub fn new(
        client: &str,
        user: &str,
        now: u64,
        policy: &RefreshPolicy,
        jkt: Option<[u8; 32]>,
    ) -> Self {
        let absolute_expires_at = now.saturating_add(policy.absolute_ttl);
        Self {
            client: client.into(),
            user: user.into(),
            created_at: now,
            absolute_expires_at,
            expires_at: now.saturating_add(policy.idle_ttl).min(absolute_expires_at),
            generation: 0,
            rotated_at: None,
            revoked_at: None,
            jkt,
        }
    }

    /// What presenting `token` (verified, of this family) for `client` at `now`, with a DPoP proof
    /// by the key `proof` (or none), does. Whether the client and user are still active is
    /// checked after this, by [`admit`], for the steps that answer with a token; so is the key of
    /// a bound family, which refuses without changing anything (a request without the key cannot
    /// burn the family), while reuse still revokes it.
    pub fn step(
        &self,
        token: RefreshToken,
        client: &str,
        now: u64,
        policy: &RefreshPolicy,
        proof: Option<[u8; 32]>,
    ) -> Step {
        match self.step_unbound(token, client, now, policy) {
            Step::Rotate | Step::Retry if self.jkt.is_some() && proof != self.jkt => {
                Step::Refuse(RefreshRejection::DpopKey)
            }
            step => step,
        }
    }

    fn step_unbound(
        &self,
        token: RefreshToken,
        client: &str,
        now: u64,
        policy: &RefreshPolicy,
    ) -> Step {
        if self.client != client {
            return Step::Refuse(RefreshRejection::OtherClient);
        }
        if self.revoked_at.is_some() {
            return Step::Refuse(RefreshRejection::Revoked);
        }
        if now >= self.expires_at {
            return Step::Refuse(RefreshRejection::Expired);
        }
        if token.generation == self.generation {
            return if token.successor().is_some() {
                Step::Rotate
            } else {
                Step::Refuse(RefreshRejection::Expired)
            };
        }
        if token.generation > self.generation {
            // Only a store restored from a backup older than the token gets here.
            return Step::Refuse(RefreshRejection::Unknown);
        }
        let in_window = self
            .rotated_at
            .is_some_and(|at| now.saturating_sub(at) <= policy.retry_window);
        if token.generation + 1 == self.generation && in_window {
            Step::Retry
        } else {
            Step::RevokeForReuse
        }
    }

    /// When its current token was issued: the last rotation, or the start.
    pub fn last_used(&self) -> u64 {
        self.rotated_at.unwrap_or(self.created_at)
    }

    /// The family after a rotation at `now`.
    pub fn rotated(&self, now: u64, policy: &RefreshPolicy) -> Self {
        Self {
            generation: self.generation.saturating_add(1),
            rotated_at: Some(now),
            expires_at: now
                .saturating_add(policy.idle_ttl)
                .min(self.absolute_expires_at),
            ..self.clone()
        }
    }

    /// The current token of this family.
    pub fn current(&self, family: [u8; 16]) -> RefreshToken {
        RefreshToken {
            family,
            generation: self.generation,
        }
    }

    /// True if `token` is this family's current token and usable at `now` (introspection).
    pub fn usable(&self, token: RefreshToken, now: u64) -> bool {
        token.generation == self.generation && self.revoked_at.is_none() && now < self.expires_at
    }
}

/// The user to mint for, if the client is active and the user exists, is enabled, and has been
/// neither given a new password nor disabled since the family (started at `created_at`) began.
pub fn admit(
    client_active: bool,
    user: Option<UserRecord>,
    created_at: u64,
) -> Result<UserRecord, RefreshRejection> {
    match user {
        Some(u)
            if client_active
                && !u.disabled
                && u.sessions_end_at().is_none_or(|at| at < created_at) =>
        {
            Ok(u)
        }
        _ => Err(RefreshRejection::Inactive),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: RefreshPolicy = RefreshPolicy {
        idle_ttl: 100,
        absolute_ttl: 1_000,
        retry_window: 10,
    };

    fn token(generation: u32) -> RefreshToken {
        RefreshToken {
            family: [7; 16],
            generation,
        }
    }

    #[test]
    fn the_current_generation_rotates_and_the_previous_retries_inside_the_window() {
        let fam = Family::new("app", "alice", 1_000, &POLICY, None);
        assert_eq!(fam.expires_at, 1_100);
        assert_eq!(
            fam.step(token(0), "app", 1_001, &POLICY, None),
            Step::Rotate
        );
        let next = fam.rotated(1_050, &POLICY);
        assert_eq!((next.generation, next.rotated_at), (1, Some(1_050)));
        assert_eq!(next.expires_at, 1_150);
        assert_eq!(next.current([7; 16]), token(1));
        assert_eq!(
            next.step(token(0), "app", 1_060, &POLICY, None),
            Step::Retry
        );
        assert_eq!(
            next.step(token(0), "app", 1_061, &POLICY, None),
            Step::RevokeForReuse
        );
        assert_eq!(
            next.step(token(1), "app", 1_061, &POLICY, None),
            Step::Rotate
        );
        let later = next.rotated(1_055, &POLICY);
        assert_eq!(
            later.step(token(0), "app", 1_056, &POLICY, None),
            Step::RevokeForReuse
        );
    }

    #[test]
    fn refusals_change_nothing_and_name_their_reason() {
        let fam = Family::new("app", "alice", 1_000, &POLICY, None);
        let refuse = |f: &Family, t, c, now| f.step(t, c, now, &POLICY, None);
        assert_eq!(
            refuse(&fam, token(0), "other", 1_001),
            Step::Refuse(RefreshRejection::OtherClient)
        );
        assert_eq!(
            refuse(&fam, token(0), "app", 1_100),
            Step::Refuse(RefreshRejection::Expired)
        );
        assert_eq!(
            refuse(&fam, token(3), "app", 1_001),
            Step::Refuse(RefreshRejection::Unknown)
        );
        let revoked = Family {
            revoked_at: Some(1_001),
            ..fam.clone()
        };
        assert_eq!(
            refuse(&revoked, token(0), "app", 1_002),
            Step::Refuse(RefreshRejection::Revoked)
        );
        let spent = Family {
            generation: u32::MAX,
            ..fam.clone()
        };
        assert_eq!(
            refuse(&spent, token(u32::MAX), "app", 1_002),
            Step::Refuse(RefreshRejection::Expired)
        );
    }

    #[test]
    fn the_absolute_lifetime_caps_every_rotation() {
        let mut fam = Family::new("app", "alice", 0, &POLICY, None);
        for now in (50..1_200).step_by(50) {
            if fam.step(fam.current([7; 16]), "app", now, &POLICY, None) != Step::Rotate {
                assert!(now >= 1_000, "refused at {now}");
                return;
            }
            fam = fam.rotated(now, &POLICY);
            assert!(fam.expires_at <= 1_000);
        }
        panic!("the family outlived its absolute lifetime");
    }

    #[test]
    fn only_active_clients_and_enabled_users_are_admitted() {
        let user = UserRecord {
            password_hash: String::new(),
            disabled: false,
            roles: vec![],
            claims: vec![],
            created_at: 0,
            password_changed_at: None,
            disabled_at: None,
            directory: None,
        };
        assert!(admit(true, Some(user.clone()), 10).is_ok());
        assert_eq!(
            admit(false, Some(user.clone()), 10).err(),
            Some(RefreshRejection::Inactive)
        );
        assert_eq!(
            admit(true, None, 10).err(),
            Some(RefreshRejection::Inactive)
        );
        // A new password ends the families started at or before it.
        let changed = |at| UserRecord {
            password_changed_at: Some(at),
            ..user.clone()
        };
        assert!(admit(true, Some(changed(9)), 10).is_ok());
        assert_eq!(
            admit(true, Some(changed(10)), 10).err(),
            Some(RefreshRejection::Inactive)
        );
        // A disable ends them too, for good: enabled again, only later families work.
        let re_enabled = |at| UserRecord {
            disabled_at: Some(at),
            ..user.clone()
        };
        assert!(admit(true, Some(re_enabled(9)), 10).is_ok());
        assert_eq!(
            admit(true, Some(re_enabled(10)), 10).err(),
            Some(RefreshRejection::Inactive)
        );
        let disabled = UserRecord {
            disabled: true,
            ..user
        };
        assert_eq!(
            admit(true, Some(disabled), 10).err(),
            Some(RefreshRejection::Inactive)
        );
    }

    #[test]
    fn a_bound_family_answers_only_its_key_and_reuse_still_revokes() {
        let key = Some([3; 32]);
        let fam = Family::new("app", "alice", 1_000, &POLICY, key);
        let refused = Step::Refuse(RefreshRejection::DpopKey);
        assert_eq!(fam.step(token(0), "app", 1_001, &POLICY, None), refused);
        assert_eq!(
            fam.step(token(0), "app", 1_001, &POLICY, Some([4; 32])),
            refused
        );
        assert_eq!(fam.step(token(0), "app", 1_001, &POLICY, key), Step::Rotate);
        let next = fam.rotated(1_001, &POLICY);
        assert_eq!(
            next.step(token(0), "app", 1_010, &POLICY, None),
            refused,
            "retry"
        );
        assert_eq!(next.step(token(0), "app", 1_010, &POLICY, key), Step::Retry);
        let later = next.rotated(1_100, &POLICY).rotated(1_200, &POLICY);
        assert_eq!(
            later.step(token(0), "app", 1_201, &POLICY, None),
            Step::RevokeForReuse,
            "reuse revokes whatever the proof"
        );
        let unbound = Family::new("app", "alice", 1_000, &POLICY, None);
        assert_eq!(
            unbound.step(token(0), "app", 1_001, &POLICY, key),
            Step::Rotate
        );
    }
}
