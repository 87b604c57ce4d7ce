//! The public key of a DPoP proof: an RFC 7517 JWK of one of the two allowed kinds (P-256 for
//! `ES256`, Ed25519 per RFC 8037 for `EdDSA`), its RFC 7638 thumbprint, and signature checks.

use super::{DpopError, Es256Verifier};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// JWK members that hold private or symmetric key material (RFC 7518 section 6): a proof whose
/// key has any of them is refused, whatever their value.
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// A public key a proof may be signed with, with its coordinates checked.
#[derive(Clone, Debug)]
pub(super) enum PublicJwk {
    /// P-256: the base64url `x` and `y` as sent (canonical, 32 bytes each) and the key.
    P256 { x: String, y: String, key: P256Key },
    /// Ed25519: the base64url `x` as sent (canonical, 32 bytes) and the key.
    Ed25519 {
        x: String,
        key: ed25519_dalek::VerifyingKey,
    },
}

fn member<'a>(jwk: &'a Map<String, Value>, name: &str) -> Result<&'a str, DpopError> {
    jwk.get(name)
        .and_then(Value::as_str)
        .ok_or(DpopError::BadKey)
}

/// Exactly 32 bytes of canonical unpadded base64url (the engine refuses padding and non-zero
/// trailing bits, so the text is the one encoding of the bytes and the thumbprint is stable).
fn coordinate(b64: &str) -> Result<[u8; 32], DpopError> {
    let mut out = [0u8; 32];
    if b64.len() != 43 {
        return Err(DpopError::BadKey);
    }
    match URL_SAFE_NO_PAD.decode_slice(b64, &mut out) {
        Ok(32) => Ok(out),
        _ => Err(DpopError::BadKey),
    }
}

impl PublicJwk {
    /// The key of a proof header signed with `alg`. The key type must match the algorithm.
    pub(super) fn parse(alg: &str, jwk: &Map<String, Value>) -> Result<Self, DpopError> {
        if PRIVATE_MEMBERS.iter().any(|m| jwk.contains_key(*m)) {
            return Err(DpopError::PrivateKey);
        }
        let (kty, crv) = (member(jwk, "kty")?, member(jwk, "crv")?);
        match (alg, kty, crv) {
            ("ES256", "EC", "P-256") => {
                let (x, y) = (member(jwk, "x")?, member(jwk, "y")?);
                let key = P256Key::new(&coordinate(x)?, &coordinate(y)?)?;
                Ok(Self::P256 {
                    x: x.to_owned(),
                    y: y.to_owned(),
                    key,
                })
            }
            ("EdDSA", "OKP", "Ed25519") => {
                let x = member(jwk, "x")?;
                let key = ed25519_dalek::VerifyingKey::from_bytes(&coordinate(x)?)
                    .map_err(|_| DpopError::BadKey)?;
                Ok(Self::Ed25519 {
                    x: x.to_owned(),
                    key,
                })
            }
            _ => Err(DpopError::BadKey),
        }
    }

    /// The RFC 7638 canonical JSON: the required members in lexicographic order, no whitespace.
    pub(super) fn canonical(&self) -> String {
        match self {
            Self::P256 { x, y, .. } => {
                format!(r#"{{"crv":"P-256","kty":"EC","x":"{x}","y":"{y}"}}"#)
            }
            Self::Ed25519 { x, .. } => format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#),
        }
    }

    /// The RFC 7638 SHA-256 thumbprint.
    pub(super) fn thumbprint(&self) -> [u8; 32] {
        Sha256::digest(self.canonical().as_bytes()).into()
    }

    /// Checks that `sig` (the JWS signature bytes) signs `signed` under this key: ES256 is the
    /// raw 64-byte `r || s` of RFC 7518 section 3.4 (either `s`, as WebCrypto makes both), EdDSA
    /// the 64-byte RFC 8032 signature checked strictly (no small-order keys, canonical `s`).
    /// ES256 goes to `es256` when given, once the key and the signature's range passed here.
    pub(super) fn verify(
        &self,
        signed: &[u8],
        sig: &[u8],
        es256: Option<&dyn Es256Verifier>,
    ) -> Result<(), DpopError> {
        match self {
            Self::P256 { key, .. } => match es256 {
                Some(host) => key.verify_with(host, signed, sig),
                None => key.verify(signed, sig),
            },
            Self::Ed25519 { key, .. } => {
                let sig = <[u8; 64]>::try_from(sig).map_err(|_| DpopError::BadSignature)?;
                let sig = ed25519_dalek::Signature::from_bytes(&sig);
                key.verify_strict(signed, &sig)
                    .map_err(|_| DpopError::BadSignature)
            }
        }
    }
}

/// A P-256 public key checked by RustCrypto's `p256`: pure Rust, what the Wasm module, the JS
/// module and the issuer use.
#[cfg(not(feature = "ring"))]
#[derive(Clone, Debug)]
pub(super) struct P256Key {
    key: p256::ecdsa::VerifyingKey,
    x: [u8; 32],
    y: [u8; 32],
}

#[cfg(not(feature = "ring"))]
impl P256Key {
    /// Refuses a point that is not on the curve, and the identity.
    fn new(x: &[u8; 32], y: &[u8; 32]) -> Result<Self, DpopError> {
        let point = p256::EncodedPoint::from_affine_coordinates(x.into(), y.into(), false);
        p256::ecdsa::VerifyingKey::from_encoded_point(&point)
            .map(|key| Self { key, x: *x, y: *y })
            .map_err(|_| DpopError::BadKey)
    }

    /// The signature checked by `host`, once its `r` and `s` are in range (the key is on the
    /// curve: [`P256Key::new`]); by this crate when `host` cannot tell.
    fn verify_with(
        &self,
        host: &dyn Es256Verifier,
        signed: &[u8],
        sig: &[u8],
    ) -> Result<(), DpopError> {
        host_decides(host, (&self.x, &self.y), signed, sig, || {
            self.verify(signed, sig)
        })
    }

    /// Always: [`P256Key::new`] refused any other point.
    fn on_curve(&self) -> bool {
        true
    }

    fn verify(&self, signed: &[u8], sig: &[u8]) -> Result<(), DpopError> {
        use p256::ecdsa::signature::Verifier as _;
        let sig = p256::ecdsa::Signature::from_slice(sig).map_err(|_| DpopError::BadSignature)?;
        self.key
            .verify(signed, &sig)
            .map_err(|_| DpopError::BadSignature)
    }
}

/// A P-256 public key verified by `ring` (feature `ring`, the native filter): its assembly field
/// arithmetic verifies several times faster (`docs/token-format.md`). The point is the SEC 1
/// uncompressed encoding; `ring` checks it on the curve in the same pass as the signature, so it
/// is decoded once a request. Only a refused signature pays `p256`'s check, which tells a key
/// that is not on the curve (`BadKey`, as the pure-Rust build says) from a bad signature.
#[cfg(feature = "ring")]
#[derive(Clone, Debug)]
pub(super) struct P256Key([u8; 65]);

#[cfg(feature = "ring")]
impl P256Key {
    fn new(x: &[u8; 32], y: &[u8; 32]) -> Result<Self, DpopError> {
        let mut point = [4u8; 65];
        point[1..33].copy_from_slice(x);
        point[33..].copy_from_slice(y);
        Ok(Self(point))
    }

    fn verify(&self, signed: &[u8], sig: &[u8]) -> Result<(), DpopError> {
        let key = ring::signature::UnparsedPublicKey::new(
            &ring::signature::ECDSA_P256_SHA256_FIXED,
            &self.0,
        );
        match key.verify(signed, sig) {
            Ok(()) => Ok(()),
            Err(_) if !self.on_curve() => Err(DpopError::BadKey),
            Err(_) => Err(DpopError::BadSignature),
        }
    }

    /// The signature checked by `host` once the point is on the curve and `r` and `s` are in
    /// range (as the pure-Rust build checks them first); by `ring` when `host` cannot tell.
    fn verify_with(
        &self,
        host: &dyn Es256Verifier,
        signed: &[u8],
        sig: &[u8],
    ) -> Result<(), DpopError> {
        if !self.on_curve() {
            return Err(DpopError::BadKey);
        }
        let (mut x, mut y) = ([0u8; 32], [0u8; 32]);
        x.copy_from_slice(&self.0[1..33]);
        y.copy_from_slice(&self.0[33..]);
        host_decides(host, (&x, &y), signed, sig, || self.verify(signed, sig))
    }

    /// Whether the point is on the curve and not the identity.
    fn on_curve(&self) -> bool {
        p256::PublicKey::from_sec1_bytes(&self.0).is_ok()
    }
}

/// Both builds' ES256 check through `host`: `sig` must be a raw `r ‖ s` with both in range, then
/// `host` decides for the point (`x`, `y`), and `own` (the build's verification) when `host`
/// cannot tell.
fn host_decides(
    host: &dyn Es256Verifier,
    (x, y): (&[u8; 32], &[u8; 32]),
    signed: &[u8],
    sig: &[u8],
    own: impl FnOnce() -> Result<(), DpopError>,
) -> Result<(), DpopError> {
    let raw = <&[u8; 64]>::try_from(sig).map_err(|_| DpopError::BadSignature)?;
    p256::ecdsa::Signature::from_slice(raw).map_err(|_| DpopError::BadSignature)?;
    match host.verify_es256(x, y, signed, raw) {
        Some(true) => Ok(()),
        Some(false) => Err(DpopError::BadSignature),
        None => own(),
    }
}

/// The RFC 7638 SHA-256 thumbprint of a public JWK given as JSON text, for the two allowed key
/// types (`EC` P-256 and `OKP` Ed25519). `None` for anything else, for a key with private
/// members, and for invalid coordinates.
pub fn jkt(jwk_json: &str) -> Option<[u8; 32]> {
    let map: Map<String, Value> = serde_json::from_str(jwk_json).ok()?;
    let alg = match map.get("kty").and_then(Value::as_str)? {
        "EC" => "ES256",
        "OKP" => "EdDSA",
        _ => return None,
    };
    let key = PublicJwk::parse(alg, &map).ok()?;
    if let PublicJwk::P256 { key, .. } = &key {
        key.on_curve().then_some(())?;
    }
    Some(key.thumbprint())
}
