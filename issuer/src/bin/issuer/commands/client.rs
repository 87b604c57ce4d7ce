//! `issuer client ...`: the command line of the client commands, which hashes a client's secret
//! here and sends the rest as an [`admin::Command`], and renders the clients' listing.

use crate::admin::{read_secret, run_admin, run_on, unexpected};
use crate::data_dir::{hash_key, DataDir};
use crate::out;
use clap::{Args, Subcommand};
use issuer::admin::input::check_client_id;
use issuer::admin::{ClientView, Command, NewClient, Reply};
use issuer::secrets::new_client_secret;
use issuer::store::exchange::DEFAULT_EXCHANGE_MAX_DEPTH;
use issuer::store::{DpopPolicy, ExchangePolicy, GrantKind};

mod import;

pub(crate) use import::{
    read as read_statement, refuse as refuse_statement, trust as vendor_trust,
};

#[derive(Args)]
pub struct ClientArgs {
    #[command(subcommand)]
    cmd: ClientCmd,
    #[command(flatten)]
    dir: DataDir,
}

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
        /// `required`: no token without a DPoP proof, from any grant (docs/dpop.md);
        /// `allowed`: a proof gets a bound token, no proof a bearer token.
        #[arg(long, value_parser = parse_dpop, default_value = "allowed")]
        dpop: DpopPolicy,
        /// Token exchange (RFC 8693): the clients whose access tokens this client may exchange
        /// for tokens acting for their subjects (comma-separated); without it, it cannot exchange.
        #[arg(long, value_delimiter = ',')]
        exchange_from: Vec<String>,
        /// The deepest actor chain its exchanged tokens may carry, it included (1 to 8).
        #[arg(long, requires = "exchange_from", default_value_t = DEFAULT_EXCHANGE_MAX_DEPTH)]
        exchange_max_depth: u8,
        /// The audiences it may name in an exchange (comma-separated; `audience` or `resource`).
        #[arg(long, value_delimiter = ',', requires = "exchange_from")]
        exchange_audience: Vec<String>,
        /// Only for subjects holding one of these roles (comma-separated).
        #[arg(long, value_delimiter = ',', requires = "exchange_from")]
        exchange_subject_role: Vec<String>,
        /// Only for subjects carrying one of these claims, each TYPE=VALUE (comma-separated).
        #[arg(long, value_delimiter = ',', requires = "exchange_from")]
        exchange_subject_claim: Vec<String>,
    },
    /// Require DPoP of a client (`required`) or not (`allowed`); issued tokens stay as they are.
    Dpop {
        id: String,
        #[arg(value_parser = parse_dpop)]
        policy: DpopPolicy,
    },
    /// Allow a client to get tokens; a vendor's client with at most what its statement allows.
    Activate {
        id: String,
        /// A vendor's client: the grants it gets (comma-separated), within its statement's
        /// [default: all its statement allows].
        #[arg(long, value_delimiter = ',')]
        grants: Option<Vec<String>>,
        /// A vendor's client: no impersonation, even if its statement allows it.
        #[arg(long)]
        no_impersonation: bool,
    },
    /// Import a vendor's software statement (the client exists pending) or revocation list
    /// (its clients deactivated), checked against the [[vendor]] tables of --config.
    Import { file: std::path::PathBuf },
    /// Stop a client from getting tokens.
    Deactivate { id: String },
    /// List clients.
    List {
        /// As a JSON array: id, grants, impersonate, impersonate_claim_types, active, edge, dpop,
        /// and a vendor's client's `vendor`.
        #[arg(long)]
        json: bool,
        /// Only the vendors' clients awaiting activation, with what their statements ask for.
        #[arg(long)]
        pending: bool,
    },
    /// Delete a client.
    Remove { id: String },
}

/// Runs `issuer client CMD`; `config` is the global `--config` as read (`import` checks
/// statements against its `[[vendor]]` tables).
pub fn run(args: ClientArgs, config: Option<&issuer::config::ConfigFile>) -> anyhow::Result<()> {
    let dir = &args.dir;
    let cmd = match args.cmd {
        ClientCmd::Add {
            id,
            grants,
            impersonate,
            impersonate_claim_types,
            secret_stdin,
            edge,
            dpop,
            exchange_from,
            exchange_max_depth,
            exchange_audience,
            exchange_subject_role,
            exchange_subject_claim,
        } => {
            check_client_id(&id)?;
            let exchange = (!exchange_from.is_empty())
                .then(|| {
                    ExchangePolicy::new(exchange_from, exchange_max_depth, exchange_audience)?
                        .for_subjects(exchange_subject_role, exchange_subject_claim)
                })
                .transpose()?;
            let grants = grants.unwrap_or_else(|| {
                if edge {
                    Vec::new()
                } else {
                    vec!["client_credentials".into()]
                }
            });
            let grants = parse_grants(&grants)?;
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
                    dpop,
                    secret_hash,
                    active: false,
                    exchange,
                }),
            )?;
            if !secret_stdin {
                println!("secret: {}", secret.as_str());
                eprintln!("(shown once: store it now; only a keyed hash is kept)");
            }
            return Ok(());
        }
        ClientCmd::Dpop { id, policy } => Command::ClientDpop { id, dpop: policy },
        ClientCmd::Activate {
            id,
            grants,
            no_impersonation,
        } => Command::ClientActivate {
            id,
            grants: grants.as_deref().map(parse_grants).transpose()?,
            no_impersonation,
        },
        ClientCmd::Import { file } => return import::import(&file, dir, config),
        ClientCmd::Deactivate { id } => Command::ClientDeactivate { id },
        ClientCmd::List { json, pending } => return list(dir, json, pending),
        ClientCmd::Remove { id } => Command::ClientRemove { id },
    };
    run_admin(dir, cmd)
}

/// `--grants`: `password`, `client_credentials`, comma-separated, blanks left out.
fn parse_grants(grants: &[String]) -> anyhow::Result<Vec<GrantKind>> {
    grants
        .iter()
        .filter(|g| !g.trim().is_empty())
        .map(|g| {
            GrantKind::parse(g.trim()).ok_or_else(|| {
                anyhow::anyhow!("unknown grant {g:?}: use password or client_credentials")
            })
        })
        .collect()
}

/// `client list [--json] [--pending]`: a table, one line per client, or a JSON array of
/// [`ClientView`].
fn list(dir: &DataDir, json: bool, pending: bool) -> anyhow::Result<()> {
    let mut clients = match run_on(dir, &Command::ClientList)? {
        Reply::Clients(clients) => clients,
        other => return Err(unexpected(&other)),
    };
    if pending {
        clients.retain(|c| c.vendor.as_ref().is_some_and(|v| v.pending && !v.revoked));
        if !json {
            return out::text(&import::pending_table(&clients));
        }
    }
    if json {
        return out::json_document(&clients);
    }
    let mut table = String::from(
        "ID                   ACTIVE  GRANTS                          DPOP      IMPERSONATE\n",
    );
    for c in &clients {
        table += &format!(
            "{:<20} {:<7} {:<31} {:<9} {}\n",
            c.id,
            state(c),
            grant_names(c).join(","),
            c.dpop.as_str(),
            impersonation(c)
        );
    }
    out::text(&table)
}

/// `yes`, `no`, or a vendor's client's `pending` or `revoked`.
fn state(c: &ClientView) -> &'static str {
    match (&c.vendor, c.active) {
        (Some(v), _) if v.revoked => "revoked",
        (Some(v), _) if v.pending => "pending",
        (_, true) => "yes",
        (_, false) => "no",
    }
}

fn parse_dpop(s: &str) -> Result<DpopPolicy, String> {
    DpopPolicy::parse(s)
        .ok_or_else(|| format!("unknown DPoP policy {s:?}: use required or allowed"))
}

/// The client's grants by their wire names, and `edge` for an edge client.
fn grant_names(c: &ClientView) -> Vec<String> {
    c.grants
        .iter()
        .map(|g| {
            serde_json::to_value(g)
                .unwrap_or_default()
                .as_str()
                .unwrap_or("?")
                .to_owned()
        })
        .chain(c.edge.then(|| "edge".to_owned()))
        .collect()
}

/// Whether the client may impersonate, and with which claim types.
fn impersonation(c: &ClientView) -> String {
    match (c.impersonate, c.impersonate_claim_types.is_empty()) {
        (false, _) => "no".to_string(),
        (true, true) => "yes".to_string(),
        (true, false) => format!("claims: {}", c.impersonate_claim_types.join(",")),
    }
}
