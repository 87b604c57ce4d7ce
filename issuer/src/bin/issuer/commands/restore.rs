//! `issuer restore`: a new data dir (absent or empty) made of a backup file as `issuer backup`
//! (`backup.rs`) wrote it, or an empty PostgreSQL database filled with it in one transaction,
//! its secrets sealed under `--kek-file` (docs/operate.md, "Backup and restore" and "Moving to
//! PostgreSQL"). The whole file is checked (its digest) before anything is written.

use super::backup::describe;
use crate::admin::block_on;
use crate::data_dir::DataDir;
use anyhow::Context as _;
use clap::Args;
use issuer::app::now;
use issuer::store::redb::backup as redb_backup;
use issuer::store::redb::contents as redb_contents;
use issuer::store::Location;
use std::path::PathBuf;

#[derive(Args)]
pub struct RestoreArgs {
    /// The backup file, as `issuer backup` wrote it (of a data dir or of a PostgreSQL store).
    /// Restored into --data-dir (absent or empty), or with --store postgres://… into an empty
    /// database, its secrets sealed under --kek-file, in one transaction.
    #[arg(long)]
    from: PathBuf,
    #[command(flatten)]
    dir: DataDir,
}

/// `issuer restore --from FILE`: a new data dir of the backup, or an empty PostgreSQL database
/// filled with it.
pub fn run(args: &RestoreArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    let data = match dir.target()? {
        Location::Redb(data) => data,
        Location::Postgres(url) => return restore_postgres(args, dir, &url),
    };
    let summary = redb_backup::restore(&args.from, &data).with_context(|| {
        format!(
            "restoring {} into {} (nothing was written)",
            args.from.display(),
            data.display()
        )
    })?;
    println!(
        "restored the backup {} ({}) into {}; start `issuer serve` on it",
        args.from.display(),
        describe(&summary),
        data.display()
    );
    Ok(())
}

/// `issuer restore --from FILE --store URL --kek-file FILE`: the backup, read and checked whole,
/// into the empty database at `url` in one transaction.
fn restore_postgres(args: &RestoreArgs, dir: &DataDir, url: &str) -> anyhow::Result<()> {
    let failed = || {
        format!(
            "restoring {} into the PostgreSQL store (nothing was restored)",
            args.from.display()
        )
    };
    let summary = redb_backup::verify(&args.from).with_context(failed)?;
    let contents = redb_contents::read_backup(&args.from).with_context(failed)?;
    block_on(async {
        let store = dir.connect(url).await?;
        store.import(&contents, now()).await.with_context(failed)
    })??;
    println!(
        "restored the backup {} ({}; {}) into the PostgreSQL store; start `issuer serve` on it \
         with the same --kek-file",
        args.from.display(),
        describe(&summary),
        contents.describe()
    );
    Ok(())
}
