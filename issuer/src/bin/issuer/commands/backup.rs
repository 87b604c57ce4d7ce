//! `issuer backup` and `issuer restore` (part of the `issuer` binary): a consistent copy of the
//! embedded store in one file, taken through the running server's admin socket or from a stopped
//! data dir, and a new data dir made of one (docs/operate.md, "Backup and restore"; the format in
//! `issuer::store::backup`).
//!
//! The command line writes the backup file itself, as the user who runs it: reaching the admin
//! socket (0600 in the 0700 data dir) takes the server's user or root, and the file is theirs,
//! created new with mode 0600. Through the socket the server sends the backup after its answer
//! line; the command line checks the whole file (its digest) before it reports success, and
//! removes what it wrote if anything fails.

use super::audit::rfc3339;
use crate::data_dir::DataDir;
use anyhow::{bail, Context as _};
use clap::Args;
use issuer::admin::{Answer, Command, Reply, SOCKET_FILE};
use issuer::app::now;
use issuer::store::backup::{BackupError, Summary};
use issuer::store::redb::backup as redb_backup;
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
    /// the user running the command. It holds every secret of the store.
    #[arg(long)]
    to: PathBuf,
}

#[derive(Args)]
pub struct RestoreArgs {
    /// The backup file, as `issuer backup` wrote it.
    #[arg(long)]
    from: PathBuf,
}

/// The embedded store's data dir of `dir` (which must exist, unless `new`); the PostgreSQL store
/// is refused.
fn data_dir(dir: &DataDir, new: bool) -> anyhow::Result<PathBuf> {
    let location = if new { dir.target()? } else { dir.location()? };
    match location {
        Location::Redb(path) => Ok(path),
        Location::Postgres(_) => bail!("{}", BackupError::Postgres),
    }
}

/// `issuer backup --to FILE`.
pub fn backup(args: &BackupArgs, dir: &DataDir) -> anyhow::Result<()> {
    let data = data_dir(dir, false)?;
    let file = match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&args.to)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => bail!(
            "{} exists: a backup is written to a new file, never over one",
            args.to.display()
        ),
        Err(e) => return Err(e).with_context(|| format!("creating {}", args.to.display())),
    };
    let written = write_backup(&data, file).and_then(|how| {
        let summary = redb_backup::verify(&args.to)
            .context("the backup written does not read back whole (see the server's log)")?;
        Ok((how, summary))
    });
    match written {
        Ok((how, summary)) => {
            println!(
                "backup of {} ({how}) written to {}: {}; it holds every secret of the store",
                data.display(),
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

fn describe(s: &Summary) -> String {
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

/// `issuer restore --from FILE`: a new data dir of the backup.
pub fn restore(args: &RestoreArgs, dir: &DataDir) -> anyhow::Result<()> {
    let data = data_dir(dir, true)?;
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
