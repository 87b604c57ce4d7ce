//! Where the commands find the store: `--data-dir`, `--store` and the PostgreSQL store's files
//! ([`DataDir`], flattened into the arguments of every command that opens the store, global to
//! its own subcommands), or the same keys of the configuration file (the global `--config`).
//!
//! Only `issuer serve` and `issuer init` (`commands/init.rs`) create a data dir (its hash key
//! and first signing key): every other command finds one there or fails naming where it looked,
//! and none has a default location (`serve` alone defaults to [`SERVE_DEFAULT`]).

use crate::admin::block_on;
use clap::Args;
use issuer::app::now;
use issuer::store::postgres::PgStore;
use issuer::store::redb::{DB_FILE, HASH_KEY_FILE};
use issuer::store::{HashKeyed, Location, PgFiles, RefreshPolicy};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zeroize::Zeroizing;

/// The data dir of `issuer serve` when neither a flag, the environment nor the file names a
/// store.
pub const SERVE_DEFAULT: &str = "./issuer-data";

/// Why a command has no store to work on.
#[derive(Debug, thiserror::Error)]
pub enum Missing {
    /// Neither a flag, the environment nor a configuration file names a store.
    #[error(
        "no store given: name it with --data-dir DIR or --store URL (env ISSUER_DATA_DIR, \
         ISSUER_STORE), or --config FILE (env ISSUER_CONFIG) holding `data_dir` or `store`"
    )]
    Unnamed,
    /// The data dir named holds no store.
    #[error(
        "{dir} holds no data dir of the issuer (no {DB_FILE}): check --data-dir (or `data_dir` \
         of the configuration file), or create it with `issuer init --data-dir {dir}` (or \
         `issuer serve` on it)"
    )]
    NoDataDir { dir: String },
    /// The data dir cannot be looked at.
    #[error("looking at the data dir {dir}")]
    Unreadable { dir: String, source: std::io::Error },
}

/// The flags that name the store and the files a PostgreSQL store needs.
#[derive(Args, Clone, PartialEq)]
pub struct DataDir {
    /// Data dir of the embedded store (made by `issuer serve` or `issuer init`: 0700, database
    /// and key files 0600) [serve's default: ./issuer-data; other commands have none].
    #[arg(long, env = "ISSUER_DATA_DIR", global = true)]
    data_dir: Option<PathBuf>,
    /// Where the state lives: `redb:DIR` (the embedded store, the same as --data-dir DIR) or a
    /// PostgreSQL URL `postgres://USER@HOST:PORT/DATABASE` shared by any number of issuers.
    #[arg(long, env = "ISSUER_STORE", global = true)]
    store: Option<String>,
    /// The key-encryption key file for the PostgreSQL store: at least 32 random bytes, mode 0600.
    #[arg(long, env = "ISSUER_KEK_FILE", global = true)]
    kek_file: Option<PathBuf>,
    /// During a KEK rotation: the previous key-encryption key file, which still opens what it
    /// sealed (see `issuer keys rotate-kek`).
    #[arg(long, env = "ISSUER_PREVIOUS_KEK_FILE", global = true)]
    previous_kek_file: Option<PathBuf>,
    /// CA certificates (PEM) that the PostgreSQL server's certificate must chain to; TLS is used
    /// with this file or `sslmode=require` in the URL (then against the system's roots).
    #[arg(long, env = "ISSUER_STORE_CA_FILE", global = true)]
    store_ca_file: Option<PathBuf>,
    /// The PostgreSQL password on the first line of this file (mode 0600), for a --store URL
    /// without one: a password in the URL shows in `ps`.
    #[arg(long, env = "ISSUER_STORE_PASSWORD_FILE", global = true)]
    store_password_file: Option<PathBuf>,
    /// With a --store URL through a pooler in transaction mode: a URL of the database itself
    /// (or of a pooler in session mode) where `issuer serve` LISTENs for the changes other
    /// issuers make (docs/deploy-postgres.md). The password file and CA file apply to it too.
    #[arg(long, env = "ISSUER_STORE_LISTEN_URL", global = true)]
    store_listen_url: Option<String>,
}

impl DataDir {
    /// The store named, which must exist: a data dir holding the database, or a PostgreSQL URL.
    pub fn location(&self) -> anyhow::Result<Location> {
        let location = self.target()?;
        if let Location::Redb(dir) = &location {
            existing(dir)?;
        }
        Ok(location)
    }

    /// The store named, existing or not (`issuer init`, `issuer restore`).
    pub fn target(&self) -> anyhow::Result<Location> {
        match (&self.store, &self.data_dir) {
            (None, None) => Err(Missing::Unnamed.into()),
            (store, dir) => Ok(Location::parse(
                store.as_deref(),
                dir.as_deref().unwrap_or(Path::new("")),
            )?),
        }
    }

    /// The store `issuer serve` runs on: as [`DataDir::target`], [`SERVE_DEFAULT`] if none is
    /// named.
    pub fn serve_location(&self) -> anyhow::Result<Location> {
        let dir = self
            .data_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(SERVE_DEFAULT));
        Ok(Location::parse(self.store.as_deref(), &dir)?)
    }

    pub fn pg_files(&self) -> PgFiles<'_> {
        PgFiles {
            kek: self.kek_file.as_deref(),
            previous_kek: self.previous_kek_file.as_deref(),
            ca: self.store_ca_file.as_deref(),
            password: self.store_password_file.as_deref(),
            listen_url: self.store_listen_url.as_deref(),
        }
    }

    /// The PostgreSQL store at `url`, for an admin command.
    pub async fn connect(&self, url: &str) -> anyhow::Result<Arc<PgStore>> {
        let policy = RefreshPolicy::default();
        Ok(Location::connect_postgres(url, &self.pg_files(), now(), policy).await?)
    }
}

/// Fails unless `dir` holds the embedded store's database, naming it.
pub fn existing(dir: &Path) -> Result<(), Missing> {
    let name = || dir.display().to_string();
    match dir.join(DB_FILE).try_exists() {
        Ok(true) => Ok(()),
        Ok(false) => Err(Missing::NoDataDir { dir: name() }),
        Err(source) => Err(Missing::Unreadable {
            dir: name(),
            source,
        }),
    }
}

/// The hash key of the store: from the data dir's file (without opening the database, which the
/// server may have open), or opened from PostgreSQL.
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
        Err(e) => {
            Err(anyhow::Error::new(e)
                .context(format!("reading {}", dir.join(HASH_KEY_FILE).display())))
        }
    }
}
