//! The resource owner password credentials grant: throttle, check the password (one check per
//! account at a time) against the local store or, for a user it does not hold, the directory,
//! then mint an access token and start a refresh token family.

use super::directory_users::{DirectoryUsers, Found, SignIn};
use super::{now, ApiError, Issue};
use crate::directory::BindGuard;
use crate::passwords::{Checked, PasswordChecker};
use crate::store::{ClientRecord, Families, GrantKind, HashKeyed, UserChange, UserRecord, Users};
use crate::throttle::{Account, Attempt, Throttle, Turn};
use shared::token::{Identity, SubjectKind};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use zeroize::Zeroizing;

/// The grant: the users it checks, the families it starts, the hash key their tags are made
/// with, the password checker, the back-off, and the directory if there is one.
pub(super) struct PasswordGrant {
    pub(super) users: Arc<dyn Users>,
    pub(super) directory: Option<Arc<DirectoryUsers>>,
    pub(super) families: Arc<dyn Families>,
    pub(super) hash: Arc<dyn HashKeyed>,
    pub(super) passwords: PasswordChecker,
    pub(super) throttle: Throttle,
    pub(super) turns: LoginTurns,
    pub(super) audit: crate::audit::AuditLog,
}

impl PasswordGrant {
    /// Signs `username` in with `password` for `client_id` (its `client` record), from `ip`.
    pub(super) async fn grant(
        &self,
        ip: Option<IpAddr>,
        client_id: &str,
        client: &ClientRecord,
        (username, password): (String, Zeroizing<String>),
        jkt: Option<[u8; 32]>,
    ) -> Result<Issue, ApiError> {
        if !client.grants.contains(&GrantKind::Password) {
            return Err(ApiError::unauthorized_client(
                "the password grant is not enabled for this client",
            ));
        }
        let (user, name) = self.sign_in(ip, client_id, (username, password)).await?;
        self.start(client_id, name, &user, jkt).await
    }

    /// Checks `username`'s `password` for `client_id`, from `ip`, with the back-off: the user's
    /// record and name (a directory entry's own). The console's sign-in uses it too.
    pub(super) async fn sign_in(
        &self,
        ip: Option<IpAddr>,
        client_id: &str,
        (username, password): (String, Zeroizing<String>),
    ) -> Result<(UserRecord, String), ApiError> {
        // Local users first (service accounts, break-glass); the directory for the rest.
        let known = self.users.user(&username).await?;
        let directory = self
            .directory
            .as_ref()
            .filter(|_| known.as_ref().is_none_or(|u| u.directory.is_some()));
        let account = match directory {
            Some(_) => Account::directory(&username),
            None => Account::Local(username.clone()),
        };
        // One password check per account at a time: each attempt sees the outcome of the one
        // before, so a burst of concurrent guesses meets the back-off after the free ones.
        let _turn = self.turns.take(&account).await;
        let attempt = match self.throttle.attempt(&account, ip, now()).await? {
            Turn::Go(attempt) => attempt,
            Turn::Wait(wait) => return Err(ApiError::throttled(wait)),
        };
        let (user, name) = match directory {
            Some(d) => {
                self.check_in_directory(d, attempt, client_id, &username, password)
                    .await?
            }
            None => {
                // Read again in the turn: a change while this attempt waited counts.
                let user = self.users.user(&username).await?;
                let user = self
                    .check_locally(attempt, client_id, &username, password, user)
                    .await?;
                let address = ip.map_or_else(|| "unknown".to_owned(), |ip| ip.to_string());
                tracing::info!(
                    user = username,
                    client = client_id,
                    address,
                    "local sign-in"
                );
                (user, username)
            }
        };
        Ok((user, name))
    }

    /// The password checked against the local record.
    async fn check_locally(
        &self,
        attempt: Attempt<'_>,
        client_id: &str,
        username: &str,
        password: Zeroizing<String>,
        user: Option<UserRecord>,
    ) -> Result<UserRecord, ApiError> {
        let checked = self
            .passwords
            .check(password, user.as_ref().map(|u| u.password_hash.clone()))
            .await;
        let ok = checked.is_right();
        // A disabled user is refused exactly like a wrong password, throttle included:
        // otherwise the answer after the back-off starts would tell a right guess.
        let disabled = user.as_ref().is_some_and(|u| u.disabled);
        match user {
            Some(u) if ok && !disabled => {
                attempt.succeeded(now()).await?;
                if let Checked::Upgrade(to) = checked {
                    self.upgrade_hash(username, &u, to).await;
                }
                Ok(u)
            }
            _ => {
                let why = if ok && disabled {
                    "disabled user refused"
                } else {
                    "wrong user credentials"
                };
                Err(refuse(attempt, &self.audit, client_id, username, why).await)
            }
        }
    }

    /// Stores the Argon2id hash `to` in place of the bcrypt or PBKDF2 hash the user just signed
    /// in with. A failure is logged: the sign-in stands, and the next one tries again.
    async fn upgrade_hash(&self, username: &str, user: &UserRecord, to: String) {
        let change = UserChange::UpgradeHash {
            from: user.password_hash.clone(),
            to,
        };
        match self.users.update_user(username, &change, now()).await {
            Ok(_) => tracing::info!(user = username, "password hash upgraded to argon2id"),
            Err(e) => tracing::warn!(
                user = username,
                error = crate::display::Causes(&e).to_string(),
                "password hash not upgraded"
            ),
        }
    }

    /// The password checked by the directory: the user's record and name (the entry's, not
    /// `typed`). An outage answers 503 and leaves the attempt unsettled: nothing is charged, and
    /// the user signs in at once when the directory is back.
    async fn check_in_directory(
        &self,
        directory: &DirectoryUsers,
        attempt: Attempt<'_>,
        client_id: &str,
        typed: &str,
        password: Zeroizing<String>,
    ) -> Result<(UserRecord, String), ApiError> {
        let guard = DirectoryHold(&self.throttle);
        let started = tokio::time::Instant::now();
        let outcome = directory.sign_in(typed, &password, &guard, now()).await;
        let why = match outcome? {
            // An administrator's disable holds whatever the directory says.
            SignIn::User(Found { record, .. }) if record.disabled => "disabled user refused",
            SignIn::User(Found { record, name, key }) => {
                attempt.succeeded_in_directory(now(), &key).await?;
                return Ok((record, name));
            }
            SignIn::Refused(why) => why.reason(),
            SignIn::Held => "held: the entry met the bound on refused binds",
            SignIn::Unavailable => return Err(ApiError::directory_unavailable()),
        };
        // A local user's refusal costs a password check: this one takes as long (a wait, not the
        // work), so the time of a refusal does not tell which names are local.
        tokio::time::sleep_until(started + self.passwords.typical()).await;
        // Every refusal counts alike, so a name that exists looks like one that does not.
        Err(refuse(attempt, &self.audit, client_id, typed, why).await)
    }

    /// The identity to mint for the signed-in `user`, and a new refresh token family (bound to
    /// the DPoP key `jkt` of the request's proof, if any): the family first, as the access token
    /// carries its tag.
    async fn start(
        &self,
        client_id: &str,
        username: String,
        user: &UserRecord,
        jkt: Option<[u8; 32]>,
    ) -> Result<Issue, ApiError> {
        let refresh = self
            .families
            // After the user's last revocation, so the family outlives it even in its second.
            .start_family(client_id, &username, now().max(user.tokens_after()), jkt)
            .await?;
        let identity = Identity {
            kind: SubjectKind::User,
            subject: username,
            roles: user.roles.clone(),
            claims: user.token_claims(),
        };
        Ok(Issue {
            identity,
            family: self.hash.hash_key().family_tag_of(&refresh),
            refresh: Some(refresh),
            not_before: user.tokens_after(),
            act: None,
            expires_by: None,
        })
    }
}

/// Settles `attempt` as failed (the back-off grows) and answers `invalid_grant`, alike for every
/// reason, which is logged.
async fn refuse(
    attempt: Attempt<'_>,
    audit: &crate::audit::AuditLog,
    client: &str,
    user: &str,
    why: &str,
) -> ApiError {
    match attempt.failed(now()).await {
        Ok(blocked) => super::audit_events::audit_blocked(audit, client, user, blocked),
        Err(e) => return ApiError::store(&e),
    }
    refused(client, user, why)
}

/// The back-off's word on binding a directory entry: each bind counted before it is sent, held
/// while the entry met the bound on refused binds (a store failure holds it too).
struct DirectoryHold<'a>(&'a Throttle);

#[async_trait::async_trait]
impl BindGuard for DirectoryHold<'_> {
    async fn take_bind(&self, entry: &str) -> bool {
        match self.0.take_directory_bind(entry, now()).await {
            Ok(taken) => taken,
            Err(e) => {
                tracing::warn!(
                    error = crate::display::Causes(&e).to_string(),
                    "back-off unreadable: bind held"
                );
                false
            }
        }
    }
}

/// `invalid_grant` for a refused sign-in, logged with why.
fn refused(client: &str, user: &str, why: &str) -> ApiError {
    tracing::info!(client, user, reason = why, "password grant refused");
    ApiError::invalid_grant("invalid user credentials")
}

/// Whose password is being checked: one check per user at a time. The entry of a user goes when
/// the last one waiting is done.
#[derive(Debug, Default)]
pub(super) struct LoginTurns {
    turns: Mutex<HashMap<Account, Arc<tokio::sync::Mutex<()>>>>,
}

impl LoginTurns {
    /// Waits for this account's turn.
    async fn take(&self, account: &Account) -> LoginTurn<'_> {
        let lock = {
            let mut turns = self.turns.lock().unwrap_or_else(|p| p.into_inner());
            turns.entry(account.clone()).or_default().clone()
        };
        let guard = lock.clone().lock_owned().await;
        LoginTurn {
            turns: self,
            account: account.clone(),
            lock,
            _guard: guard,
        }
    }
}

/// A user's turn at the password check; the last one out removes the user's entry.
struct LoginTurn<'a> {
    turns: &'a LoginTurns,
    account: Account,
    lock: Arc<tokio::sync::Mutex<()>>,
    _guard: tokio::sync::OwnedMutexGuard<()>,
}

impl Drop for LoginTurn<'_> {
    fn drop(&mut self) {
        let mut turns = self.turns.turns.lock().unwrap_or_else(|p| p.into_inner());
        // Held by the map, this turn and its guard: nobody else is waiting.
        if Arc::strong_count(&self.lock) <= 3 {
            turns.remove(&self.account);
        }
    }
}
