//! Authenticating a client issued by a vendor (`docs/clients.md`): its secret is checked against
//! the Argon2id hashes of its statements that are still valid (two in a rotation's overlap), on
//! the password checker's bounded pool; a secret that matched once is remembered as its keyed
//! hash, so later requests cost what a local client's do. A pending client with the right secret
//! is told it awaits activation; an expired or revoked one is refused like a wrong secret.

use super::{ApiError, App};
use crate::store::ClientRecord;
use crate::vendor::Trust;
use shared::grant::Impersonation;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use zeroize::Zeroizing;

/// Most secrets remembered; the memory is emptied when full.
const MAX_REMEMBERED: usize = 10_000;

mod registration;
mod watch;

/// Seconds an issuer holds a client's expiry lease: longer than a deactivation takes, so no
/// other issuer finds the client still active and deactivates it again; if the taker stops
/// before it is done, another deactivates the client when the lease runs out.
pub const EXPIRY_LEASE: u64 = 60;

/// Secrets that matched a statement's hash: (client id, PHC string) → keyed hash of the secret.
type Remembered = HashMap<(String, String), [u8; 32]>;

/// What the app keeps for vendors' clients: the trusted vendors (replaced by a reload), whether
/// clients may register themselves, the registrations' budget per address, and the secrets
/// that matched.
#[derive(Default)]
pub(super) struct VendorState {
    trust: RwLock<Arc<Trust>>,
    registration: AtomicBool,
    registrations: registration::Budget,
    secrets: Mutex<Remembered>,
    watched: watch::Seen,
    /// Woken by a change of the clients made through this issuer, for the expiry timer.
    changed: tokio::sync::Notify,
    /// Woken when the trusted vendors change, for the watcher of the revocation files.
    trust_changed: tokio::sync::Notify,
}

impl App {
    /// Trusts `trust`'s vendors from now on (at start, and at each reload), and lets clients
    /// register themselves (`POST /apiv2/oauth/register`) or not.
    pub fn set_vendors(&self, trust: Trust, registration: bool) {
        *self.vendor.trust.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(trust);
        self.vendor
            .registration
            .store(registration, Ordering::Relaxed);
        self.vendor.trust_changed.notify_one();
    }

    /// The folders of the revocation files the trusted vendors name, each once.
    pub fn revocation_folders(&self) -> Vec<std::path::PathBuf> {
        let mut folders: Vec<_> = (self.trust().revocation_files().iter())
            .filter_map(|(_, file)| file.parent().map(std::path::Path::to_path_buf))
            .collect();
        folders.sort();
        folders.dedup();
        folders
    }

    /// Completes when the trusted vendors change (a reload).
    pub async fn vendors_changed(&self) {
        self.vendor.trust_changed.notified().await;
    }

    /// Deactivates, at `now`, the vendors' clients whose every statement has expired, revoking
    /// their tokens, each change audited (actor `statement expiry`); how many. Of several
    /// issuers on one PostgreSQL database, the one that takes a client's expiry lease
    /// ([`EXPIRY_LEASE`]) deactivates it, so each expiry is made and audited once.
    pub async fn expire_vendor_clients(&self, now: u64) -> Result<usize, crate::admin::AdminError> {
        let expired: Vec<(String, u64)> = self
            .store
            .clients()
            .await?
            .into_iter()
            .filter(|(_, c)| c.active)
            .filter_map(|(id, c)| Some((id, c.vendor?.expires_at())))
            .filter(|(_, exp)| *exp <= now)
            .collect();
        let mut done = 0;
        for (id, exp) in &expired {
            let lease = format!("vendor-expiry:{exp}:{id}");
            if !self
                .password
                .throttle
                .try_lease(&lease, now, EXPIRY_LEASE)
                .await?
            {
                continue;
            }
            let cmd = crate::admin::Command::ClientDeactivate { id: id.clone() };
            crate::admin::execute_as(self.store.as_ref(), &cmd, now, "statement expiry").await?;
            tracing::info!(
                client = id.as_str(),
                "statement expired: client deactivated"
            );
            done += 1;
        }
        if done > 0 {
            self.clients_changed();
            self.reload_revocations().await;
        }
        Ok(done)
    }

    /// The second the next of the active vendors' clients expires at, after `now`: when the
    /// expiry timer deactivates it.
    pub async fn next_vendor_expiry(
        &self,
        now: u64,
    ) -> Result<Option<u64>, crate::store::StoreError> {
        Ok(self
            .store
            .clients()
            .await?
            .into_iter()
            .filter_map(|(_, c)| c.active.then_some(c.vendor?.expires_at()))
            .filter(|&exp| exp > now)
            .min())
    }

    /// Waits `most` at most, or until the clients change through this issuer (the statement
    /// imported may expire sooner than the timer is set for).
    pub async fn vendor_clients_changed_within(&self, most: std::time::Duration) {
        let _ = tokio::time::timeout(most, self.vendor.changed.notified()).await;
    }

    pub(super) fn wake_expiry_timer(&self) {
        self.vendor.changed.notify_one();
    }

    /// The metadata document `doc` with `registration_endpoint` while registration is on.
    pub(super) fn with_registration(&self, mut doc: serde_json::Value) -> serde_json::Value {
        if self.vendor.registration.load(Ordering::Relaxed) {
            let base = self.settings.public_url.trim_end_matches('/');
            doc["registration_endpoint"] = format!("{base}/apiv2/oauth/register").into();
        }
        doc
    }

    pub(crate) fn trust(&self) -> Arc<Trust> {
        self.vendor
            .trust
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// `None` for a local client; else whether `secret` is the secret of one of the vendor's
    /// client `rec`'s statements valid at `now`.
    pub(super) async fn vendor_secret_ok(
        &self,
        id: &str,
        rec: Option<&ClientRecord>,
        secret: &str,
        now: u64,
    ) -> Option<bool> {
        let v = rec?.vendor.as_deref()?;
        let hash_key = self.store.hash_key();
        let keyed = hash_key.client_secret_hash(id, secret);
        let hashes: Vec<String> = v.secret_hashes(now).map(str::to_owned).collect();
        {
            let known = self
                .vendor
                .secrets
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let remembered = |h: &String| known.get(&(id.to_owned(), h.clone())).copied();
            if hashes
                .iter()
                .filter_map(remembered)
                .any(|k| hash_key.client_secret_matches(id, secret, &k))
            {
                return Some(true);
            }
        }
        for hash in hashes {
            let checked = self
                .password
                .passwords
                .check(Zeroizing::new(secret.to_owned()), Some(hash.clone()))
                .await;
            if checked.is_right() {
                let mut known = self
                    .vendor
                    .secrets
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                if known.len() >= MAX_REMEMBERED {
                    known.clear();
                }
                known.insert((id.to_owned(), hash), keyed);
                return Some(true);
            }
        }
        Some(false)
    }
}

/// Whether `rec` may have tokens at `now`: active, and for a vendor's client its statements
/// valid (not pending, revoked or expired).
pub(super) fn may_have_tokens(rec: Option<&ClientRecord>, now: u64) -> bool {
    rec.is_some_and(|c| c.active && c.vendor.as_ref().is_none_or(|v| v.valid_at(now)))
}

/// The answer to a pending client with the right secret.
pub(super) fn awaits_activation() -> ApiError {
    ApiError::unauthorized_client("this client awaits activation by the administrator")
}

/// Whether `rec` is a vendor's client awaiting activation.
pub(super) fn pending(rec: Option<&ClientRecord>) -> bool {
    rec.and_then(|c| c.vendor.as_ref())
        .is_some_and(|v| v.pending && !v.revoked)
}

/// Refuses the obsolete `impersonate_as` and `roles` of a vendor's client whose statement
/// allows `impersonate_claims` only.
pub(super) fn check_legacy(rec: &ClientRecord, imp: &Impersonation) -> Result<(), ApiError> {
    let claims_only = rec
        .vendor
        .as_ref()
        .is_some_and(|v| v.impersonation == crate::vendor::Impersonation::Claims);
    if claims_only && matches!(imp, Impersonation::Legacy { .. }) {
        return Err(ApiError::unauthorized_client(
            "this client may impersonate with impersonate_claims only",
        ));
    }
    Ok(())
}
