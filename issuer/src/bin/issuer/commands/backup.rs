//! `issuer backup` (part of the `issuer` binary): a consistent copy of the store in one file,
//! taken through the running server's admin socket, from a stopped data dir, or from a
//! PostgreSQL store, which `issuer restore` (`restore.rs`) makes a data dir or fills an empty
//! PostgreSQL database with (docs/operate.md, "Backup and restore" and "Moving to PostgreSQL";
//! the format in `issuer::store::backup`, what moves in `issuer::store::contents`).
//!
//! The command line writes the backup file itself, as the user who runs it: reaching the admin
//! socket (0600 in the 0700 data dir) takes the server's user or root, and the file is theirs,
//! created new with mode 0600. Through the socket the server sends the backup after its answer
//! line; the command line checks the whole file (its digest) before it reports success, and
//! removes what it wrote if anything fails. A PostgreSQL store is read in one snapshot with the
//! key-encryption key of `--kek-file`, and written in the data dir's format.

use super::audit::rfc3339;
use crate::admin::block_on;
use crate::data_dir::DataDir;
use anyhow::{bail, Context as _};
use clap::Args;
use issuer::admin::{Answer, Command, Reply, SOCKET_FILE};
use issuer::app::now;
use issuer::store::backup::Summary;
use issuer::store::redb::backup as redb_backup;
use issuer::store::redb::contents as redb_contents;
use issuer::store::Location;
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest the command line waits for more of a backup from the server.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Args)]
pub struct BackupArgs {
    /// The backup file to write: created new (an existing file is refused), mode 0600, owned by
    /// the user running the command. It holds every secret of the store, a PostgreSQL store's
    /// signing keys and hash key included (opened with --kek-file), in the data dir's format.
    #[arg(long)]
    to: PathBuf,
    #[command(flatten)]
    dir: DataDir,
}

/// `issuer backup --to FILE`.
pub fn run(args: &BackupArgs) -> anyhow::Result<()> {
    let dir = &args.dir;
    let location = dir.location()?;
    let file = new_backup_file(&args.to)?;
    let written = match &location {
        Location::Redb(data) => backup_data_dir(args, data, file),
        Location::Postgres(url) => backup_postgres(args, dir, url, file),
    };
    match written {
        Ok((from, summary)) => {
            println!(
                "backup of {from} written to {}: {}; it holds every secret of the store",
                args.to.display(),
                describe(&summary)
            );
            Ok(())
        }
        Err(e) => {
            let _ = fs::remove_file(&args.to);
            Err(e)
        }
    }
}

/// The backup file `to`, created new with mode 0600.
fn new_backup_file(to: &Path) -> anyhow::Result<File> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(to)
    {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} exists: a backup is written to a new file, never over one",
            to.display()
        ),
        Err(e) => Err(e).with_context(|| format!("creating {}", to.display())),
    }
}

/// The backup of the data dir `data` in `file`; what it was of, and what it holds.
fn backup_data_dir(
    args: &BackupArgs,
    data: &Path,
    file: File,
) -> anyhow::Result<(String, Summary)> {
    let how = write_backup(data, file)?;
    let summary = redb_backup::verify(&args.to)
        .context("the backup written does not read back whole (see the server's log)")?;
    Ok((format!("{} ({how})", data.display()), summary))
}

/// The backup of the PostgreSQL store at `url` in `file`, read in one snapshot.
fn backup_postgres(
    args: &BackupArgs,
    dir: &DataDir,
    url: &str,
    file: File,
) -> anyhow::Result<(String, Summary)> {
    let contents = block_on(async {
        let store = dir.connect(url).await?;
        anyhow::Ok(
            store
                .export()
                .await
                .context("reading the PostgreSQL store")?,
        )
    })??;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    redb_contents::write_backup(&contents, &mut out, now())?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    let summary = redb_backup::verify(&args.to).context("the backup written does not read back")?;
    Ok((
        format!("the PostgreSQL store ({})", contents.describe()),
        summary,
    ))
}

/// What a backup holds, as `backup` and `restore` report it.
pub(super) fn describe(s: &Summary) -> String {
    format!(
        "taken at {}, {} tables, {} records, {} bytes",
        rfc3339(s.taken_at),
        s.tables,
        s.records,
        s.bytes
    )
}

/// Writes the backup of the data dir `data` to `file` and syncs it; says where it came from.
fn write_backup(data: &Path, file: File) -> anyhow::Result<&'static str> {
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let how = match connect(data)? {
        Some(stream) => {
            receive(stream, &mut out)?;
            "through the running server"
        }
        None => {
            let snapshot = redb_backup::snapshot_stopped(data)
                .with_context(|| format!("backing up {}", data.display()))?;
            issuer::store::backup::Snapshot::write_to(&snapshot, &mut out, now())?;
            "of the stopped data dir"
        }
    };
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    Ok(how)
}

/// The server's admin socket in `data`, or `None` when no server answers there.
fn connect(data: &Path) -> anyhow::Result<Option<UnixStream>> {
    let path = data.join(SOCKET_FILE);
    match UnixStream::connect(&path) {
        Ok(s) => Ok(Some(s)),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) =>
        {
            Ok(None)
        }
        Err(e) => Err(e).with_context(|| {
            format!(
                "cannot reach the server's admin socket {} (run the backup as the server's user)",
                path.display()
            )
        }),
    }
}

/// Asks the server on `stream` for a backup and copies it to `out`.
fn receive(mut stream: UnixStream, out: &mut dyn Write) -> anyhow::Result<()> {
    stream.set_read_timeout(Some(READ_TIMEOUT))?;
    let mut line = serde_json::to_string(&Command::Backup)?;
    line.push('\n');
    stream.write_all(line.as_bytes())?;
    let mut reader = BufReader::with_capacity(1 << 20, stream);
    let mut answer = String::new();
    reader
        .read_line(&mut answer)
        .context("reading the server's answer")?;
    match serde_json::from_str::<Answer>(&answer) {
        Ok(Answer::Ok(Reply::Backup)) => {}
        Ok(Answer::Ok(other)) => return Err(crate::admin::unexpected(&other)),
        Ok(Answer::Err(msg)) => bail!("{msg}"),
        Err(_) if answer.is_empty() => {
            bail!("the server closed the admin socket without an answer")
        }
        Err(e) => bail!("the server's answer is not understood ({e}); is it an older issuer?"),
    }
    std::io::copy(&mut reader, out).context("receiving the backup from the server")?;
    Ok(())
}
