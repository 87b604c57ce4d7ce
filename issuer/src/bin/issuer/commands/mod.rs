//! The subcommands of `issuer`, one module each: its arguments and what it does. [`Command`]
//! lists them for clap and hands each its arguments.

pub mod apply;
pub mod audit;
pub mod backup;
pub mod client;
pub mod directory;
pub mod dpop;
pub mod edges;
pub mod init;
pub mod keys;
pub mod restore;
pub mod serve;
pub mod user;
pub mod vendor;

use crate::ConfigArg;
use issuer::config::ConfigFile;

/// One subcommand of `issuer`, with its arguments.
#[derive(clap::Subcommand)]
pub enum Command {
    /// Run the token server (it creates its data dir on first start).
    Serve(Box<serve::Serve>),
    /// Create the store (a data dir, or the PostgreSQL schema) with its hash key and first
    /// signing key, for admin commands run before the first `serve`; a store there is left as is.
    Init(init::InitArgs),
    /// Manage clients.
    Client(client::ClientArgs),
    /// Manage users of the password grant.
    User(user::UserArgs),
    /// Make the store's clients and local users match a TOML file (docs/operate.md).
    Apply(apply::ApplyArgs),
    /// Manage token signing keys.
    Keys(keys::KeysArgs),
    /// List the edges (Envoy filter VMs with edge sync) and what each holds.
    Edges(edges::EdgesArgs),
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
    Backup(backup::BackupArgs),
    /// Make a new data dir (absent or empty) of a backup, or fill an empty PostgreSQL database
    /// with it (--store URL --kek-file FILE): the move to PostgreSQL (docs/operate.md).
    Restore(restore::RestoreArgs),
}

impl Command {
    /// Runs the subcommand. `config` is the global `--config`, `file` the file it names as read
    /// (its options already the defaults of the subcommand's); `reparse` reads `serve`'s command
    /// line again on SIGHUP.
    pub fn run(
        self,
        config: &ConfigArg,
        file: Option<ConfigFile>,
        reparse: serve::Reparse,
    ) -> anyhow::Result<()> {
        match self {
            Self::Serve(s) => serve::run(*s, file, reparse),
            Self::Init(args) => init::run(&args),
            Self::Client(args) => client::run(args, file.as_ref()),
            Self::User(args) => user::run(args),
            Self::Apply(args) => apply::run(args, file.as_ref()),
            Self::Keys(args) => keys::run(args),
            Self::Edges(args) => edges::run(&args),
            Self::Dpop(cmd) => dpop::run(cmd),
            Self::Vendor(cmd) => vendor::run(cmd),
            Self::Directory(cmd) => directory::run(cmd, config),
            Self::Audit(args) => audit::run(&args),
            Self::Backup(args) => backup::run(&args),
            Self::Restore(args) => restore::run(&args),
        }
    }
}
