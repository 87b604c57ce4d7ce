//! `issuer`: the token server (`issuer serve`) and its administration (`issuer client|user|keys`,
//! `issuer apply`, `issuer directory`, `issuer dpop`, `issuer vendor`, `issuer audit`, `issuer backup|restore`, `issuer init`).
//! This file parses the command line, with the configuration file's options as defaults of any
//! subcommand's ([`issuer::config::parse_args`]), and dispatches; each subcommand is a module of
//! `commands/`.

mod admin;
mod commands;
mod data_dir;
mod out;

use clap::{Parser, Subcommand};
use commands::{apply, audit, backup, client, directory, dpop, edges, keys, serve, user, vendor};
use data_dir::{ConfigArg, DataDir};

#[derive(Parser)]
#[command(
    name = "issuer",
    version,
    about = "OAuth 2.0 token issuer of the media management service"
)]
struct Cli {
    #[command(subcommand)]
    command: Top,
}

#[derive(Subcommand)]
enum Top {
    /// Run the token server (it creates its data dir on first start).
    Serve(Box<serve::Serve>),
    /// Create the store (a data dir, or the PostgreSQL schema) with its hash key and first
    /// signing key, for admin commands run before the first `serve`; a store there is left as is.
    Init {
        #[command(flatten)]
        dir: DataDir,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Manage clients.
    Client {
        #[command(subcommand)]
        cmd: client::ClientCmd,
        #[command(flatten)]
        dir: DataDir,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Manage users of the password grant.
    User {
        #[command(subcommand)]
        cmd: user::UserCmd,
        #[command(flatten)]
        dir: DataDir,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Make the store's clients and local users match a TOML file (docs/operate.md).
    Apply {
        #[command(flatten)]
        args: apply::ApplyArgs,
        #[command(flatten)]
        dir: DataDir,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Manage token signing keys.
    Keys {
        #[command(subcommand)]
        cmd: keys::KeysCmd,
        #[command(flatten)]
        dir: DataDir,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// List the edges (Envoy filter VMs with edge sync) and what each holds.
    Edges {
        /// One JSON object per edge and line.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        dir: DataDir,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Make a DPoP key and proofs, as a client does (for scripts and curl; docs/dpop.md).
    #[command(subcommand)]
    Dpop(dpop::DpopCmd),
    /// The vendor's side of client credential sets: a signing key, sets, revocation lists
    /// (docs/clients.md). Opens no data dir.
    #[command(subcommand)]
    Vendor(vendor::VendorCmd),
    /// Diagnose the `[directory]` of a configuration file.
    #[command(subcommand)]
    Directory(directory::DirectoryCmd),
    /// Print the audit trail: administrative changes and security events.
    Audit(audit::AuditArgs),
    /// Write a consistent copy of the store to one file: a running issuer's data dir through its
    /// admin socket, a stopped data dir's, or a PostgreSQL store's (--store URL --kek-file FILE),
    /// which `issuer restore` makes a data dir of (docs/operate.md).
    Backup {
        #[command(flatten)]
        args: backup::BackupArgs,
        #[command(flatten)]
        dir: DataDir,
        #[command(flatten)]
        config: ConfigArg,
    },
    /// Make a new data dir (absent or empty) of a backup, or fill an empty PostgreSQL database
    /// with it (--store URL --kek-file FILE): the move to PostgreSQL (docs/operate.md).
    Restore {
        #[command(flatten)]
        args: backup::RestoreArgs,
        #[command(flatten)]
        dir: DataDir,
        #[command(flatten)]
        config: ConfigArg,
    },
}

fn main() -> std::process::ExitCode {
    let result = issuer::config::parse_args::<Cli>(std::env::args_os().collect(), "serve")
        .map_err(anyhow::Error::from)
        .and_then(run);
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("issuer: {}", issuer::display::lines(&format!("{e:#}")));
            std::process::ExitCode::FAILURE
        }
    }
}

/// `issuer serve`'s command line parsed again, with its configuration file as it is now (a
/// reload).
fn reparse_serve() -> anyhow::Result<serve::Serve> {
    let args: Vec<_> = std::env::args_os().collect();
    let (cli, file) = issuer::config::reparse_args::<Cli>(&args, "serve")?;
    match cli.command {
        Top::Serve(s) => serve::with_file(*s, file),
        _ => anyhow::bail!("the command line is no longer `issuer serve`"),
    }
}

/// Runs the command line, with the configuration file if it names one.
fn run((cli, file): (Cli, Option<issuer::config::ConfigFile>)) -> anyhow::Result<()> {
    match cli.command {
        Top::Serve(s) => serve::run(*s, file, reparse_serve),
        Top::Init { dir, .. } => data_dir::init(&dir),
        Top::Directory(cmd) => directory::run(cmd),
        Top::Dpop(cmd) => dpop::run(cmd),
        Top::Vendor(cmd) => vendor::run(cmd),
        Top::Edges { json, dir, .. } => edges::run(&dir, json),
        Top::Audit(args) => audit::run(&args),
        Top::Backup { args, dir, .. } => backup::backup(&args, &dir),
        Top::Restore { args, dir, .. } => backup::restore(&args, &dir),
        Top::Client { cmd, dir, .. } => client::run(cmd, &dir, file.as_ref()),
        Top::User { cmd, dir, .. } => user::run(cmd, &dir),
        Top::Apply { args, dir, .. } => apply::run(args, &dir),
        Top::Keys { cmd, dir, .. } => keys::run(cmd, &dir),
    }
}
