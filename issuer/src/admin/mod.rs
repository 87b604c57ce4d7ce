//! Administrative changes: the command set behind `issuer client|user|keys ...`.
//!
//! A command is executed by [`execute`] against an open [`Store`]. When `issuer serve` holds the
//! data dir (redb allows one process per file), the command line sends the command over the Unix
//! socket `admin.sock` in the data dir (mode 0600, inside the 0700 dir) and the server executes it,
//! so the change takes effect at once, without a restart and without any network listener. The
//! server answers only its own effective user and root, by the socket's peer credentials
//! (`SO_PEERCRED`); another user's connection is closed before a byte is read or written.
//! Secrets never cross the socket: the command line hashes passwords and client secrets itself.
//!
//! [`execute`] returns a typed [`Reply`]: the data a listing asked for, or the sentence that
//! confirms a change. Whichever way the command went, the command line renders it (tables, JSON,
//! text): this module formats no listing.
//!
//! The socket's protocol, one connection per command:
//!
//! 1. the command line writes one line: the [`Command`] as a JSON object whose `op` names it
//!    (`{"op":"client_remove","id":"app"}`), ended by `\n`, at most [`MAX_LINE`] bytes;
//! 2. the server answers one line: an [`Answer`], `{"ok":REPLY}` or `{"err":"why"}`, where
//!    `REPLY` is the [`Reply`] as `{"reply":"clients","value":[...]}` (`{"reply":"pong"}` for a
//!    unit variant), ended by `\n`, of any length (an audit trail may be megabytes);
//! 3. only after `{"ok":{"reply":"backup"}}`, the answer to [`Command::Backup`], the server writes
//!    the backup's bytes ([`crate::store::backup`]) until it closes the connection.
//!
//! [`Command::Ping`] asks whether a server answers on the socket at all, and reads nothing. The
//! command line and the server are the same binary, so the protocol has no version.
//!
//! - this module: the wire types ([`Command`], [`Reply`], [`Answer`]) and [`execute`];
//! - `issuer/src/bin/issuer/admin.rs` (in the `issuer` binary): the command line's side: its `run` sends
//!   a command to the running server over the socket or executes it on the store itself;
//! - [`input`]: the rules a command's names, roles and claims meet, checked by [`execute`]
//!   whichever way the command came, and by the command line before it asks for a password;
//! - `clients`, `users`, `keys`: what each command group does, its listings apart from its
//!   changes; `edges`: the edges' reports behind `issuer edges` and `issuer keys status`;
//! - `audit`: each change's record in the audit trail, and `issuer audit`'s read of it.

use crate::store::{AuditEvent, ClientChange, DpopPolicy, GrantKind, KeyInfo, Store, StoreError};
use serde::{Deserialize, Serialize};

mod audit;
mod clients;
mod edges;
pub mod input;
mod keys;
pub mod sessions;
mod users;
mod vendor;

pub use audit::MAX_READ as MAX_AUDIT_READ;
pub use clients::{ClientView, NewClient};
pub use edges::{EdgeRow, EdgesReport, RECENT_EDGE_SECONDS};
pub use keys::filter_config;
pub use users::{NewUser, UserView};
pub use vendor::{describe as describe_refusal, Imported, VendorImport, VendorView};

/// File name of the admin socket in the data dir.
pub const SOCKET_FILE: &str = "admin.sock";
/// Longest request line accepted on the socket.
pub const MAX_LINE: usize = 64 * 1024;

/// One administrative command, as it crosses the socket: a JSON object whose `op` names it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// Whether a server answers ([`Reply::Pong`]); reads nothing.
    Ping,
    /// Register a client (inactive).
    ClientAdd(NewClient),
    /// Allow a client to get tokens.
    ClientActivate {
        /// Client id.
        id: String,
        /// A vendor's client: the grants it gets, within its statement's (all of those when
        /// absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        grants: Option<Vec<GrantKind>>,
        /// A vendor's client: no impersonation even if its statement allows it.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        no_impersonation: bool,
    },
    /// Import a vendor's software statement whose signature the command line verified: a new
    /// pending client, or a newer statement of one.
    ClientImport(VendorImport),
    /// Apply a vendor's revocation list, verified by the command line.
    ClientVendorRevoke {
        /// The vendor's name.
        vendor: String,
        /// The client ids it revoked.
        ids: Vec<String>,
    },
    /// Record a refused statement or revocation list in the audit trail.
    VendorRefused {
        /// The client id, or the vendor's name.
        target: String,
        /// The RFC 7591 error.
        error: String,
        /// Why.
        description: String,
    },
    /// Stop a client from getting tokens.
    ClientDeactivate {
        /// Client id.
        id: String,
    },
    /// List clients ([`Reply::Clients`]).
    ClientList,
    /// Set what a client may do (`issuer apply`).
    ClientUpdate {
        /// Client id.
        id: String,
        /// Allowed grants.
        grants: Vec<GrantKind>,
        /// May impersonate.
        impersonate: bool,
        /// If not empty, the claim types it may impersonate with.
        claim_types: Vec<String>,
        /// Whether its tokens must be bound with DPoP.
        #[serde(default)]
        dpop: DpopPolicy,
        /// What it may do with the token exchange grant.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exchange: Option<crate::store::ExchangePolicy>,
    },
    /// Require DPoP of a client, or not.
    ClientDpop {
        /// Client id.
        id: String,
        /// The policy.
        dpop: DpopPolicy,
    },
    /// Delete a client.
    ClientRemove {
        /// Client id.
        id: String,
    },
    /// Create a user.
    UserAdd(NewUser),
    /// Disable a user.
    UserDisable {
        /// User name.
        name: String,
    },
    /// Enable a user.
    UserEnable {
        /// User name.
        name: String,
    },
    /// Set a user's password.
    UserPasswd {
        /// User name.
        name: String,
        /// Argon2id PHC string.
        password_hash: String,
    },
    /// List users ([`Reply::Users`]).
    UserList,
    /// Set a local user's roles and claims (`issuer apply`).
    UserUpdate {
        /// User name.
        name: String,
        /// Roles.
        roles: Vec<String>,
        /// Claims as (type, value).
        claims: Vec<(String, String)>,
    },
    /// Delete a user.
    UserRemove {
        /// User name.
        name: String,
    },
    /// List signing keys ([`Reply::Keys`]).
    KeysList,
    /// Add a new key that starts signing after `delay` seconds.
    KeysRotate {
        /// Seconds the new key is published before it signs.
        #[serde(default)]
        delay: u64,
    },
    /// Retire a superseded key now.
    KeysRetire {
        /// Key id.
        kid: u32,
    },
    /// The Envoy filter's plugin configuration ([`Reply::FilterConfig`]).
    KeysFilterConfig,
    /// The edges and the keys they hold ([`Reply::Edges`]).
    Edges,
    /// Publish a key that signs only once promoted, or name the one held already
    /// ([`Reply::Published`]).
    KeysPublish,
    /// Make the held key `kid` the signing key.
    KeysPromote {
        /// Key id.
        kid: u32,
    },
    /// Read the audit trail from a time on (`issuer audit`, [`Reply::Audit`]).
    AuditRead {
        /// Seconds since the epoch.
        since: u64,
    },
    /// Revoke one refresh token family (a session) by its id, whoever owns it.
    SessionRevoke {
        /// The family's id, 32 hex digits.
        id: String,
    },
    /// A backup of the whole store (`issuer backup`), only through the socket: the answer
    /// [`Reply::Backup`] is followed by the backup's bytes ([`crate::store::backup`]).
    Backup,
}

impl Command {
    /// True for commands that change state (they are audited, and the server reloads what they
    /// may have changed); false for the listings.
    pub fn is_change(&self) -> bool {
        audit::record_of(self).is_some() || matches!(self, Self::ClientVendorRevoke { .. })
    }

    /// True for the commands that change the key ring.
    pub fn changes_keys(&self) -> bool {
        matches!(
            self,
            Self::KeysRotate { .. }
                | Self::KeysRetire { .. }
                | Self::KeysPublish
                | Self::KeysPromote { .. }
        )
    }
}

/// What kind of refusal an [`AdminError::Refused`] is: set where the command refuses, and
/// answered by the admin HTTP API with one status per kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// What the command names is not there: no such client, user, key or session.
    NotFound,
    /// The input is wrong whatever the store holds: a name, role, claim or hash that breaks the
    /// rules, a reserved id, more than a vendor's statement allows.
    Invalid,
    /// The state of what the command names forbids it now: a name taken, a key in use, a
    /// rotation pending, a client revoked by its vendor or past its statement, a directory
    /// user's roles.
    Conflict,
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The command cannot be done: its kind, and the sentence the command line prints.
    #[error("{why}")]
    Refused {
        /// Which kind of refusal.
        kind: RefusalKind,
        /// Why, for a person.
        why: String,
    },
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The change was made, but its record in the audit trail could not be written (the cause).
    #[error("the change was made, but recording it in the audit trail failed")]
    Unrecorded(#[source] StoreError),
    /// A vendor's statement refused (its client id taken, or revoked); audited.
    #[error("statement refused ({}): {}", .0.error_code(), .0)]
    Vendor(crate::vendor::Refusal),
}

/// What a command answers: the data a listing asked for, for the command line to render, or the
/// sentence that confirms a change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", content = "value", rename_all = "snake_case")]
pub enum Reply {
    /// A server answers ([`Command::Ping`]).
    Pong,
    /// A change was made: the text to print.
    Text(String),
    /// The clients, in the store's order ([`Command::ClientList`]).
    Clients(Vec<ClientView>),
    /// The users, in the store's order ([`Command::UserList`]).
    Users(Vec<UserView>),
    /// The signing keys and their state ([`Command::KeysList`]).
    Keys(Vec<KeyInfo>),
    /// The Envoy filter's plugin configuration ([`filter_config`], [`Command::KeysFilterConfig`]).
    FilterConfig(serde_json::Value),
    /// The edges and the keys they should hold ([`Command::Edges`]).
    Edges(EdgesReport),
    /// Audit events, oldest first, at most [`MAX_AUDIT_READ`] ([`Command::AuditRead`]).
    Audit(Vec<AuditEvent>),
    /// The id of the key published and held ([`Command::KeysPublish`]).
    Published(u32),
    /// The backup's bytes follow this answer on the socket ([`Command::Backup`]).
    Backup,
}

/// One answer line on the socket: the command's [`Reply`], or why it failed.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Answer {
    /// The command succeeded: what it answers.
    Ok(Reply),
    /// Refused or failed; the message to print.
    Err(String),
}

fn refused<T>(kind: RefusalKind, why: String) -> Result<T, AdminError> {
    Err(AdminError::Refused { kind, why })
}

/// Refused: what `why` names is not there.
fn not_found<T>(why: String) -> Result<T, AdminError> {
    refused(RefusalKind::NotFound, why)
}

/// Refused: the input is wrong whatever the store holds.
fn invalid<T>(why: String) -> Result<T, AdminError> {
    refused(RefusalKind::Invalid, why)
}

/// Refused: the state of what the command names forbids it now.
fn conflict<T>(why: String) -> Result<T, AdminError> {
    refused(RefusalKind::Conflict, why)
}

fn found(ok: bool, what: &str, name: &str) -> Result<(), AdminError> {
    if ok {
        Ok(())
    } else {
        not_found(format!("no {what} named {name:?}"))
    }
}

/// [`execute_as`] by the operating-system user of this process (a command run on the store
/// directly).
pub async fn execute(store: &dyn Store, cmd: &Command, now: u64) -> Result<Reply, AdminError> {
    execute_as(store, cmd, now, &crate::audit::process_user()).await
}

/// Who runs a command, as the audit trail names them: an operating-system user (the command
/// line, the socket), or a user of the admin HTTP API with its token's client and its address.
#[derive(Debug, Clone, Copy)]
pub struct Actor<'a> {
    /// The user's name.
    pub name: &'a str,
    /// The client of the user's token, through the admin HTTP API.
    pub client: Option<&'a str>,
    /// The request's source address, through the admin HTTP API.
    pub address: Option<&'a str>,
}

/// [`execute_by`] for the operating-system user `actor` (the command line, the socket).
pub async fn execute_as(
    store: &dyn Store,
    cmd: &Command,
    now: u64,
    actor: &str,
) -> Result<Reply, AdminError> {
    let actor = Actor {
        name: actor,
        client: None,
        address: None,
    };
    execute_by(store, cmd, now, &actor).await
}

/// Executes `cmd` on `store` at time `now` for `actor` and returns its reply. The
/// command's input is checked first ([`Command::check`]), whether it came from the command line
/// or the socket. The listings only read; every other command is a change, recorded in the audit
/// trail with the state of what it changed before and after, before this returns.
pub async fn execute_by(
    store: &dyn Store,
    cmd: &Command,
    now: u64,
    actor: &Actor<'_>,
) -> Result<Reply, AdminError> {
    cmd.check()?;
    let by = actor;
    let actor = by.name;
    let Some(change) = audit::record_of(cmd) else {
        return run_command(store, cmd, now, actor).await;
    };
    let before = audit::view(store, &change.1, now).await?;
    let out = match run_command(store, cmd, now, actor).await {
        Err(AdminError::Vendor(r)) => {
            let (error, description) = vendor::describe(&r);
            vendor::refusal(store, change.1.name(), error, &description, now, actor).await?;
            return Err(AdminError::Vendor(r));
        }
        other => other?,
    };
    let (action, subject) = (change.0.as_str(), change.1.name());
    tracing::info!(target: "audit", actor, action, subject, "admin change");
    audit::record(store, by, change, before, now).await?;
    Ok(out)
}

/// Runs `cmd`, unaudited (but for a vendor's revocation list, one record per client).
async fn run_command(
    store: &dyn Store,
    cmd: &Command,
    now: u64,
    actor: &str,
) -> Result<Reply, AdminError> {
    let text = match cmd {
        Command::Ping => return Ok(Reply::Pong),
        Command::AuditRead { since } => return Ok(Reply::Audit(audit::read(store, *since).await?)),
        Command::Backup => {
            return invalid("a backup goes through the admin socket: `issuer backup`".into())
        }
        Command::ClientList => return Ok(Reply::Clients(clients::list(store).await?)),
        Command::UserList => return Ok(Reply::Users(users::list(store).await?)),
        Command::KeysList => return Ok(Reply::Keys(store.key_infos(now).await?)),
        Command::KeysFilterConfig => {
            return Ok(Reply::FilterConfig(
                keys::store_filter_config(store, now).await?,
            ))
        }
        Command::Edges => return Ok(Reply::Edges(edges::report(store, now).await?)),
        Command::KeysPublish => return Ok(Reply::Published(edges::publish(store, now).await?)),
        Command::ClientAdd(c) => clients::add(store, c, now).await?,
        Command::ClientActivate { .. }
        | Command::ClientImport(_)
        | Command::ClientVendorRevoke { .. }
        | Command::VendorRefused { .. } => vendor::run(store, cmd, now, actor).await?,
        Command::ClientDeactivate { id } => clients::set_active(store, id, false, now).await?,
        Command::ClientRemove { id } => clients::remove(store, id, now).await?,
        Command::ClientDpop { id, dpop } => clients::set_dpop(store, id, *dpop, now).await?,
        Command::ClientUpdate {
            id,
            grants,
            impersonate,
            claim_types,
            dpop,
            exchange,
        } => {
            let change = ClientChange::SetAccess {
                grants: grants.clone(),
                impersonate: *impersonate,
                claim_types: claim_types.clone(),
                dpop: *dpop,
                exchange: exchange.clone(),
            };
            clients::update(store, id, change, now).await?
        }
        Command::UserUpdate {
            name,
            roles,
            claims,
        } => users::update(store, name, roles, claims, now).await?,
        Command::UserAdd(u) => users::add(store, u, now).await?,
        Command::UserDisable { name } => users::disable(store, name, now).await?,
        Command::UserEnable { name } => users::enable(store, name, now).await?,
        Command::UserPasswd {
            name,
            password_hash,
        } => users::set_password(store, name, password_hash, now).await?,
        Command::UserRemove { name } => users::remove(store, name, now).await?,
        Command::KeysRotate { delay } => keys::rotate(store, *delay, now).await?,
        Command::KeysRetire { kid } => keys::retire(store, *kid, now).await?,
        Command::KeysPromote { kid } => edges::promote(store, *kid, now).await?,
        Command::SessionRevoke { id } => sessions::revoke(store, id, now).await?,
    };
    Ok(Reply::Text(text))
}

#[cfg(test)]
mod tests;
