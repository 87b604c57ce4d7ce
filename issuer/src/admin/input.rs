//! The rules a command's input meets, whichever way it came (the command line, or a JSON line on
//! the admin socket): the rules of [`shared::rules`], which every token's client, subject, roles
//! and claims meet, so that nothing stored here can fail to fit a token. Each check refuses with
//! the message the command line prints.

use super::{invalid, AdminError, Command};
use crate::config::admin_http::CONSOLE_CLIENT;
use shared::rules::{claim_text_ok, client_id_ok, role_ok, user_name_ok};

/// A new client's id ([`client_id_ok`]).
pub fn check_client_id(id: &str) -> Result<(), AdminError> {
    if client_id_ok(id) {
        Ok(())
    } else {
        invalid("a client id is 1 to 255 characters, without control characters or ':'".into())
    }
}

/// The id of a client to store: [`check_client_id`], and not the console's reserved id
/// ([`CONSOLE_CLIENT`]), which exists only on the admin listener.
pub fn check_new_client_id(id: &str) -> Result<(), AdminError> {
    check_client_id(id)?;
    if id == CONSOLE_CLIENT {
        return invalid(format!(
            "the client id {CONSOLE_CLIENT:?} is reserved for the admin console"
        ));
    }
    Ok(())
}

/// A new user's name ([`user_name_ok`]).
pub fn check_user_name(name: &str) -> Result<(), AdminError> {
    if user_name_ok(name) {
        Ok(())
    } else {
        invalid("a user name is 1 to 255 characters, without control characters".into())
    }
}

/// A user's roles ([`role_ok`]); the first one that breaks the rule is named.
pub fn check_roles(roles: &[String]) -> Result<(), AdminError> {
    match roles.iter().find(|r| !role_ok(r)) {
        None => Ok(()),
        Some(bad) => invalid(format!(
            "invalid role {bad:?}: 1 to 255 characters, no ',' or control characters"
        )),
    }
}

/// A claim given as `TYPE=VALUE` (`user add --claim`): split at the first `=`, then checked
/// ([`claim_text_ok`]).
pub fn parse_claim(text: &str) -> Result<(String, String), AdminError> {
    match text.split_once('=') {
        Some((t, v)) if claim_text_ok(t, v) => Ok((t.to_owned(), v.to_owned())),
        _ => invalid(invalid_claim(text)),
    }
}

/// A user's claims as (type, value) ([`claim_text_ok`]); the first one that breaks the rule is
/// named as its `TYPE=VALUE` text.
pub fn check_claims(claims: &[(String, String)]) -> Result<(), AdminError> {
    match claims.iter().find(|(t, v)| !claim_text_ok(t, v)) {
        None => Ok(()),
        Some((t, v)) => invalid(invalid_claim(&format!("{t}={v}"))),
    }
}

/// A new user's password hash: empty (no password yet), or a PHC string of a scheme and within
/// the bounds [`crate::passwords::check_hash`] accepts.
pub fn check_password_hash(hash: &str) -> Result<(), AdminError> {
    if hash.is_empty() {
        return Ok(());
    }
    crate::passwords::check_hash(hash).map_or_else(|e| invalid(e.to_string()), |_| Ok(()))
}

fn invalid_claim(text: &str) -> String {
    format!("invalid claim {text:?}: use TYPE=VALUE without ',' or a second '='")
}

impl Command {
    /// Checks the names, roles and claims the command carries by the rules above: a new client's
    /// id, a new user's name, roles and claims. Commands that name an existing client or user
    /// need no check: a name that breaks the rules names nothing stored.
    pub fn check(&self) -> Result<(), AdminError> {
        match self {
            Self::ClientAdd(c) => check_new_client_id(&c.id),
            Self::ClientImport(i) => check_new_client_id(&i.statement.client_id),
            Self::ClientVendorRevoke { ids, .. } => {
                ids.iter().try_for_each(|id| check_client_id(id))
            }
            Self::UserAdd(u) => {
                check_user_name(&u.name)?;
                check_roles(&u.roles)?;
                check_claims(&u.claims)?;
                check_password_hash(&u.password_hash)
            }
            Self::UserUpdate { roles, claims, .. } => {
                check_roles(roles)?;
                check_claims(claims)
            }
            Self::Ping
            | Self::ClientActivate { .. }
            | Self::ClientDeactivate { .. }
            | Self::ClientRemove { .. }
            | Self::ClientList
            | Self::ClientUpdate { .. }
            | Self::ClientDpop { .. }
            | Self::UserDisable { .. }
            | Self::UserEnable { .. }
            | Self::UserPasswd { .. }
            | Self::UserRemove { .. }
            | Self::UserList
            | Self::KeysList
            | Self::KeysRotate { .. }
            | Self::KeysRetire { .. }
            | Self::KeysFilterConfig
            | Self::Edges
            | Self::KeysPublish
            | Self::KeysPromote { .. }
            | Self::SessionRevoke { .. }
            | Self::AuditRead { .. }
            | Self::VendorRefused { .. }
            | Self::Backup => Ok(()),
        }
    }
}
