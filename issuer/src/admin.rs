//! Administrative changes: the command set behind `issuer client|user|keys ...`.
//!
//! A command is executed by [`execute`] against an open [`Store`]. When `issuer serve` holds the
//! data dir (redb allows one process per file), the command line sends the command over the Unix
//! socket `admin.sock` in the data dir (mode 0600, inside the 0700 dir) and the server executes it,
//! so the change takes effect at once, without a restart and without any network listener.
//! Secrets never cross the socket: the command line hashes passwords and client secrets itself.

use crate::store::{
    ClientChange, ClientRecord, GrantKind, KeyInfo, RetireOutcome, Store, StoreError, UserChange,
    UserRecord,
};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

/// File name of the admin socket in the data dir.
pub const SOCKET_FILE: &str = "admin.sock";
/// Longest request line accepted on the socket.
pub const MAX_LINE: usize = 64 * 1024;

/// One administrative command.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Command {
    /// Register a client (inactive).
    ClientAdd {
        /// Client id.
        id: String,
        /// Allowed grants.
        grants: Vec<GrantKind>,
        /// May impersonate.
        impersonate: bool,
        /// If not empty, the claim types it may impersonate with.
        claim_types: Vec<String>,
        /// May read the edge feed.
        #[serde(default)]
        edge: bool,
        /// Keyed hash of the secret, hex.
        secret_hash: String,
    },
    /// Allow a client to get tokens.
    ClientActivate {
        /// Client id.
        id: String,
    },
    /// Stop a client from getting tokens.
    ClientDeactivate {
        /// Client id.
        id: String,
    },
    /// List clients.
    ClientList,
    /// Delete a client.
    ClientRemove {
        /// Client id.
        id: String,
    },
    /// Create a user.
    UserAdd {
        /// User name.
        name: String,
        /// Roles.
        roles: Vec<String>,
        /// Claims as (type, value).
        claims: Vec<(String, String)>,
        /// Argon2id PHC string.
        password_hash: String,
    },
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
    /// List users.
    UserList,
    /// Delete a user.
    UserRemove {
        /// User name.
        name: String,
    },
    /// List signing keys.
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
    /// Print the Envoy filter's plugin configuration.
    KeysFilterConfig,
}

impl Command {
    /// True for commands that change state (they are audited and reload the server's keys).
    pub fn is_change(&self) -> bool {
        !matches!(
            self,
            Self::ClientList | Self::UserList | Self::KeysList | Self::KeysFilterConfig
        )
    }

    /// A description for the audit log, without any secret or hash.
    pub fn audit_label(&self) -> String {
        match self {
            Self::ClientAdd {
                id,
                grants,
                impersonate,
                edge,
                ..
            } => {
                format!("client add {id} grants={grants:?} impersonate={impersonate} edge={edge}")
            }
            Self::ClientActivate { id } => format!("client activate {id}"),
            Self::ClientDeactivate { id } => format!("client deactivate {id}"),
            Self::ClientRemove { id } => format!("client remove {id}"),
            Self::UserAdd { name, roles, .. } => format!("user add {name} roles={roles:?}"),
            Self::UserDisable { name } => format!("user disable {name}"),
            Self::UserEnable { name } => format!("user enable {name}"),
            Self::UserPasswd { name, .. } => format!("user passwd {name}"),
            Self::UserRemove { name } => format!("user remove {name}"),
            Self::KeysRotate { delay } => format!("keys rotate delay={delay}"),
            Self::KeysRetire { kid } => format!("keys retire {kid}"),
            Self::ClientList | Self::UserList | Self::KeysList | Self::KeysFilterConfig => {
                "read".into()
            }
        }
    }
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The command cannot be done (no such client, name taken, ...).
    #[error("{0}")]
    Refused(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The socket's answer to one command.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Done; the text to print.
    Ok(String),
    /// Refused or failed; the message to print.
    Err(String),
}

fn refused<T>(msg: String) -> Result<T, AdminError> {
    Err(AdminError::Refused(msg))
}

fn found(ok: bool, what: &str, name: &str) -> Result<(), AdminError> {
    if ok {
        Ok(())
    } else {
        refused(format!("no {what} named {name:?}"))
    }
}

/// The Envoy filter's plugin configuration for `ring` and the access token lifetime, with the
/// filter's defaults spelled out. `docs/filter.md` documents every field; `keys` is the ring of
/// verifying keys. Nothing is exempt: the shipped Envoy configurations keep the filter off the
/// issuer's route in the route table.
pub fn filter_config(ring: &shared::KeyRing, access_ttl: u64) -> serde_json::Value {
    let keys: Vec<_> = ring
        .keys()
        .iter()
        .map(|k| serde_json::json!({"kid": k.id(), "secret": URL_SAFE_NO_PAD.encode(k.secret())}))
        .collect();
    serde_json::json!({
        "keys": keys,
        "alternative_header": "ServiceAuthorization",
        "clock_skew_seconds": 30,
        "max_token_lifetime_seconds": access_ttl,
        "realm": "media",
    })
}

fn key_table(keys: &[KeyInfo]) -> String {
    let mut out = String::from("KID  STATE      CREATED     SIGNS-FROM  SUPERSEDED  RETIRES\n");
    let opt = |v: Option<u64>| v.map_or("-".to_string(), |t| t.to_string());
    for k in keys {
        out += &format!(
            "{:<4} {:<10} {:<11} {:<11} {:<11} {}\n",
            k.kid,
            k.state,
            k.created_at,
            k.signs_from,
            opt(k.superseded_at),
            opt(k.retires_at)
        );
    }
    out
}

/// Executes `cmd` on `store` at time `now` and returns the text to print.
pub async fn execute(store: &dyn Store, cmd: &Command, now: u64) -> Result<String, AdminError> {
    let out = match cmd {
        Command::ClientAdd {
            id,
            grants,
            impersonate,
            claim_types,
            edge,
            secret_hash,
        } => {
            let rec = ClientRecord {
                secret_hash: secret_hash.clone(),
                active: false,
                grants: grants.clone(),
                impersonate: *impersonate,
                impersonate_claim_types: claim_types.clone(),
                edge: *edge,
                created_at: now,
            };
            if rec.secret_hash_bytes().is_none() {
                return refused("malformed secret hash".into());
            }
            if !store.add_client(id, &rec).await? {
                return refused(format!("a client named {id:?} exists"));
            }
            format!("client {id} added (inactive until `issuer client activate {id}`)\n")
        }
        Command::ClientActivate { id } => {
            found(store.update_client(id, ClientChange::SetActive(true), now).await?, "client", id)?;
            format!("client {id} activated\n")
        }
        Command::ClientDeactivate { id } => {
            found(store.update_client(id, ClientChange::SetActive(false), now).await?, "client", id)?;
            format!("client {id} deactivated\n")
        }
        Command::ClientRemove { id } => {
            found(store.remove_client(id, now).await?, "client", id)?;
            format!("client {id} removed\n")
        }
        Command::ClientList => {
            let mut out = String::from(
                "ID                   ACTIVE  GRANTS                          IMPERSONATE\n",
            );
            for (id, c) in store.clients().await? {
                let grants: Vec<_> = c
                    .grants
                    .iter()
                    .map(|g| {
                        serde_json::to_value(g)
                            .unwrap_or_default()
                            .as_str()
                            .unwrap_or("?")
                            .to_owned()
                    })
                    .chain(c.edge.then(|| "edge".to_owned()))
                    .collect();
                let imp = match (c.impersonate, c.impersonate_claim_types.is_empty()) {
                    (false, _) => "no".to_string(),
                    (true, true) => "yes".to_string(),
                    (true, false) => format!("claims: {}", c.impersonate_claim_types.join(",")),
                };
                out += &format!(
                    "{id:<20} {:<7} {:<31} {imp}\n",
                    if c.active { "yes" } else { "no" },
                    grants.join(",")
                );
            }
            out
        }
        Command::UserAdd {
            name,
            roles,
            claims,
            password_hash,
        } => {
            let rec = UserRecord {
                password_hash: password_hash.clone(),
                disabled: false,
                roles: roles.clone(),
                claims: claims.clone(),
                created_at: now,
        password_changed_at: None,
        disabled_at: None,
            };
            if !store.add_user(name, &rec).await? {
                return refused(format!("a user named {name:?} exists"));
            }
            format!("user {name} added\n")
        }
        Command::UserDisable { name } => {
            found(
                store.update_user(name, &UserChange::Disable { at: now }, now).await?,
                "user",
                name,
            )?;
            format!("user {name} disabled\n")
        }
        Command::UserEnable { name } => {
            found(
                store.update_user(name, &UserChange::Enable, now).await?,
                "user",
                name,
            )?;
            format!("user {name} enabled\n")
        }
        Command::UserPasswd {
            name,
            password_hash,
        } => {
            found(
                store.update_user(name, &UserChange::SetPassword { hash: password_hash.clone(), at: now }, now).await?,
                "user",
                name,
            )?;
            format!("password of user {name} changed\n")
        }
        Command::UserRemove { name } => {
            found(store.remove_user(name, now).await?, "user", name)?;
            format!("user {name} removed\n")
        }
        Command::UserList => {
            let mut out = String::from("NAME                 ENABLED  ROLES\n");
            for (name, u) in store.users().await? {
                out += &format!(
                    "{name:<20} {:<8} {}\n",
                    if u.disabled { "no" } else { "yes" },
                    u.roles.join(",")
                );
            }
            out
        }
        Command::KeysList => key_table(&store.key_infos(now).await?),
        Command::KeysRotate { delay } => match store.rotate_key(now, *delay).await? {
            None => return refused("a rotation is pending already (see `issuer keys list`); `keys rotate --delay 0` replaces it at once".into()),
            Some(r) => {
                let mut out = if *delay == 0 {
                    format!("key {} now signs; older keys verify until they retire (see `issuer keys list`)\n", r.kid)
                } else {
                    format!(
                        "key {} is published now and signs from {} ({delay} s from now): edges with edge sync learn it before; update static filter configurations before then\n",
                        r.kid,
                        now + delay
                    )
                };
                for kid in &r.dropped {
                    out += &format!("pending key {kid} is retired: it never signed and verifies nothing\n");
                }
                out
            }
        },
        Command::KeysRetire { kid } => match store.retire_key(*kid, now).await? {
            RetireOutcome::Retired => format!(
                "key {kid} is retired: it verifies nothing from now on (edges with edge sync drop it within a poll; remove it from static filter configurations)\n"
            ),
            RetireOutcome::AlreadyRetired => format!("key {kid} was retired already\n"),
            RetireOutcome::Unknown => return refused(format!("no key {kid}")),
            RetireOutcome::InUse(state) => {
                return refused(format!(
                    "key {kid} is {state}: `issuer keys rotate --delay 0` first (a new key signs at once), then retire it (see `issuer keys list`)"
                ))
            }
        },
        Command::KeysFilterConfig => {
            let cfg = filter_config(&store.key_ring(now).await?, store.access_ttl().await?);
            format!(
                "{}\n",
                serde_json::to_string_pretty(&cfg).expect("JSON value serializes")
            )
        }
    };
    if cmd.is_change() {
        tracing::info!(target: "audit", action = cmd.audit_label().as_str(), "admin change");
    }
    Ok(out)
}

/// Sends `cmd` to the server listening on the data dir's socket. `Ok(None)` if no server answers
/// there (no socket, or a stale one), so the caller opens the database itself.
pub fn send(data_dir: &Path, cmd: &Command) -> anyhow::Result<Option<Reply>> {
    let path = data_dir.join(SOCKET_FILE);
    let mut stream = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None)
        }
        Err(e) => {
            return Err(anyhow::anyhow!(
                "cannot reach the server's admin socket {}: {e}",
                path.display()
            ))
        }
    };
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    let mut line = serde_json::to_string(cmd)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut reply = String::new();
    BufReader::new(stream).read_line(&mut reply)?;
    Ok(Some(serde_json::from_str(&reply)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_config_is_accepted_by_the_filter() {
        let ring = shared::KeyRing::new(
            vec![shared::Key::new(1, [1; 32]), shared::Key::new(2, [2; 32])],
            Some(2),
        )
        .unwrap();
        let json = serde_json::to_vec(&filter_config(&ring, 900)).unwrap();
        let cfg = filter_wasm::config::Config::parse(&json).unwrap();
        assert_eq!(cfg.ring.get(1).unwrap().secret(), &[1; 32]);
        assert_eq!(cfg.ring.get(2).unwrap().secret(), &[2; 32]);
        assert_eq!(cfg.alternative_header, "serviceauthorization");
        assert_eq!(cfg.max_lifetime, 900);
        assert!(cfg.exempt_prefixes.is_empty());
    }
}
