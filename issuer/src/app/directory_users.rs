//! Users of the directory in the store: the password grant records what the directory said at
//! each sign-in (a record with no password, [`DirectoryLink`]), every refresh re-reads the user,
//! and [`DirectoryUsers::recheck`] re-reads every directory user who may still hold a live
//! refresh token family, disabling those the directory no longer vouches for (which revokes
//! their tokens, so edge sync refuses them at every Envoy).
//!
//! A user is the directory entry, not the spelling typed at sign-in: the record, the token's
//! subject, a disable and a revocation all go by the entry's own name (`name_attribute`), and
//! entries are told apart by their key (`id_attribute`).

use crate::audit::AuditLog;
use crate::config::DirectoryConfig;
use crate::directory::{
    normal_dn, BindGuard, Directory, DirectoryError, DirectoryUser, EntryRef, Refusal,
};
use crate::store::{
    AuditAction, AuditEvent, DirectoryLink, StoreError, UserChange, UserRecord, Users,
};
use crate::tls_client::TlsClientError;
use futures_util::StreamExt as _;
use std::sync::{Arc, RwLock};

/// The directory and the users it is recorded for.
pub(super) struct DirectoryUsers {
    /// Replaced whole by a reload; a request keeps the one it started with.
    pub(super) directory: RwLock<Arc<Directory>>,
    pub(super) users: Arc<dyn Users>,
    /// Where a disable by the directory is recorded, like an administrator's.
    pub(super) audit: AuditLog,
}

/// What a directory sign-in came to.
pub(super) enum SignIn {
    /// The user: its record under the entry's name, updated with what the directory said.
    User(Found),
    /// Refused: `invalid_grant`, charged to the back-off.
    Refused(Refusal),
    /// The entry met the bound on refused binds: nothing was sent to the directory. Refused like
    /// a wrong password, so that it tells no more than one.
    Held,
    /// No server answered: 503, never charged.
    Unavailable,
}

/// A user the directory vouched for.
pub(super) struct Found {
    /// The record, under `name`.
    pub(super) record: UserRecord,
    /// The entry's name: the user's one name in the issuer.
    pub(super) name: String,
    /// The entry's key.
    pub(super) key: String,
}

/// The actor of the audit trail's disables that the directory decided (a user gone or disabled
/// there), found at a sign-in, a refresh or the recheck.
pub(super) const DIRECTORY_ACTOR: &str = "directory";
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
            key: Some(d.key.clone()),
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
            && l.key.as_deref() == Some(d.key.as_str())
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
    /// The directory in use now.
    pub(super) fn directory(&self) -> Arc<Directory> {
        self.directory
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Puts the directory of a new `[directory]` table in place of the one in use.
    pub(super) fn replace(&self, config: DirectoryConfig) -> Result<(), TlsClientError> {
        let new = Arc::new(Directory::replacing(config, &self.directory())?);
        *self.directory.write().unwrap_or_else(|p| p.into_inner()) = new;
        Ok(())
    }

    /// Signs in the user whose entry the name `typed` finds: the record is the entry's name's,
    /// whatever spelling found it.
    pub(super) async fn sign_in(
        &self,
        typed: &str,
        password: &str,
        guard: &dyn BindGuard,
        now: u64,
    ) -> Result<SignIn, StoreError> {
        match self.directory().sign_in(typed, password, guard).await {
            Ok(d) => {
                let server = d.server.as_str();
                tracing::info!(user = d.name, typed, server, "directory sign-in");
                let existing = self.users.user(&d.name).await?;
                if existing.as_ref().is_some_and(|r| r.directory.is_none()) {
                    // A local user of the entry's name hides the directory's.
                    return Ok(SignIn::Refused(Refusal::NoSuchUser));
                }
                Ok(match self.seen(&d.name, existing, &d, now, now).await? {
                    Some(record) => SignIn::User(Found {
                        record,
                        name: d.name,
                        key: d.key,
                    }),
                    None => SignIn::Refused(Refusal::NoSuchUser),
                })
            }
            Err(DirectoryError::Refused {
                why: Refusal::Held, ..
            }) => Ok(SignIn::Held),
            Err(DirectoryError::Refused { why, entry }) => {
                if gone_by(why) {
                    self.gone_if_enabled(name_of(entry.as_ref(), typed), why, now)
                        .await?;
                }
                Ok(SignIn::Refused(why))
            }
            Err(DirectoryError::Unavailable) => Ok(SignIn::Unavailable),
        }
    }

    /// A directory user the directory no longer vouches for is disabled here (once).
    async fn gone_if_enabled(&self, name: &str, why: Refusal, now: u64) -> Result<(), StoreError> {
        let recorded = self.users.user(name).await?;
        if recorded.is_some_and(|r| r.directory.is_some() && !r.disabled) {
            self.gone(name, why, now).await?;
        }
        Ok(())
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
            key: d.key.clone(),
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
        let other_entry = rec.directory.as_ref().is_some_and(|l| match &l.key {
            Some(key) => *key != d.key,
            None => normal_dn(&l.dn) != normal_dn(&d.dn),
        });
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

    /// Disables `name` because the directory no longer vouches for it (revoking its tokens), and
    /// records it in the audit trail as a `user.disable` by the actor [`DIRECTORY_ACTOR`].
    async fn gone(&self, name: &str, why: Refusal, now: u64) -> Result<(), StoreError> {
        tracing::warn!(target: "audit", user = name, reason = why.reason(), "directory user gone: disabled, tokens revoked");
        self.users
            .update_user(name, &UserChange::DirectoryGone { at: now }, now)
            .await?;
        self.audit.record(AuditEvent::new(
            now,
            DIRECTORY_ACTOR,
            AuditAction::UserDisable,
            name,
            serde_json::json!({ "disabled": false }),
            serde_json::json!({ "disabled": true, "reason": why.reason() }),
        ));
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
        match self.directory().lookup(name).await {
            Ok(d) if d.name != name => {
                self.gone(name, Refusal::NoSuchUser, now)
                    .await
                    .map_err(Some)?;
                Ok(false)
            }
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
                let answer = self.directory().lookup(&name).await;
                (name, rec, answer)
            })
            .buffer_unordered(RECHECK_CONCURRENCY);
        let mut disabled = 0;
        while let Some((name, rec, answer)) = lookups.next().await {
            match answer {
                // A record under another spelling than the entry's name (kept from before names
                // were the entry's): its tokens end, the entry's name carries on.
                Ok(d) if d.name != name => {
                    self.gone(&name, Refusal::NoSuchUser, now).await?;
                    disabled += 1;
                }
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

/// The name a refusal is about: the entry's, if the directory found one with a name, else the
/// one typed.
fn name_of<'a>(entry: Option<&'a EntryRef>, typed: &'a str) -> &'a str {
    entry.and_then(|e| e.name.as_deref()).unwrap_or(typed)
}
