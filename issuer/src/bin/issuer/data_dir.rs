//! Where the commands find the store: `--data-dir`, `--store` and the PostgreSQL store's files,
//! global flags of every command that opens it.

use crate::admin::block_on;
use clap::Args;
use issuer::app::now;
use issuer::store::postgres::PgStore;
use issuer::store::redb::{RedbFile, HASH_KEY_FILE};
use issuer::store::{HashKeyed, Location, PgFiles, RefreshPolicy};
use std::path::PathBuf;
use std::sync::Arc;
use zeroize::Zeroizing;

#[derive(Args, Clone, PartialEq)]
pub struct DataDir {
    /// Data dir of the embedded store (created 0700; database and key files 0600).
    #[arg(
        long,
        env = "ISSUER_DATA_DIR",
        default_value = "./issuer-data",
        global = true
    )]
    data_dir: PathBuf,
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
}

impl DataDir {
    pub fn location(&self) -> anyhow::Result<Location> {
        Ok(Location::parse(self.store.as_deref(), &self.data_dir)?)
    }

    pub fn pg_files(&self) -> PgFiles<'_> {
        PgFiles {
            kek: self.kek_file.as_deref(),
            previous_kek: self.previous_kek_file.as_deref(),
            ca: self.store_ca_file.as_deref(),
            password: self.store_password_file.as_deref(),
        }
    }

    /// The PostgreSQL store at `url`, for an admin command.
    pub async fn connect(&self, url: &str) -> anyhow::Result<Arc<PgStore>> {
        let policy = RefreshPolicy::default();
        Ok(Location::connect_postgres(url, &self.pg_files(), now(), policy).await?)
    }
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
