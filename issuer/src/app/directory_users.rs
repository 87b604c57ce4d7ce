//! Users of the directory in the store: the password grant records what the directory said at
//! each sign-in (a record with no password, [`DirectoryLink`]), every refresh re-reads the user,
//! and [`DirectoryUsers::recheck`] re-reads every directory user who may still hold a live
//! refresh token family, disabling those the directory no longer vouches for (which revokes
//! their tokens, so edge sync refuses them at every Envoy).

use crate::directory::{normal_dn, BindGuard, Directory, DirectoryError, DirectoryUser, Refusal};
use crate::store::{DirectoryLink, StoreError, UserChange, UserRecord, Users};
use futures_util::StreamExt as _;
use std::sync::Arc;

/// The directory and the users it is recorded for.
pub(super) struct DirectoryUsers {
    pub(super) directory: Arc<Directory>,
    pub(super) users: Arc<dyn Users>,
}

/// What a directory sign-in came to.
pub(super) enum SignIn {
    /// The user's record, updated with what the directory said, and the entry's normalised DN.
    User(UserRecord, String),
    /// Refused: `invalid_grant`, charged to the back-off (the entry's DN, if the name found one).
    Refused(Refusal, Option<String>),
    /// The entry met the lock-out bound: 429, nothing sent to the directory.
    Held(u64),
    /// No server answered: 503, never charged.
    Unavailable,
}

/// Lookups of the recheck at once.
const RECHECK_CONCURRENCY: usize = 8;
/// A record unchanged is written again this often at a sign-in or refresh, to keep `seen_at`
/// (the recheck's horizon) near the user's last use.
const RESEEN_AFTER: u64 = 3600;

/// A record of a directory user (a sign-in restores one an administrator removed).
fn new_record(d: &DirectoryUser, now: u64) -> UserRecord {
    UserRecord {
        password_hash: String::new(),
        disabled: false,
        roles: d.roles.clone(),
        claims: d.claims.clone(),
        created_at: now,
        password_changed_at: None,
        disabled_at: None,
        directory: Some(Box::new(DirectoryLink {
            dn: d.dn.clone(),
            seen_at: now,
            gone: false,
        })),
    }
}

/// Whether `rec` already says what `d` does (and, with `fresh_at`, was seen recently enough).
fn up_to_date(rec: &UserRecord, d: &DirectoryUser, fresh_at: Option<u64>) -> bool {
    rec.directory.as_ref().is_some_and(|l| {
        !l.gone
            && l.dn == d.dn
            && fresh_at.is_none_or(|now| now.saturating_sub(l.seen_at) < RESEEN_AFTER)
    }) && rec.roles == d.roles
        && rec.claims == d.claims
}

/// Whether the directory's answer means the user is gone (not a wrong password or the like).
fn gone_by(why: Refusal) -> bool {
    matches!(
        why,
        Refusal::NoSuchUser | Refusal::Disabled | Refusal::Ambiguous
    )
}

impl DirectoryUsers {
    /// Signs `name` in with the directory; `existing` is its record (a directory user's, or none).
    pub(super) async fn sign_in(
        &self,
        name: &str,
        password: &str,
        guard: &dyn BindGuard,
        existing: Option<UserRecord>,
        now: u64,
    ) -> Result<SignIn, StoreError> {
        match self.directory.sign_in(name, password, guard).await {
            Ok(d) => {
                tracing::info!(user = name, server = d.server.as_str(), "directory sign-in");
                let dn = normal_dn(&d.dn);
                Ok(match self.seen(name, existing, &d, now, now).await? {
                    Some(rec) => SignIn::User(rec, dn),
                    None => SignIn::Refused(Refusal::NoSuchUser, Some(dn)),
                })
            }
            Err(DirectoryError::Refused {
                why: Refusal::Held(wait),
                ..
            }) => Ok(SignIn::Held(wait)),
            Err(DirectoryError::Refused { why, dn }) => {
                // A recorded user the directory no longer vouches for is disabled here (once).
                if existing.as_ref().is_some_and(|r| !r.disabled) && gone_by(why) {
                    self.gone(name, why, now).await?;
                }
                Ok(SignIn::Refused(why, dn))
            }
            Err(DirectoryError::Unavailable) => Ok(SignIn::Unavailable),
        }
    }

    /// Records that the directory vouched for `name` as `d` (seen at `seen_at`); the record as it
    /// now is, or `None` if a local user took the name meanwhile. Another entry under the name
    /// (a name given to someone new) first ends the tokens of the one before.
    async fn seen(
        &self,
        name: &str,
        existing: Option<UserRecord>,
        d: &DirectoryUser,
        seen_at: u64,
        now: u64,
    ) -> Result<Option<UserRecord>, StoreError> {
        let change = UserChange::DirectorySeen {
            dn: d.dn.clone(),
            roles: d.roles.clone(),
            claims: d.claims.clone(),
            at: seen_at,
        };
        let mut rec = match existing {
            Some(rec) if up_to_date(&rec, d, Some(now)) => return Ok(Some(rec)),
            Some(rec) => rec,
            None => {
                let rec = new_record(d, now);
                if self.users.add_user(name, &rec).await? {
                    return Ok(Some(rec));
                }
                // Recorded meanwhile: by another issuer, or as a local user.
                match self.users.user(name).await? {
                    Some(rec) if rec.directory.is_some() => rec,
                    _ => return Ok(None),
                }
            }
        };
        let other_entry = rec
            .directory
            .as_ref()
            .is_some_and(|l| normal_dn(&l.dn) != normal_dn(&d.dn));
        if other_entry && !rec.disabled {
            tracing::warn!(target: "audit", user = name, "directory name now names another entry: the tokens of the one before are revoked");
            // A second back, so the new holder's tokens of this second are not covered.
            let gone = UserChange::DirectoryGone {
                at: now.saturating_sub(1),
            };
            self.users.update_user(name, &gone, now).await?;
            gone.apply(&mut rec);
        }
        if !self.users.update_user(name, &change, now).await? {
            return Ok(None);
        }
        change.apply(&mut rec);
        Ok(Some(rec))
    }

    /// Disables `name` because the directory no longer vouches for it (revoking its tokens).
    async fn gone(&self, name: &str, why: Refusal, now: u64) -> Result<(), StoreError> {
        tracing::warn!(target: "audit", user = name, reason = why.reason(), "directory user gone: disabled, tokens revoked");
        self.users
            .update_user(name, &UserChange::DirectoryGone { at: now }, now)
            .await?;
        Ok(())
    }

    /// Before a refresh of `name`'s family: re-reads a directory user. `Ok(true)`: go on (the
    /// record now holds the current roles); `Ok(false)`: refused, the user is disabled and its
    /// tokens revoked; `Err(None)`: no server answered (nothing rotated, retry later).
    pub(super) async fn before_refresh(
        &self,
        name: &str,
        now: u64,
    ) -> Result<bool, Option<StoreError>> {
        let Some(rec) = self.users.user(name).await.map_err(Some)? else {
            return Ok(true);
        };
        if rec.directory.is_none() || rec.disabled {
            // A local user, or one refused anyway by the rotation.
            return Ok(true);
        }
        match self.directory.lookup(name).await {
            Ok(d) => {
                let seen = self.seen(name, Some(rec), &d, now, now).await;
                Ok(seen.map_err(Some)?.is_some())
            }
            Err(DirectoryError::Refused { why, .. }) => {
                self.gone(name, why, now).await.map_err(Some)?;
                Ok(false)
            }
            Err(DirectoryError::Unavailable) => Err(None),
        }
    }

    /// Re-reads every enabled directory user who signed in or refreshed within `horizon` seconds
    /// (the refresh tokens' absolute lifetime: who may still hold a live family), a few at a
    /// time; returns how many were disabled. A directory outage ends the round, changing nothing
    /// more. The recheck itself never moves `seen_at`.
    pub(super) async fn recheck(&self, now: u64, horizon: u64) -> Result<usize, StoreError> {
        let due: Vec<(String, UserRecord)> = self
            .users
            .users()
            .await?
            .into_iter()
            .filter(|(_, rec)| {
                rec.directory.as_ref().is_some_and(|l| {
                    !rec.disabled && now.saturating_sub(l.seen_at) <= horizon + RESEEN_AFTER
                })
            })
            .collect();
        let mut lookups = futures_util::stream::iter(due)
            .map(|(name, rec)| async move {
                let answer = self.directory.lookup(&name).await;
                (name, rec, answer)
            })
            .buffer_unordered(RECHECK_CONCURRENCY);
        let mut disabled = 0;
        while let Some((name, rec, answer)) = lookups.next().await {
            match answer {
                Ok(d) if up_to_date(&rec, &d, None) => {}
                Ok(d) => {
                    let seen_at = rec.directory.as_ref().map_or(now, |l| l.seen_at);
                    self.seen(&name, Some(rec), &d, seen_at, now).await?;
                }
                Err(DirectoryError::Refused { why, .. }) => {
                    self.gone(&name, why, now).await?;
                    disabled += 1;
                }
                Err(DirectoryError::Unavailable) => {
                    tracing::warn!("directory recheck stopped: no directory server answered");
                    break;
                }
            }
        }
        Ok(disabled)
    }
}
