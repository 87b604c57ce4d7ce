//! DPoP proofs (RFC 9449): checking a proof as section 4.3 says, the key thumbprint a bound
//! token is confirmed with (RFC 7638), and stateless server nonces (section 8). The choices made
//! here (sizes, algorithms, clock window, nonce construction) are in `docs/token-format.md`.
//!
//! Pure like the rest of the crate: the time is passed in, and the `jti` replay cache is the
//! caller's (it keeps each accepted [`Proof::jti`] for the window on either side of its `iat`).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

pub mod der;
mod htu;
mod jwk;
mod nonce;
pub mod replay;
#[cfg(feature = "sign")]
pub mod sign;
#[cfg(test)]
mod tests;

pub use jwk::jkt;
pub use nonce::{nonce_for, nonce_ok, NONCE_LEN};

use crate::key::KeyRing;
use jwk::PublicJwk;

/// Longest proof accepted, in bytes; longer input is refused before any decoding.
pub const MAX_PROOF_LEN: usize = 8192;
/// Longest `jti` accepted, in bytes.
pub const MAX_JTI_LEN: usize = 128;
/// Longest `nonce` accepted, in bytes.
pub const MAX_NONCE_LEN: usize = 256;
/// The nonce slot length every issuer and edge uses (seconds): a nonce is good for one to two
/// slots ([`nonce_ok`]). A constant, so that no two configurations can disagree about it.
pub const NONCE_SLOT_SECONDS: u64 = 60;
/// The largest clock window a caller may ask for, in seconds.
pub const MAX_WINDOW: u64 = 600;
/// The most a proof's `iat` may be ahead of now, in seconds, whatever the window: a clock a
/// little fast passes, and a proof dated ahead is held by a replay memory barely longer than
/// one made now ([`replay`]).
pub const MAX_AHEAD_SECONDS: u64 = 2;

/// A verifier of ES256 signatures other than the crate's own: a host's crypto library (the Wasm
/// filter asks Envoy's BoringSSL through `verify_signature`, its adapter implements this). Asked
/// only once the crate has found the key a point on the curve and `r` and `s` in range, so it
/// decides only whether the signature holds, and answers as the crate's own code would.
pub trait Es256Verifier {
    /// Whether `sig` (the JWS signature, raw `r ‖ s`) signs `signed` under the P-256 point
    /// (`x`, `y`) with SHA-256: `Some(true)` it does, `Some(false)` it does not, `None` this
    /// verifier cannot tell (no answer, or one it cannot read), and the crate's own code decides.
    fn verify_es256(
        &self,
        x: &[u8; 32],
        y: &[u8; 32],
        signed: &[u8],
        sig: &[u8; 64],
    ) -> Option<bool>;
}

/// Why a proof was refused. [`DpopError::error_code`] gives the RFC 9449 error code to answer
/// with; the variant is for logs and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DpopError {
    /// Longer than [`MAX_PROOF_LEN`].
    TooLong,
    /// Not three base64url parts, or a part is not the JSON object it must be.
    Malformed,
    /// The header's `typ` is not `dpop+jwt`.
    BadType,
    /// The header's `alg` is not `ES256` or `EdDSA` (`none` and MAC algorithms included).
    BadAlgorithm,
    /// The header has a `crit` member: no extension is understood.
    CriticalHeader,
    /// The `jwk` is missing, of the wrong type for `alg`, or its coordinates are invalid.
    BadKey,
    /// The `jwk` holds private key members.
    PrivateKey,
    /// The signature does not verify under the `jwk`.
    BadSignature,
    /// `htm` is not the request's method.
    MethodMismatch,
    /// `htu` is not the request's URL.
    UrlMismatch,
    /// `iat` is more than the window before now.
    Stale,
    /// `iat` is more than [`MAX_AHEAD_SECONDS`] (or the window, if shorter) after now.
    FromTheFuture,
    /// `jti` is empty or longer than [`MAX_JTI_LEN`].
    BadJti,
    /// An access token is presented and `ath` is missing.
    MissingAth,
    /// `ath` is not the hash of the access token presented.
    AthMismatch,
    /// A nonce is required and the proof has none.
    NonceRequired,
    /// The proof's nonce is not one the server made, or too old.
    BadNonce,
}

impl DpopError {
    /// `use_dpop_nonce` when the client should retry with the nonce the server sends,
    /// `invalid_dpop_proof` otherwise.
    pub fn error_code(self) -> &'static str {
        match self {
            Self::NonceRequired | Self::BadNonce => "use_dpop_nonce",
            _ => "invalid_dpop_proof",
        }
    }
}

impl DpopError {
    /// What a client is told: the check that failed, nothing more.
    pub fn description(self) -> &'static str {
        match self {
            Self::TooLong => "the proof is too long",
            Self::Malformed => "the proof is not a compact JWS of JSON objects",
            Self::BadType => "the proof's typ must be dpop+jwt",
            Self::BadAlgorithm => "the proof's alg must be ES256 or EdDSA",
            Self::CriticalHeader => "the proof has a crit header",
            Self::BadKey => "the proof's jwk is not a public key of its alg",
            Self::PrivateKey => "the proof's jwk holds a private key",
            Self::BadSignature => "the proof's signature does not verify",
            Self::MethodMismatch => "the proof's htm is not the request's method",
            Self::UrlMismatch => "the proof's htu is not the request's URL",
            Self::Stale => "the proof's iat is too old",
            Self::FromTheFuture => "the proof's iat is in the future",
            Self::BadJti => "the proof's jti is missing or too long",
            Self::MissingAth | Self::AthMismatch => "the proof's ath is not the token's hash",
            Self::NonceRequired | Self::BadNonce => "a current server nonce is required",
        }
    }
}

impl core::fmt::Display for DpopError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}: {self:?}", self.error_code())
    }
}

impl std::error::Error for DpopError {}

/// Whether proofs must carry a server nonce.
#[derive(Clone, Copy)]
pub enum NonceCheck<'a> {
    /// No nonce required; one the proof carries is ignored.
    Off,
    /// A nonce made by [`nonce_for`] under a key of `ring` with this `window` is required.
    Required {
        /// The keys nonces are made with.
        ring: &'a KeyRing,
        /// The nonce slot length in seconds.
        window: u64,
    },
}

impl core::fmt::Debug for NonceCheck<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Off => f.write_str("Off"),
            Self::Required { window, .. } => write!(f, "Required {{ window: {window} }}"),
        }
    }
}

/// What the request a proof comes with looks like, and the checks asked for.
#[derive(Debug, Clone, Copy)]
pub struct Expect<'a> {
    /// The request's method, as sent (compared case-sensitively, RFC 9110 section 9.1).
    pub method: &'a str,
    /// The absolute URL the request was sent to, as the server names itself.
    pub url: &'a str,
    /// The access token presented with the proof: `ath` must be its hash. `None` at the token
    /// endpoint.
    pub access_token: Option<&'a str>,
    /// Now, in seconds since the Unix epoch.
    pub now: u64,
    /// Seconds `iat` may be before `now` (at most [`MAX_WINDOW`]); after it, at most
    /// [`MAX_AHEAD_SECONDS`] or this, the shorter.
    pub window_seconds: u64,
    /// Whether a server nonce is required.
    pub nonce_check: NonceCheck<'a>,
}

/// An accepted proof.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proof {
    /// The RFC 7638 SHA-256 thumbprint of the proof's key.
    pub jkt: [u8; 32],
    /// The proof's id, for the caller's replay cache.
    pub jti: String,
    /// When the proof says it was made.
    pub iat: u64,
}

impl Proof {
    /// Whether the proof's key is the one a bound token is confirmed with (constant time).
    pub fn confirms(&self, cnf: &[u8; 32]) -> bool {
        self.jkt.ct_eq(cnf).into()
    }

    /// The thumbprint as unpadded base64url, the form of `cnf.jkt` and `dpop_jkt` in JSON.
    pub fn jkt_b64(&self) -> String {
        jkt_b64(&self.jkt)
    }

    /// The id a replay cache remembers the proof by: the first 16 bytes of SHA-256 over its key's
    /// thumbprint and its `jti` (a `jti` is unique per key).
    pub fn replay_id(&self) -> [u8; 16] {
        replay_id(&self.jkt, &self.jti)
    }

    /// Until when (seconds since the epoch, exclusive) a replay cache must remember the proof,
    /// checked at `now` with `window_seconds`: past `iat` plus the window, and past now.
    pub fn remember_until(&self, window_seconds: u64, now: u64) -> u64 {
        self.iat.saturating_add(window_seconds).max(now) + 1
    }

    /// What a replay memory keeps of the proof, checked at `now` with `window_seconds`.
    pub fn accepted(&self, window_seconds: u64, now: u64) -> replay::Accepted {
        let mut key = [0u8; 8];
        key.copy_from_slice(&self.jkt[..8]);
        replay::Accepted {
            id: self.replay_id(),
            key: u64::from_be_bytes(key),
            iat: self.iat,
            expires: self.remember_until(window_seconds, now),
        }
    }
}

#[derive(Deserialize)]
struct Header {
    typ: Option<String>,
    alg: String,
    jwk: Option<Map<String, Value>>,
    crit: Option<Value>,
}

#[derive(Deserialize)]
struct Claims {
    jti: String,
    htm: String,
    htu: String,
    iat: u64,
    ath: Option<String>,
    nonce: Option<String>,
}

/// The id a replay memory keeps a proof by ([`Proof::replay_id`]): the first 16 bytes of
/// SHA-256 over the key's thumbprint `jkt` and the proof's `jti`.
pub fn replay_id(jkt: &[u8; 32], jti: &str) -> [u8; 16] {
    let digest = Sha256::new()
        .chain_update(jkt)
        .chain_update(jti.as_bytes())
        .finalize();
    let mut id = [0u8; 16];
    id.copy_from_slice(&digest[..16]);
    id
}

/// A thumbprint as unpadded base64url, the form of `cnf.jkt` in JSON.
pub fn jkt_b64(jkt: &[u8; 32]) -> String {
    URL_SAFE_NO_PAD.encode(jkt)
}

/// `base64url(SHA-256(access_token))`, the `ath` a proof sent with `access_token` carries.
pub fn ath(access_token: &str) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(access_token.as_bytes()))
}

fn json_part<T: for<'de> Deserialize<'de>>(b64: &str) -> Result<T, DpopError> {
    let raw = URL_SAFE_NO_PAD
        .decode(b64)
        .map_err(|_| DpopError::Malformed)?;
    serde_json::from_slice(&raw).map_err(|_| DpopError::Malformed)
}

/// The header's key, once `typ`, `alg` and `crit` are acceptable.
fn header_key(header_b64: &str) -> Result<PublicJwk, DpopError> {
    let header: Header = json_part(header_b64)?;
    if header.typ.as_deref() != Some("dpop+jwt") {
        return Err(DpopError::BadType);
    }
    if !matches!(header.alg.as_str(), "ES256" | "EdDSA") {
        return Err(DpopError::BadAlgorithm);
    }
    if header.crit.is_some() {
        return Err(DpopError::CriticalHeader);
    }
    PublicJwk::parse(&header.alg, &header.jwk.ok_or(DpopError::BadKey)?)
}

/// Checks a DPoP proof against the request it came with: shape and size, header, key, signature,
/// then the claims (`jti`, `htm`, `htu`, `iat`, `ath`, `nonce`, in that order). The signature is
/// checked before any claim is read, so an unsigned proof learns nothing about the checks.
pub fn check_proof(proof: &str, expect: &Expect<'_>) -> Result<Proof, DpopError> {
    check_proof_with(proof, expect, None)
}

/// [`check_proof`], with ES256 signatures verified by `es256` when given (the decisions are the
/// same: the key and the signature's range are still checked here first, and a `None` from the
/// verifier falls back to the crate's own verification).
pub fn check_proof_with(
    proof: &str,
    expect: &Expect<'_>,
    es256: Option<&dyn Es256Verifier>,
) -> Result<Proof, DpopError> {
    if proof.len() > MAX_PROOF_LEN {
        return Err(DpopError::TooLong);
    }
    let mut parts = proof.split('.');
    let (Some(h), Some(c), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(DpopError::Malformed);
    };
    let key = header_key(h)?;
    let sig = URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| DpopError::Malformed)?;
    key.verify(&proof.as_bytes()[..h.len() + 1 + c.len()], &sig, es256)?;
    let claims: Claims = json_part(c)?;
    check_claims(&claims, expect)?;
    Ok(Proof {
        jkt: key.thumbprint(),
        jti: claims.jti,
        iat: claims.iat,
    })
}

fn check_claims(claims: &Claims, expect: &Expect<'_>) -> Result<(), DpopError> {
    if claims.jti.is_empty() || claims.jti.len() > MAX_JTI_LEN {
        return Err(DpopError::BadJti);
    }
    if claims.htm != expect.method {
        return Err(DpopError::MethodMismatch);
    }
    if !htu::same(&claims.htu, expect.url) {
        return Err(DpopError::UrlMismatch);
    }
    let window = expect.window_seconds.min(MAX_WINDOW);
    if claims.iat.saturating_add(window) < expect.now {
        return Err(DpopError::Stale);
    }
    if claims.iat > expect.now.saturating_add(window.min(MAX_AHEAD_SECONDS)) {
        return Err(DpopError::FromTheFuture);
    }
    if let Some(token) = expect.access_token {
        let sent = claims.ath.as_deref().ok_or(DpopError::MissingAth)?;
        if !bool::from(sent.as_bytes().ct_eq(ath(token).as_bytes())) {
            return Err(DpopError::AthMismatch);
        }
    }
    if let NonceCheck::Required { ring, window } = expect.nonce_check {
        let nonce = claims.nonce.as_deref().ok_or(DpopError::NonceRequired)?;
        if nonce.len() > MAX_NONCE_LEN || !nonce_ok(ring, nonce, expect.now, window) {
            return Err(DpopError::BadNonce);
        }
    }
    Ok(())
}
