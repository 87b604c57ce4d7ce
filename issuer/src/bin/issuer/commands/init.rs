//! `issuer init`: the store created before the first `issuer serve`, for admin commands run
//! first (a data dir with its hash key and first signing key; on PostgreSQL, the schema and
//! sealed keys). A store already there is left as it is.

use crate::admin::block_on;
use crate::data_dir::{existing, DataDir};
use clap::Args;
use issuer::app::now;
use issuer::store::redb::RedbFile;
use issuer::store::Location;

#[derive(Args)]
pub struct InitArgs {
    #[command(flatten)]
    dir: DataDir,
}

/// `issuer init`: creates the store named, or says it exists.
pub fn run(args: &InitArgs) -> anyhow::Result<()> {
    match args.dir.target()? {
        Location::Redb(dir) => {
            if existing(&dir).is_ok() {
                println!("{} is a data dir already; nothing changed", dir.display());
                return Ok(());
            }
            issuer::store::redb::owner::check_data_dir(&dir)?;
            drop(RedbFile::open(&dir, now())?);
            println!(
                "created the data dir {} (hash key and first signing key)",
                dir.display()
            );
        }
        Location::Postgres(url) => {
            block_on(args.dir.connect(&url))??;
            println!("the PostgreSQL store is ready");
        }
    }
    Ok(())
}
