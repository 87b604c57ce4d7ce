//! The watcher of the vendors' revocation files (`revocations` in a `[[vendor]]` table,
//! `docs/clients.md`): the folders holding them are watched (inotify, through `notify`), and a
//! change in one is applied once the folder has been quiet for [`SETTLE`], so a list is read
//! whole and not while it is being written. The folders are watched anew when the trusted
//! vendors change (SIGHUP). The sweep still reads the files each minute, for file systems that
//! report no changes (NFS and other network mounts).

use crate::app::{now, App};
use notify::{RecursiveMode, Watcher as _};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// How long a folder must be quiet after a change before its files are read.
const SETTLE: Duration = Duration::from_millis(100);

/// Watches the folders of the revocation files for as long as the issuer serves.
pub async fn watch_revocation_files_forever(app: Arc<App>) {
    loop {
        let folders = app.revocation_folders();
        let (tx, mut rx) = mpsc::channel::<()>(1);
        let watcher = (!folders.is_empty()).then(|| watch(&folders, tx)).flatten();
        loop {
            tokio::select! {
                () = app.vendors_changed() => break,
                changed = rx.recv(), if watcher.is_some() => {
                    if changed.is_none() {
                        break;
                    }
                    // Until the folder is quiet: a list written in several steps is read whole.
                    while let Ok(Some(())) = tokio::time::timeout(SETTLE, rx.recv()).await {}
                    app.apply_revocation_files(now()).await;
                }
            }
        }
        drop(watcher);
    }
}

/// A watcher of `folders` that signals `tx` at each change in them; `None` (logged) if the
/// system refuses to watch.
fn watch(
    folders: &[std::path::PathBuf],
    tx: mpsc::Sender<()>,
) -> Option<notify::RecommendedWatcher> {
    let signal = move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !e.kind.is_access()) {
            // Full: a read is due already.
            let _ = tx.try_send(());
        }
    };
    let mut watcher = match notify::recommended_watcher(signal) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the revocation files; read each minute");
            return None;
        }
    };
    for folder in folders {
        if let Err(e) = watcher.watch(folder, RecursiveMode::NonRecursive) {
            tracing::warn!(folder = %folder.display(), error = %e,
                "cannot watch a revocation file's folder; read each minute");
        }
    }
    Some(watcher)
}
