//! `issuer user ...`: the users of the password grant: creating, disabling, enabling, setting a
//! password, removing, and listing them.

use super::{conflict, found, AdminError};
use crate::passwords::PasswordScheme;
use crate::store::{Store, UserChange, UserRecord};
use serde::{Deserialize, Serialize};

/// A user to create (`issuer user add`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewUser {
    /// User name.
    pub name: String,
    /// The roles the user's access tokens carry.
    pub roles: Vec<String>,
    /// Claims as (type, value).
    pub claims: Vec<(String, String)>,
    /// PHC string: Argon2id, or bcrypt or PBKDF2-SHA256 of a user moved in (`issuer apply`);
    /// empty for none (the user cannot sign in with a password until `user passwd`).
    pub password_hash: String,
    /// Created disabled (`issuer apply`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub disabled: bool,
}

/// `user add`.
pub(super) async fn add(store: &dyn Store, u: &NewUser, now: u64) -> Result<String, AdminError> {
    let rec = UserRecord {
        password_hash: u.password_hash.clone(),
        disabled: u.disabled,
        roles: u.roles.clone(),
        claims: u.claims.clone(),
        created_at: now,
        password_changed_at: None,
        disabled_at: None,
        directory: None,
    };
    let name = &u.name;
    if !store.add_user(name, &rec).await? {
        return conflict(format!("a user named {name:?} exists"));
    }
    Ok(format!("user {name} added\n"))
}

/// `user disable`.
pub(super) async fn disable(store: &dyn Store, name: &str, now: u64) -> Result<String, AdminError> {
    let change = UserChange::Disable { at: now };
    found(store.update_user(name, &change, now).await?, "user", name)?;
    Ok(format!("user {name} disabled\n"))
}

/// `user enable`.
pub(super) async fn enable(store: &dyn Store, name: &str, now: u64) -> Result<String, AdminError> {
    found(
        store.update_user(name, &UserChange::Enable, now).await?,
        "user",
        name,
    )?;
    Ok(format!("user {name} enabled\n"))
}

/// `user passwd`: `hash` is the new password's Argon2id PHC string.
pub(super) async fn set_password(
    store: &dyn Store,
    name: &str,
    hash: &str,
    now: u64,
) -> Result<String, AdminError> {
    let change = UserChange::SetPassword {
        hash: hash.to_owned(),
        at: now,
    };
    found(store.update_user(name, &change, now).await?, "user", name)?;
    Ok(format!("password of user {name} changed\n"))
}

/// `apply`'s change of a local user's roles and claims. A directory user's come from the
/// directory: refused.
pub(super) async fn update(
    store: &dyn Store,
    name: &str,
    roles: &[String],
    claims: &[(String, String)],
    now: u64,
) -> Result<String, AdminError> {
    if store
        .user(name)
        .await?
        .is_some_and(|u| u.directory.is_some())
    {
        return conflict(format!(
            "{name:?} is a directory user: its roles and claims come from the directory"
        ));
    }
    let change = UserChange::SetProfile {
        roles: roles.to_vec(),
        claims: claims.to_vec(),
    };
    found(store.update_user(name, &change, now).await?, "user", name)?;
    Ok(format!("user {name} changed\n"))
}

/// A user as `user list` shows it, in a table or as JSON.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UserView {
    /// User name.
    pub name: String,
    /// The roles the user's access tokens carry.
    pub roles: Vec<String>,
    /// Claims as `[type, value]` pairs.
    pub claims: Vec<(String, String)>,
    /// May sign in.
    pub enabled: bool,
    /// `argon2id`, `bcrypt`, `pbkdf2-sha256`, or `null` for a user without a password.
    pub password_scheme: Option<String>,
    /// A user of the directory (`[directory]`), whose record reflects it.
    pub directory: bool,
}

impl UserView {
    /// The view of user `name`'s record `u`.
    pub fn of(name: String, u: UserRecord) -> Self {
        UserView {
            name,
            password_scheme: PasswordScheme::of(&u.password_hash).map(|s| s.name().to_owned()),
            roles: u.roles,
            claims: u.claims,
            enabled: !u.disabled,
            directory: u.directory.is_some(),
        }
    }
}

/// `user list`: every user, in the store's order.
pub(super) async fn list(store: &dyn Store) -> Result<Vec<UserView>, AdminError> {
    Ok(store
        .users()
        .await?
        .into_iter()
        .map(|(name, u)| UserView::of(name, u))
        .collect())
}

/// `user remove`.
pub(super) async fn remove(store: &dyn Store, name: &str, now: u64) -> Result<String, AdminError> {
    found(store.remove_user(name, now).await?, "user", name)?;
    Ok(format!("user {name} removed\n"))
}
