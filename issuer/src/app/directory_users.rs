//! Users of the directory in the store: the password grant records what the directory said at
//! each sign-in (a record with no password, [`DirectoryLink`]), every refresh re-reads the user,
//! and [`DirectoryUsers::recheck`] re-reads every directory user who may still hold a live
//! refresh token family, disabling those the directory no longer vouches for (which revokes
//! their tokens, so edge sync refuses them at every Envoy).

use crate::directory::{Directory, DirectoryError, DirectoryUser, Refusal};
use crate::store::{DirectoryLink, StoreError, UserChange, UserRecord, Users};
use std::sync::Arc;

/// The directory and the users it is recorded for.
pub(super) struct DirectoryUsers {
    pub(super) directory: Arc<Directory>,
    pub(super) users: Arc<dyn Users>,
}

/// What a directory sign-in came to.
pub(super) enum SignIn {
    /// The user's record, updated with what the directory said.
    User(UserRecord),
    /// Refused: `invalid_grant`, charged to the back-off like a wrong password.
    Refused(Refusal),
    /// No server answered: 503, never charged.
    Unavailable,
}

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

/// Whether `rec` already says what `d` does, recently enough not to write again.
fn up_to_date(rec: &UserRecord, d: &DirectoryUser, now: u64) -> bool {
    rec.directory
        .as_ref()
        .is_some_and(|l| !l.gone && l.dn == d.dn && now.saturating_sub(l.seen_at) < RESEEN_AFTER)
        && rec.roles == d.roles
        && rec.claims == d.claims
}

/// A record unchanged is written again this often, to keep `seen_at` (the recheck's horizon).
const RESEEN_AFTER: u64 = 3600;

impl DirectoryUsers {
    /// Signs `name` in with the directory; `existing` is its record (a directory user's, or none).
    pub(super) async fn sign_in(
        &self,
        name: &str,
        password: &str,
        existing: Option<UserRecord>,
        now: u64,
    ) -> Result<SignIn, StoreError> {
        match self.directory.sign_in(name, password).await {
            Ok(d) => {
                tracing::info!(user = name, server = d.server.as_str(), "directory sign-in");
                Ok(SignIn::User(self.seen(name, existing, &d, now).await?))
            }
            Err(DirectoryError::Refused(why)) => {
                // A recorded user the directory no longer vouches for is disabled here (once).
                if existing.as_ref().is_some_and(|r| !r.disabled) && why != Refusal::WrongPassword {
                    self.gone(name, why, now).await?;
                }
                Ok(SignIn::Refused(why))
            }
            Err(DirectoryError::Unavailable) => Ok(SignIn::Unavailable),
        }
    }

    /// Records that the directory vouched for `name` as `d`; the record as it now is.
    async fn seen(
        &self,
        name: &str,
        existing: Option<UserRecord>,
        d: &DirectoryUser,
        now: u64,
    ) -> Result<UserRecord, StoreError> {
        let change = UserChange::DirectorySeen {
            dn: d.dn.clone(),
            roles: d.roles.clone(),
            claims: d.claims.clone(),
            at: now,
        };
        match existing {
            Some(rec) if up_to_date(&rec, d, now) => Ok(rec),
            Some(mut rec) => {
                self.users.update_user(name, &change, now).await?;
                change.apply(&mut rec);
                Ok(rec)
            }
            None => {
                let rec = new_record(d, now);
                if !self.users.add_user(name, &rec).await? {
                    // Another issuer recorded the user meanwhile.
                    self.users.update_user(name, &change, now).await?;
                }
                Ok(rec)
            }
        }
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
                self.seen(name, Some(rec), &d, now).await.map_err(Some)?;
                Ok(true)
            }
            Err(DirectoryError::Refused(why)) => {
                self.gone(name, why, now).await.map_err(Some)?;
                Ok(false)
            }
            Err(DirectoryError::Unavailable) => Err(None),
        }
    }

    /// Re-reads every enabled directory user seen within `horizon` seconds (the refresh tokens'
    /// absolute lifetime: who may still hold a live family); returns how many were disabled. A
    /// directory outage ends the round early, changing nothing more.
    pub(super) async fn recheck(&self, now: u64, horizon: u64) -> Result<usize, StoreError> {
        let mut disabled = 0;
        for (name, rec) in self.users.users().await? {
            let Some(link) = &rec.directory else { continue };
            if rec.disabled || now.saturating_sub(link.seen_at) > horizon + RESEEN_AFTER {
                continue;
            }
            match self.directory.lookup(&name).await {
                Ok(d) => {
                    if !up_to_date(&rec, &d, now) {
                        self.seen(&name, Some(rec.clone()), &d, now).await?;
                    }
                }
                Err(DirectoryError::Refused(why)) => {
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
