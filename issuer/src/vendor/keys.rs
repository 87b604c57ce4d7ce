//! A vendor's public keys: the JWK set `issuer vendor keygen` writes and an installation names in
//! a `[[vendor]]` table. Each key is Ed25519 (`OKP`, `EdDSA`) or P-256 (`EC`, `ES256`); its `kid`
//! is its RFC 7638 thumbprint, so a statement names the key it was signed with and nothing else
//! can be named that way. A set holding any private or symmetric member is refused whole: a file
//! with a private key in it has been copied from where it should not have been.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{Map, Value};
use shared::dpop::sign::ProofKey;

/// JWK members holding private or symmetric key material (RFC 7518 section 6).
const PRIVATE_MEMBERS: [&str; 8] = ["d", "p", "q", "dp", "dq", "qi", "oth", "k"];

/// Most keys in one set.
pub const MAX_KEYS: usize = 16;

/// Why a JWK set is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySetError {
    /// Not a JSON object with a `keys` array of objects.
    #[error("not a JWK set (a JSON object whose `keys` is an array of JWKs)")]
    NotASet,
    /// A key holds private key material.
    #[error("key {0} holds private key material (`d`, `k`, …): a vendor gives out its public JWK set only")]
    Private(usize),
    /// A key is of a kind not accepted, or damaged.
    #[error("key {0} is neither an OKP Ed25519 nor an EC P-256 public key with valid coordinates")]
    BadKey(usize),
    /// A key's `kid` differs from its thumbprint.
    #[error("key {0}: `kid` is not the key's RFC 7638 thumbprint")]
    BadKid(usize),
    /// No key, or more than [`MAX_KEYS`].
    #[error("a set holds 1 to {MAX_KEYS} keys")]
    Count,
}

/// A public key a vendor signs statements and revocation lists with.
#[derive(Clone, Debug)]
pub struct VendorKey {
    /// RFC 7638 thumbprint, base64url.
    pub kid: String,
    key: Verifier,
}

#[derive(Clone, Debug)]
enum Verifier {
    Ed25519(ed25519_dalek::VerifyingKey),
    P256(p256::ecdsa::VerifyingKey),
}

fn coordinate(jwk: &Map<String, Value>, name: &str) -> Option<[u8; 32]> {
    let text = jwk.get(name)?.as_str()?;
    let mut out = [0u8; 32];
    (text.len() == 43 && URL_SAFE_NO_PAD.decode_slice(text, &mut out) == Ok(32)).then_some(out)
}

impl VendorKey {
    /// The JWS `alg` this key verifies.
    pub fn alg(&self) -> &'static str {
        match self.key {
            Verifier::Ed25519(_) => "EdDSA",
            Verifier::P256(_) => "ES256",
        }
    }

    /// Reads one public JWK (number `n` of its set, for messages).
    fn parse(n: usize, jwk: &Map<String, Value>) -> Result<Self, KeySetError> {
        if PRIVATE_MEMBERS.iter().any(|m| jwk.contains_key(*m)) {
            return Err(KeySetError::Private(n));
        }
        let text = |name: &str| jwk.get(name).and_then(Value::as_str);
        let key = match (text("kty"), text("crv")) {
            (Some("OKP"), Some("Ed25519")) => {
                let x = coordinate(jwk, "x").ok_or(KeySetError::BadKey(n))?;
                let key = ed25519_dalek::VerifyingKey::from_bytes(&x)
                    .map_err(|_| KeySetError::BadKey(n))?;
                if key.is_weak() {
                    return Err(KeySetError::BadKey(n));
                }
                Verifier::Ed25519(key)
            }
            (Some("EC"), Some("P-256")) => {
                let x = coordinate(jwk, "x").ok_or(KeySetError::BadKey(n))?;
                let y = coordinate(jwk, "y").ok_or(KeySetError::BadKey(n))?;
                let point =
                    p256::EncodedPoint::from_affine_coordinates(&x.into(), &y.into(), false);
                let key = p256::ecdsa::VerifyingKey::from_encoded_point(&point)
                    .map_err(|_| KeySetError::BadKey(n))?;
                Verifier::P256(key)
            }
            _ => return Err(KeySetError::BadKey(n)),
        };
        let canonical = canonical(&key);
        let kid =
            URL_SAFE_NO_PAD.encode(shared::dpop::jkt(&canonical).ok_or(KeySetError::BadKey(n))?);
        match text("kid") {
            Some(given) if given != kid => Err(KeySetError::BadKid(n)),
            _ => Ok(Self { kid, key }),
        }
    }

    /// Whether `sig` signs `signed` under this key: EdDSA strictly (RFC 8032, no weak keys),
    /// ES256 as the raw 64-byte `r || s` of RFC 7518 section 3.4.
    pub fn verifies(&self, signed: &[u8], sig: &[u8]) -> bool {
        match &self.key {
            Verifier::Ed25519(key) => <[u8; 64]>::try_from(sig).is_ok_and(|sig| {
                key.verify_strict(signed, &ed25519_dalek::Signature::from_bytes(&sig))
                    .is_ok()
            }),
            Verifier::P256(key) => {
                use p256::ecdsa::signature::Verifier as _;
                p256::ecdsa::Signature::from_slice(sig)
                    .is_ok_and(|sig| key.verify(signed, &sig).is_ok())
            }
        }
    }
}

/// The RFC 7638 members of a key, as a JSON object's text.
fn canonical(key: &Verifier) -> String {
    let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
    match key {
        Verifier::Ed25519(k) => format!(
            r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#,
            b64(k.as_bytes())
        ),
        Verifier::P256(k) => {
            let p = k.to_encoded_point(false);
            let (x, y) = (p.x().map(|x| b64(x)), p.y().map(|y| b64(y)));
            format!(
                r#"{{"crv":"P-256","kty":"EC","x":"{}","y":"{}"}}"#,
                x.unwrap_or_default(),
                y.unwrap_or_default()
            )
        }
    }
}

/// Reads a public JWK set.
pub fn parse_key_set(text: &str) -> Result<Vec<VendorKey>, KeySetError> {
    let set: Value = serde_json::from_str(text).map_err(|_| KeySetError::NotASet)?;
    let keys = set
        .get("keys")
        .and_then(Value::as_array)
        .ok_or(KeySetError::NotASet)?;
    if keys.is_empty() || keys.len() > MAX_KEYS {
        return Err(KeySetError::Count);
    }
    keys.iter()
        .enumerate()
        .map(|(n, k)| VendorKey::parse(n, k.as_object().ok_or(KeySetError::NotASet)?))
        .collect()
}

/// The `kid` of a signing key: its public key's thumbprint.
pub fn kid_of(key: &ProofKey) -> String {
    key.jkt_b64()
}

/// The public JWK set of `key`, as `issuer vendor keygen` writes it: one key, with its `kid`,
/// `alg` and `use`.
pub fn public_key_set(key: &ProofKey) -> String {
    let mut jwk: Map<String, Value> = serde_json::from_str(&key.public_jwk()).unwrap_or_default();
    jwk.insert("kid".into(), kid_of(key).into());
    jwk.insert("alg".into(), key.alg().into());
    jwk.insert("use".into(), "sig".into());
    let set = serde_json::json!({ "keys": [Value::Object(jwk)] });
    serde_json::to_string_pretty(&set).unwrap_or_default() + "\n"
}
