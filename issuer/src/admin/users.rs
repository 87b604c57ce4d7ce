//! `issuer user ...`: the users of the password grant: creating, disabling, enabling, setting a
//! password, removing, and listing them.

use super::{found, refused, AdminError};
use crate::store::{Store, UserChange, UserRecord};
use serde::{Deserialize, Serialize};

/// A user to create (`issuer user add`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NewUser {
    /// User name.
    pub name: String,
    /// Roles.
    pub roles: Vec<String>,
    /// Claims as (type, value).
    pub claims: Vec<(String, String)>,
    /// Argon2id PHC string.
    pub password_hash: String,
}

/// `user add`.
pub(super) async fn add(store: &dyn Store, u: &NewUser, now: u64) -> Result<String, AdminError> {
    let rec = UserRecord {
        password_hash: u.password_hash.clone(),
        disabled: false,
        roles: u.roles.clone(),
        claims: u.claims.clone(),
        created_at: now,
        password_changed_at: None,
        disabled_at: None,
        directory: None,
    };
    let name = &u.name;
    if !store.add_user(name, &rec).await? {
        return refused(format!("a user named {name:?} exists"));
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

/// `user remove`.
pub(super) async fn remove(store: &dyn Store, name: &str, now: u64) -> Result<String, AdminError> {
    found(store.remove_user(name, now).await?, "user", name)?;
    Ok(format!("user {name} removed\n"))
}

/// `user list`: one line per user.
pub(super) async fn list(store: &dyn Store) -> Result<String, AdminError> {
    let mut out = String::from("NAME                 ENABLED  ROLES\n");
    for (name, u) in store.users().await? {
        out += &format!(
            "{name:<20} {:<8} {}\n",
            if u.disabled { "no" } else { "yes" },
            u.roles.join(",")
        );
    }
    Ok(out)
}
