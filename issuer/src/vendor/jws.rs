//! The compact JWS both of a vendor's documents are (a software statement, a revocation list):
//! bounded in size, its header checked before anything else (`alg` one of the two asymmetric
//! algorithms, never `none` or an HMAC; `typ` the document's own, so one kind is never taken for
//! the other; `kid` a trusted key), the signature checked before the claims are read.

use super::keys::VendorKey;
use super::{Refusal, Trust};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::Value;
use shared::dpop::sign::ProofKey;

/// Longest document accepted, in bytes: a statement is well under 2 KiB; a revocation list of a
/// few hundred clients fits.
pub const MAX_LEN: usize = 64 * 1024;

/// The `typ` of a software statement.
pub const STATEMENT_TYP: &str = "mms-software-statement+jwt";
/// The `typ` of a revocation list.
pub const REVOCATIONS_TYP: &str = "mms-vendor-revocations+jwt";

/// A document whose signature verified: the vendor and key that signed it, and its claims.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The trusted vendor's name (its `[[vendor]]` table).
    pub vendor: String,
    /// The key's `kid`.
    pub kid: String,
    /// The claims, as JSON.
    pub claims: Value,
}

fn part(text: &str) -> Result<Vec<u8>, Refusal> {
    URL_SAFE_NO_PAD
        .decode(text)
        .map_err(|_| Refusal::Malformed("a part is not unpadded base64url"))
}

/// Checks `jws`, a document of type `typ`, against `trust`, and returns its claims.
pub fn verify(jws: &str, typ: &str, trust: &Trust) -> Result<Signed, Refusal> {
    let jws = jws.trim();
    if jws.len() > MAX_LEN {
        return Err(Refusal::TooLarge);
    }
    let mut parts = jws.split('.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed("not a compact JWS (three parts)"));
    };
    let header: Value = serde_json::from_slice(&part(h)?)
        .map_err(|_| Refusal::Malformed("the header is not JSON"))?;
    let text = |name: &str| header.get(name).and_then(Value::as_str);
    let alg = text("alg").unwrap_or_default();
    if !matches!(alg, "EdDSA" | "ES256") {
        return Err(Refusal::Algorithm(alg.chars().take(16).collect()));
    }
    if header.get("crit").is_some() || header.get("jwk").is_some() || header.get("jku").is_some() {
        return Err(Refusal::Malformed(
            "the header names a key or extension itself (`jwk`, `jku`, `crit`)",
        ));
    }
    if text("typ") != Some(typ) {
        return Err(Refusal::Type);
    }
    let kid = text("kid").ok_or(Refusal::Malformed("the header has no `kid`"))?;
    let (vendor, key) = trust.key(kid).ok_or(Refusal::Untrusted)?;
    if key.alg() != alg {
        return Err(Refusal::Algorithm(alg.to_owned()));
    }
    let signed = &jws[..h.len() + 1 + c.len()];
    if !key.verifies(signed.as_bytes(), &part(s)?) {
        return Err(Refusal::Signature);
    }
    let claims: Value = serde_json::from_slice(&part(c)?)
        .map_err(|_| Refusal::Malformed("the claims are not JSON"))?;
    if !claims.is_object() {
        return Err(Refusal::Malformed("the claims are not a JSON object"));
    }
    Ok(Signed {
        vendor: vendor.to_owned(),
        kid: key.kid.clone(),
        claims,
    })
}

/// Signs `claims` as a document of type `typ` under `key`.
pub fn sign(key: &ProofKey, typ: &str, claims: &Value) -> String {
    let header = serde_json::json!({
        "alg": key.alg(),
        "typ": typ,
        "kid": super::keys::kid_of(key),
    });
    key.sign_parts(&header.to_string(), &claims.to_string())
}

/// Whether a key is in `keys` (for [`Trust`]).
pub(super) fn find<'a>(keys: &'a [VendorKey], kid: &str) -> Option<&'a VendorKey> {
    keys.iter().find(|k| k.kid == kid)
}
