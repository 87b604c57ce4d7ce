//! A backup through the admin socket (`issuer backup`): the server takes a snapshot of its store
//! ([`crate::store::backup`]), answers the command's line with [`Reply::Backup`] (or why not), and
//! writes the backup after that line; the command line writes it to its file. The backup never
//! passes through a JSON line, and the server writes no file of its own.

use crate::admin::{Answer, Reply};
use crate::app::{now, App};
use crate::store::backup::{BackupError, Summary};
use std::io::{BufWriter, Write};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// Longest the server waits for the command line to take more of a backup.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a backup through the socket failed, for the server's log.
#[derive(Debug, thiserror::Error)]
enum Failed {
    #[error("the admin socket: {0}")]
    Socket(std::io::Error),
    #[error(transparent)]
    Backup(#[from] BackupError),
}

fn answer_line(out: &mut dyn Write, answer: &Answer) -> Result<(), Failed> {
    let mut text = serde_json::to_string(answer).expect("an answer serializes");
    text.push('\n');
    out.write_all(text.as_bytes()).map_err(Failed::Socket)
}

/// Answers `issuer backup` from `actor` on the connection `read` and `write`.
pub(super) async fn answer(
    app: &Arc<App>,
    read: OwnedReadHalf,
    write: OwnedWriteHalf,
    actor: &str,
) {
    let store = app.store.clone();
    let stream = read
        .reunite(write)
        .map_err(std::io::Error::other)
        .and_then(|s| s.into_std());
    let done = tokio::task::spawn_blocking(move || -> Result<Summary, Failed> {
        let stream = stream.map_err(Failed::Socket)?;
        stream
            .set_nonblocking(false)
            .and_then(|()| stream.set_write_timeout(Some(WRITE_TIMEOUT)))
            .map_err(Failed::Socket)?;
        let mut out = BufWriter::with_capacity(1 << 16, stream);
        let snapshot = store.backups().ok_or(BackupError::Postgres);
        let snapshot = match snapshot.and_then(|b| b.snapshot()) {
            Ok(s) => s,
            Err(e) => {
                answer_line(
                    &mut out,
                    &Answer::Err(crate::display::Causes(&e).to_string()),
                )?;
                out.flush().map_err(Failed::Socket)?;
                return Err(e.into());
            }
        };
        answer_line(&mut out, &Answer::Ok(Reply::Backup))?;
        Ok(snapshot.write_to(&mut out, now())?)
    })
    .await;
    match done {
        Ok(Ok(summary)) => tracing::info!(
            target: "audit",
            actor,
            action = "backup",
            records = summary.records,
            bytes = summary.bytes,
            "admin backup"
        ),
        Ok(Err(e)) => tracing::error!(
            actor,
            error = crate::display::Causes(&e).to_string(),
            "a backup through the admin socket failed"
        ),
        Err(e) => tracing::error!(
            actor,
            error = crate::display::Causes(&e).to_string(),
            "the backup task failed"
        ),
    }
}
