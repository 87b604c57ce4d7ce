//! `issuer client ...` and `issuer user ...`: the command line of the account commands, which
//! hashes secrets and passwords here and sends the rest as an [`admin::Command`].

use crate::cmd_admin::read_secret;
use crate::{block_on, run_admin, DataDir};
use clap::Subcommand;
use issuer::admin::input::{check_client_id, check_roles, check_user_name, parse_claim};
use issuer::admin::{Command, NewClient, NewUser};
use issuer::app::now;
use issuer::passwords::hash_password;
use issuer::secrets::new_client_secret;
use issuer::store::redb::{RedbFile, HASH_KEY_FILE};
use issuer::store::{GrantKind, HashKeyed, Location};
use zeroize::Zeroizing;

#[derive(Subcommand)]
pub enum ClientCmd {
    /// Register a client (inactive until activated); prints its generated secret.
    Add {
        id: String,
        /// Comma-separated grants: password, client_credentials [default: client_credentials,
        /// or none with --edge].
        #[arg(long, value_delimiter = ',')]
        grants: Option<Vec<String>>,
        /// Allow impersonation with client_credentials.
        #[arg(long)]
        impersonate: bool,
        /// Limit impersonation to these claim types (comma-separated; `name` and `role` for the
        /// obsolete impersonate_as and roles).
        #[arg(long, value_delimiter = ',', requires = "impersonate")]
        impersonate_claim_types: Vec<String>,
        /// Read the secret from stdin instead of generating one.
        #[arg(long)]
        secret_stdin: bool,
        /// May read the edge feed (`GET /apiv2/oauth/edge`: verification keys and revocations),
        /// as an Envoy filter does. Such a client gets no grant unless `--grants` names some.
        #[arg(long)]
        edge: bool,
    },
    /// Allow a client to get tokens.
    Activate { id: String },
    /// Stop a client from getting tokens.
    Deactivate { id: String },
    /// List clients.
    List {
        /// As a JSON array: id, grants, impersonate, impersonate_claim_types, active, edge.
        #[arg(long)]
        json: bool,
    },
    /// Delete a client.
    Remove { id: String },
}

#[derive(Subcommand)]
pub enum UserCmd {
    /// Create a user; the password is read from stdin.
    Add {
        name: String,
        /// A role (repeatable).
        #[arg(long = "role")]
        roles: Vec<String>,
        /// A claim TYPE=VALUE (repeatable).
        #[arg(long = "claim")]
        claims: Vec<String>,
    },
    /// Disable a user (sign-in and refresh fail).
    Disable { name: String },
    /// Enable a user.
    Enable { name: String },
    /// Set a user's password, read from stdin.
    Passwd { name: String },
    /// List users.
    List {
        /// As a JSON array: name, roles, claims, enabled, password_scheme, directory.
        #[arg(long)]
        json: bool,
    },
    /// Delete a user.
    Remove { name: String },
}

/// The hash key of the store: from the data dir's file (creating the data dir if needed, without
/// opening the database, which the server may have open), or opened from PostgreSQL.
pub fn hash_key(args: &DataDir) -> anyhow::Result<issuer::secrets::HashKey> {
    let dir = match args.location()? {
        Location::Redb(dir) => dir,
        Location::Postgres(url) => {
            return block_on(async { anyhow::Ok(args.connect(&url).await?.hash_key().clone()) })?;
        }
    };
    match std::fs::read(dir.join(HASH_KEY_FILE)) {
        Ok(bytes) => {
            let bytes = Zeroizing::new(bytes);
            let arr: [u8; 32] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| anyhow::anyhow!("damaged hash.key"))?;
            Ok(issuer::secrets::HashKey::new(Zeroizing::new(arr)))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            drop(RedbFile::open(&dir, now())?);
            hash_key(args)
        }
        Err(e) => Err(e.into()),
    }
}

pub fn client(cmd: ClientCmd, dir: &DataDir) -> anyhow::Result<()> {
    let cmd = match cmd {
        ClientCmd::Add {
            id,
            grants,
            impersonate,
            impersonate_claim_types,
            secret_stdin,
            edge,
        } => {
            check_client_id(&id)?;
            let grants = grants.unwrap_or_else(|| {
                if edge {
                    Vec::new()
                } else {
                    vec!["client_credentials".into()]
                }
            });
            let grants = grants
                .iter()
                .filter(|g| !g.trim().is_empty())
                .map(|g| {
                    GrantKind::parse(g.trim()).ok_or_else(|| {
                        anyhow::anyhow!("unknown grant {g:?}: use password or client_credentials")
                    })
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            let secret = if secret_stdin {
                let secret = read_secret("client secret")?;
                issuer::secrets::check_client_secret(&secret)?;
                secret
            } else {
                new_client_secret()
            };
            let secret_hash = hex::encode(hash_key(dir)?.client_secret_hash(&id, &secret));
            run_admin(
                dir,
                Command::ClientAdd(NewClient {
                    id: id.clone(),
                    grants,
                    impersonate,
                    claim_types: impersonate_claim_types,
                    edge,
                    secret_hash,
                    active: false,
                }),
            )?;
            if !secret_stdin {
                println!("secret: {}", secret.as_str());
                eprintln!("(shown once: store it now; only a keyed hash is kept)");
            }
            return Ok(());
        }
        ClientCmd::Activate { id } => Command::ClientActivate { id },
        ClientCmd::Deactivate { id } => Command::ClientDeactivate { id },
        ClientCmd::List { json: false } => Command::ClientList,
        ClientCmd::List { json: true } => Command::ClientListJson,
        ClientCmd::Remove { id } => Command::ClientRemove { id },
    };
    run_admin(dir, cmd)
}

pub fn user(cmd: UserCmd, dir: &DataDir) -> anyhow::Result<()> {
    let cmd = match cmd {
        UserCmd::Add {
            name,
            roles,
            claims,
        } => {
            // The rules `execute` applies, checked before the password is asked for.
            check_user_name(&name)?;
            check_roles(&roles)?;
            let claims = claims
                .iter()
                .map(|c| parse_claim(c))
                .collect::<Result<Vec<_>, _>>()?;
            let password = read_secret("password")?;
            Command::UserAdd(NewUser {
                name,
                roles,
                claims,
                password_hash: hash_password(&password),
                disabled: false,
            })
        }
        UserCmd::Disable { name } => Command::UserDisable { name },
        UserCmd::Enable { name } => Command::UserEnable { name },
        UserCmd::Passwd { name } => {
            let password = read_secret("password")?;
            Command::UserPasswd {
                name,
                password_hash: hash_password(&password),
            }
        }
        UserCmd::List { json: false } => Command::UserList,
        UserCmd::List { json: true } => Command::UserListJson,
        UserCmd::Remove { name } => Command::UserRemove { name },
    };
    run_admin(dir, cmd)
}
