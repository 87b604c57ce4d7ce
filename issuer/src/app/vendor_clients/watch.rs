//! The revocation lists of the files a `[[vendor]]` table's `revocations` names: read when the
//! watcher of their folders sees a change (`crate::server::watch_revocation_files_forever`), at
//! SIGHUP and each minute (with the sweep), and applied when the file changed, as
//! `issuer client import LIST` applies one (the admin command, audited by `revocation file`).
//! A list not signed by that vendor's key is refused and audited once per content.

use super::super::App;
use crate::admin::{describe_refusal, execute_as, Command};
use crate::vendor::revocations;
use sha2::Digest as _;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

/// The digest of each watched file's content last seen.
#[derive(Default)]
pub(in crate::app) struct Seen(Mutex<HashMap<PathBuf, [u8; 32]>>);

/// The actor of the changes a watched file makes.
const ACTOR: &str = "revocation file";

impl App {
    /// Applies, at `now`, the revocation lists of the watched files that changed since last
    /// read; how many were applied.
    pub async fn apply_revocation_files(&self, now: u64) -> usize {
        let trust = self.trust();
        let mut applied = 0;
        for (vendor, path) in trust.revocation_files() {
            let Ok(text) = tokio::fs::read_to_string(path).await else {
                continue;
            };
            if text.len() > crate::vendor::jws::MAX_LEN {
                tracing::warn!(file = %path.display(), "revocation file too large; ignored");
                continue;
            }
            let digest: [u8; 32] = sha2::Sha256::digest(text.trim().as_bytes()).into();
            let seen = |map: &HashMap<PathBuf, [u8; 32]>| map.get(path) == Some(&digest);
            if seen(
                &self
                    .vendor
                    .watched
                    .0
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()),
            ) {
                continue;
            }
            let cmd = match revocations::verify(&text, &trust, now) {
                Ok(v) if &v.vendor == vendor => Command::ClientVendorRevoke {
                    vendor: v.vendor,
                    ids: v.list.revoked_client_ids,
                },
                Ok(_) => refused(vendor, "signed by another vendor's key"),
                Err(r) => refused(vendor, &describe_refusal(&r).1),
            };
            let revoking = matches!(cmd, Command::ClientVendorRevoke { .. });
            match execute_as(self.store.as_ref(), &cmd, now, ACTOR).await {
                Ok(_) => {
                    let mut map = self
                        .vendor
                        .watched
                        .0
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    map.insert(path.clone(), digest);
                    applied += usize::from(revoking);
                    tracing::info!(file = %path.display(), vendor, revoking, "revocation file read");
                }
                Err(e) => tracing::error!(error = e.to_string(), "revocation file not applied"),
            }
        }
        if applied > 0 {
            self.clients_changed();
            self.reload_revocations().await;
        }
        applied
    }
}

/// The audit record of a refused list of `vendor`'s file.
fn refused(vendor: &str, why: &str) -> Command {
    Command::VendorRefused {
        target: format!("revocation file of {vendor}"),
        error: "invalid_software_statement".into(),
        description: why.to_owned(),
    }
}
