//! `issuer client ...`: the command line of the client commands, which hashes a client's secret
//! here and sends the rest as an [`admin::Command`].

use crate::admin::{read_secret, run_admin};
use crate::data_dir::{hash_key, DataDir};
use clap::Subcommand;
use issuer::admin::input::check_client_id;
use issuer::admin::{Command, NewClient};
use issuer::secrets::new_client_secret;
use issuer::store::GrantKind;

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

pub fn run(cmd: ClientCmd, dir: &DataDir) -> anyhow::Result<()> {
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
