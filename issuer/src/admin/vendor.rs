//! Clients issued by a vendor (`docs/clients.md`): a verified software statement imported
//! (pending, the same one again, or a rotated secret), a vendor's revocation list applied,
//! activation within what the statement allows, and the audit record of a refused statement.
//! The statement's signature is checked before any of this, against the trusted vendors
//! (`crate::vendor`); what is checked here needs the store.

use super::audit::{record, view, Subject};
use super::{clients, conflict, found, invalid, not_found, AdminError, Command};
use crate::store::vendor::{admit, revoked_placeholder, Admission};
use crate::store::{AuditAction, AuditEvent, ClientChange, GrantKind, Store};
use crate::vendor::{Impersonation, Refusal, Statement, Verified};
use serde::{Deserialize, Serialize};

/// A statement whose signature verified, as it crosses the admin socket.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VendorImport {
    /// The trusted vendor's name.
    pub vendor: String,
    /// The key's `kid`.
    pub kid: String,
    /// The claims.
    pub statement: Statement,
    /// SHA-256 of the statement's text, hex.
    pub digest: String,
}

impl VendorImport {
    /// The import of `verified`, whose text is `jws`.
    pub fn of(verified: Verified, jws: &str) -> Self {
        use sha2::Digest as _;
        Self {
            vendor: verified.vendor,
            kid: verified.kid,
            statement: verified.statement,
            digest: hex::encode(sha2::Sha256::digest(jws.trim().as_bytes())),
        }
    }
}

/// A vendor's client as `client list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VendorView {
    /// The vendor's name.
    pub vendor: String,
    /// The application's name.
    pub client_name: String,
    /// The software's id.
    pub software_id: String,
    /// The grants its statement allows.
    pub grants: Vec<crate::vendor::VendorGrant>,
    /// The impersonation its statement allows.
    pub impersonation: Impersonation,
    /// Awaits activation.
    pub pending: bool,
    /// Revoked by its vendor.
    pub revoked: bool,
    /// When its newest statement expires, seconds since the epoch.
    pub expires_at: u64,
    /// When its newest statement was issued (`iat`), seconds since the epoch.
    #[serde(default)]
    pub issued_at: u64,
}

impl VendorView {
    /// The view of `v`.
    pub fn of(v: &crate::store::vendor::VendorClient) -> Self {
        Self {
            vendor: v.vendor.clone(),
            client_name: v.client_name.clone(),
            software_id: v.software_id.clone(),
            grants: v.grants.clone(),
            impersonation: v.impersonation,
            pending: v.pending,
            revoked: v.revoked,
            expires_at: v.expires_at(),
            issued_at: v.secrets.iter().map(|s| s.iat).max().unwrap_or(0),
        }
    }
}

/// What an import did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Imported {
    /// A new pending client.
    Pending,
    /// The same statement was held already.
    Unchanged,
    /// A newer statement of a known client: its secret rotated.
    Rotated,
}

/// Imports a verified statement at `now`; a statement refused here (its id taken, revoked) is
/// an [`AdminError::Vendor`], and audited by the caller ([`refusal`]).
pub async fn import(store: &dyn Store, i: &VendorImport, now: u64) -> Result<Imported, AdminError> {
    let id = &i.statement.client_id;
    let verified = Verified {
        vendor: i.vendor.clone(),
        kid: i.kid.clone(),
        statement: i.statement.clone(),
    };
    let existing = store.client(id).await?;
    match admit(existing.as_ref(), &verified, &i.digest, now).map_err(AdminError::Vendor)? {
        Admission::New(rec) => {
            if !store.add_client(id, &rec).await? {
                return conflict(format!("client {id:?} was added meanwhile: import again"));
            }
            Ok(Imported::Pending)
        }
        Admission::Same => Ok(Imported::Unchanged),
        Admission::Rotated(next) => {
            let change = ClientChange::Restate(next);
            found(store.update_client(id, change, now).await?, "client", id)?;
            Ok(Imported::Rotated)
        }
    }
}

/// The text of an import's reply.
pub fn import_text(id: &str, imported: Imported) -> String {
    match imported {
        Imported::Pending => {
            format!("client {id} imported, pending until `issuer client activate {id}`\n")
        }
        Imported::Unchanged => format!("client {id}: this statement is held already\n"),
        Imported::Rotated => format!(
            "client {id}: newer statement imported (the older secret works until it expires)\n"
        ),
    }
}

/// Applies `vendor`'s revocation of `ids` at `now`, each client's change audited by `actor`:
/// its clients deactivated for good and their tokens revoked; an id this installation does
/// not know is kept as revoked, so its statement is refused when it comes. Another vendor's
/// or a local client is left alone.
pub async fn revoke(
    store: &dyn Store,
    vendor: &str,
    ids: &[String],
    now: u64,
    actor: &str,
) -> Result<String, AdminError> {
    let mut out = String::new();
    for id in ids {
        let before = view(store, &Subject::Client(id.clone()), now).await?;
        let line = match store.client(id).await? {
            None => {
                store
                    .add_client(id, &revoked_placeholder(vendor, now))
                    .await?;
                format!("client {id}: not here; its statements will be refused\n")
            }
            Some(c) if c.vendor.as_ref().is_some_and(|v| v.vendor == vendor) => {
                found(
                    store
                        .update_client(id, ClientChange::VendorRevoke, now)
                        .await?,
                    "client",
                    id,
                )?;
                format!("client {id} revoked by its vendor: deactivated, its tokens revoked\n")
            }
            Some(_) => {
                out += &format!("client {id}: not issued by {vendor:?}, left as it is\n");
                continue;
            }
        };
        let subject = (AuditAction::VendorRevoke, Subject::Client(id.clone()));
        let by = super::Actor {
            name: actor,
            client: None,
            address: None,
        };
        record(store, &by, subject, before, now).await?;
        out += &line;
    }
    Ok(out)
}

/// Activates the vendor's client `id` at `now` with `grants` (all its statement allows when
/// `None`) and impersonation unless `no_impersonation`: never more than the statement allows.
pub async fn activate(
    store: &dyn Store,
    id: &str,
    grants: Option<&[GrantKind]>,
    no_impersonation: bool,
    now: u64,
) -> Result<String, AdminError> {
    let Some(rec) = store.client(id).await? else {
        return not_found(format!("no client named {id:?}"));
    };
    let Some(v) = rec.vendor.as_deref() else {
        return conflict(format!(
            "client {id:?} is not a vendor's: --grants and --no-impersonation narrow a vendor's \
             client (a local client's access is set by `issuer apply`)"
        ));
    };
    if v.revoked {
        return conflict(format!("client {id:?} was revoked by its vendor"));
    }
    if v.expires_at() <= now {
        return conflict(format!(
            "client {id:?}: its statement has expired; ask the vendor for a new one"
        ));
    }
    let allowed = crate::store::vendor::VendorClient::grant_kinds(&v.grants);
    let grants = grants.map_or(allowed.clone(), <[GrantKind]>::to_vec);
    if !v.allows(&grants) {
        return invalid(format!(
            "client {id:?}: its statement allows only {allowed:?}; activation narrows, never widens"
        ));
    }
    let impersonate = v.impersonation != Impersonation::None && !no_impersonation;
    let change = ClientChange::ActivateVendor {
        grants,
        impersonate,
    };
    found(store.update_client(id, change, now).await?, "client", id)?;
    Ok(format!("client {id} activated\n"))
}

/// Records a refused statement or revocation list for `target` (a client id, or the vendor's
/// name when none is known) in the audit trail: its RFC 7591 error and why.
pub async fn refusal(
    store: &dyn Store,
    target: &str,
    error: &str,
    description: &str,
    now: u64,
    actor: &str,
) -> Result<(), AdminError> {
    let after = serde_json::json!({ "error": error, "error_description": description });
    let event = AuditEvent::new(
        now,
        actor,
        AuditAction::VendorRefusal,
        target,
        serde_json::Value::Null,
        after,
    );
    Ok(store.record_audit(vec![event.encode()]).await?)
}

/// Runs a command of a vendor's client: activation (a local client's too), import, revocation
/// list, refusal; the text of its reply.
pub(super) async fn run(
    store: &dyn Store,
    cmd: &Command,
    now: u64,
    actor: &str,
) -> Result<String, AdminError> {
    match cmd {
        Command::ClientActivate {
            id,
            grants: None,
            no_impersonation: false,
        } if !is_vendors(store, id).await? => clients::set_active(store, id, true, now).await,
        Command::ClientActivate {
            id,
            grants,
            no_impersonation,
        } => activate(store, id, grants.as_deref(), *no_impersonation, now).await,
        Command::ClientImport(i) => {
            let done = import(store, i, now).await?;
            Ok(import_text(&i.statement.client_id, done))
        }
        Command::ClientVendorRevoke { vendor, ids } => revoke(store, vendor, ids, now, actor).await,
        Command::VendorRefused {
            target,
            error,
            description,
        } => {
            refusal(store, target, error, description, now, actor).await?;
            Ok(format!("refused ({error}): {description}\n"))
        }
        _ => invalid("not a command of a vendor's client".into()),
    }
}

/// Refuses a change of what a vendor's client `id` may do (`issuer apply`) beyond what its
/// statement allows: its grants and impersonation are narrowed, never widened.
pub(super) async fn within_statement(
    store: &dyn Store,
    id: &str,
    change: &ClientChange,
) -> Result<(), AdminError> {
    let ClientChange::SetAccess {
        grants,
        impersonate,
        ..
    } = change
    else {
        return Ok(());
    };
    let rec = store.client(id).await?;
    let Some(v) = rec.as_ref().and_then(|c| c.vendor.as_deref()) else {
        return Ok(());
    };
    if !v.allows(grants) || (*impersonate && v.impersonation == Impersonation::None) {
        return invalid(format!(
            "client {id:?} is a vendor's: its statement allows less; a change narrows, never widens"
        ));
    }
    Ok(())
}

/// Whether `id` is a vendor's client.
pub async fn is_vendors(store: &dyn Store, id: &str) -> Result<bool, AdminError> {
    Ok(store.client(id).await?.is_some_and(|c| c.vendor.is_some()))
}

/// A refusal's RFC 7591 error and description.
pub fn describe(r: &Refusal) -> (&'static str, String) {
    (r.error_code(), r.to_string())
}
