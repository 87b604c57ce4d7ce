//! A vendor's revocation list: the JWS `issuer vendor revoke` prints, naming client ids whose
//! statements the vendor takes back. An installation that imports it deactivates those of its
//! clients the same vendor vouched for, and refuses their statements from then on.

use super::jws::{self, REVOCATIONS_TYP};
use super::{Refusal, Trust};
use serde::{Deserialize, Serialize};
use shared::dpop::sign::ProofKey;

/// Most client ids in one list.
pub const MAX_CLIENTS: usize = 1000;

/// The claims of a revocation list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevocationList {
    /// The client ids revoked.
    pub revoked_client_ids: Vec<String>,
    /// When it was made, seconds since the epoch.
    pub iat: u64,
}

/// A revocation list checked: the vendor that signed it, and its claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedRevocations {
    /// The trusted vendor's name.
    pub vendor: String,
    /// The claims.
    pub list: RevocationList,
}

impl RevocationList {
    /// Signs the list under the vendor's `key`.
    pub fn sign(&self, key: &ProofKey) -> String {
        let claims = serde_json::to_value(self).unwrap_or_default();
        jws::sign(key, REVOCATIONS_TYP, &claims)
    }
}

/// Checks a revocation list (`jws`) against the trusted vendors at `now`.
pub fn verify(jws: &str, trust: &Trust, now: u64) -> Result<VerifiedRevocations, Refusal> {
    let signed = jws::verify(jws, REVOCATIONS_TYP, trust)?;
    let list: RevocationList =
        serde_json::from_value(signed.claims).map_err(|_| Refusal::Claim("the claims' set"))?;
    let ids = &list.revoked_client_ids;
    if ids.is_empty() || ids.len() > MAX_CLIENTS {
        return Err(Refusal::Claim("revoked_client_ids"));
    }
    if !ids.iter().all(|id| shared::rules::client_id_ok(id)) {
        return Err(Refusal::Claim("revoked_client_ids"));
    }
    if list.iat > now + super::statement::CLOCK_SKEW {
        return Err(Refusal::Claim("iat"));
    }
    Ok(VerifiedRevocations {
        vendor: signed.vendor,
        list,
    })
}

/// Whether `jws` is a revocation list by its header's `typ` (unverified: only to choose which
/// check to run on a file).
pub fn looks_like_revocations(jws: &str) -> bool {
    use base64::Engine as _;
    let header = jws.trim().split('.').next().unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(header)
        .ok()
        .and_then(|h| serde_json::from_slice::<serde_json::Value>(&h).ok())
        .is_some_and(|h| h.get("typ").and_then(|t| t.as_str()) == Some(REVOCATIONS_TYP))
}
