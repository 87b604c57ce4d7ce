//! What a client issued by a vendor keeps of its software statements ([`VendorClient`], the
//! `vendor` of a [`ClientRecord`]), and the backend-neutral rules of its life: a statement
//! admitted as a new pending client, the same statement again (nothing changes), a newer one for
//! the same client id (a rotated secret: both secrets work until the older statement expires),
//! activation with at most what the statement allows, and a vendor's revocation.
//!
//! The records are JSON in both backends (`clients.record`), and the field is absent from the
//! records of local clients, so no migration is needed: older records read as local clients.

use super::accounts::{ClientRecord, DpopPolicy, GrantKind};
use crate::vendor::{Impersonation, Refusal, VendorGrant, Verified};
use serde::{Deserialize, Serialize};

/// Most statements (secrets) a client keeps at once; an older one beyond is dropped.
pub const MAX_SECRETS: usize = 4;

/// One statement's secret: its hash and life.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatementSecret {
    /// The Argon2id PHC string of the secret.
    pub hash: String,
    /// The statement's `iat`.
    pub iat: u64,
    /// The statement's `exp`: the secret works until then.
    pub exp: u64,
    /// SHA-256 of the statement's text (hex): the same statement again is no change.
    pub digest: String,
}

/// What the vendor's statements say of a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VendorClient {
    /// The trusted vendor's name (its `[[vendor]]` table).
    pub vendor: String,
    /// The application's name.
    pub client_name: String,
    /// The software's id.
    pub software_id: String,
    /// The grants the newest statement allows.
    pub grants: Vec<VendorGrant>,
    /// The impersonation the newest statement allows.
    pub impersonation: Impersonation,
    /// Imported, not yet activated by an administrator.
    pub pending: bool,
    /// The vendor revoked it: it stays inactive, and its statements are refused.
    #[serde(default)]
    pub revoked: bool,
    /// The statements' secrets, oldest first.
    pub secrets: Vec<StatementSecret>,
}

/// What to do with a statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// A new client, pending.
    New(Box<ClientRecord>),
    /// This statement is held already: nothing changes.
    Same,
    /// A newer statement of a known client: its new facts.
    Rotated(Box<VendorClient>),
}

impl VendorClient {
    /// The last second any of its statements is valid.
    pub fn expires_at(&self) -> u64 {
        self.secrets.iter().map(|s| s.exp).max().unwrap_or(0)
    }

    /// The hashes of the secrets that work at `now`.
    pub fn secret_hashes(&self, now: u64) -> impl Iterator<Item = &str> {
        self.secrets
            .iter()
            .filter(move |s| s.exp > now)
            .map(|s| s.hash.as_str())
    }

    /// Whether its statements let it have tokens at `now` (activation aside).
    pub fn valid_at(&self, now: u64) -> bool {
        !self.pending && !self.revoked && self.expires_at() > now
    }

    /// The product's grants of statement grants (`refresh_token` comes with `password`).
    pub fn grant_kinds(grants: &[VendorGrant]) -> Vec<GrantKind> {
        let mut out = Vec::new();
        for g in grants {
            let kind = match g {
                VendorGrant::Password => GrantKind::Password,
                VendorGrant::ClientCredentials => GrantKind::ClientCredentials,
                VendorGrant::RefreshToken => continue,
            };
            if !out.contains(&kind) {
                out.push(kind);
            }
        }
        out
    }

    /// Whether `grants` are within what the statement allows.
    pub fn allows(&self, grants: &[GrantKind]) -> bool {
        let allowed = Self::grant_kinds(&self.grants);
        grants.iter().all(|g| allowed.contains(g))
    }
}

/// What the store should do with the verified statement `v` (whose text hashes to `digest`) for
/// the client `existing` holds under its id, at `now`.
pub fn admit(
    existing: Option<&ClientRecord>,
    v: &Verified,
    digest: &str,
    now: u64,
) -> Result<Admission, Refusal> {
    let s = &v.statement;
    let secret = StatementSecret {
        hash: s.client_secret_hash.clone(),
        iat: s.iat,
        exp: s.exp,
        digest: digest.to_owned(),
    };
    let Some(rec) = existing else {
        let facts = VendorClient {
            vendor: v.vendor.clone(),
            client_name: s.client_name.clone(),
            software_id: s.software_id.clone(),
            grants: s.grant_types.clone(),
            impersonation: s.impersonation,
            pending: true,
            revoked: false,
            secrets: vec![secret],
        };
        return Ok(Admission::New(Box::new(pending_record(facts, now))));
    };
    let Some(held) = rec.vendor.as_deref().filter(|h| h.vendor == v.vendor) else {
        return Err(Refusal::Taken);
    };
    if held.revoked {
        return Err(Refusal::Revoked);
    }
    if held.secrets.iter().any(|h| h.digest == digest) {
        return Ok(Admission::Same);
    }
    if held.secrets.iter().any(|h| h.iat > s.iat) {
        return Err(Refusal::Claim(
            "iat (older than a statement held for this client)",
        ));
    }
    let mut next = held.clone();
    next.secrets.retain(|h| h.exp > now);
    next.secrets.push(secret);
    let extra = next.secrets.len().saturating_sub(MAX_SECRETS);
    next.secrets.drain(..extra);
    next.client_name.clone_from(&s.client_name);
    next.software_id.clone_from(&s.software_id);
    next.grants.clone_from(&s.grant_types);
    next.impersonation = s.impersonation;
    Ok(Admission::Rotated(Box::new(next)))
}

/// A new client of a statement: pending, inactive, with no keyed secret hash (its secret is
/// checked against the statement's hashes) and the most the statement allows, to be narrowed at
/// activation.
fn pending_record(facts: VendorClient, now: u64) -> ClientRecord {
    ClientRecord {
        secret_hash: String::new(),
        active: false,
        grants: VendorClient::grant_kinds(&facts.grants),
        impersonate: facts.impersonation != Impersonation::None,
        impersonate_claim_types: Vec::new(),
        edge: false,
        dpop: DpopPolicy::Allowed,
        created_at: now,
        deactivated_at: None,
        vendor: Some(Box::new(facts)),
        exchange: None,
    }
}

/// A record revoked by its vendor before this installation saw a statement of it: it keeps the
/// id, so the statement is refused when it comes.
pub fn revoked_placeholder(vendor: &str, now: u64) -> ClientRecord {
    let mut rec = pending_record(
        VendorClient {
            vendor: vendor.to_owned(),
            client_name: String::new(),
            software_id: String::new(),
            grants: Vec::new(),
            impersonation: Impersonation::None,
            pending: false,
            revoked: true,
            secrets: Vec::new(),
        },
        now,
    );
    rec.impersonate = false;
    rec
}

#[cfg(test)]
mod tests;
