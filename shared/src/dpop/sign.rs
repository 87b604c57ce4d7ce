//! Making DPoP proofs (feature `sign`): the client's half, for the `issuer dpop` command that
//! the curl walk-through uses, the end-to-end tests and the benchmarks. The key's bytes are
//! passed in (randomness is the caller's, like the time); ES256 signatures are deterministic
//! (RFC 6979). Browsers and Node make proofs with WebCrypto in the JS module instead.
//!
//! [`ProofKey::sign_parts`] signs any header and claims, so hostile tests can make proofs that
//! are well signed and wrong in one chosen way.

use super::{ath, DpopError};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use serde_json::{Map, Value};
use zeroize::Zeroizing;

/// A private key a proof is signed with.
#[derive(Clone)]
pub enum ProofKey {
    /// ECDSA P-256, `alg` `ES256`.
    Es256(p256::ecdsa::SigningKey),
    /// Ed25519, `alg` `EdDSA`.
    EdDsa(ed25519_dalek::SigningKey),
}

impl core::fmt::Debug for ProofKey {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ProofKey({}, {})", self.alg(), self.jkt_b64())
    }
}

/// The claims of one proof.
#[derive(Debug, Clone, Copy)]
pub struct ProofClaims<'a> {
    /// The request's method.
    pub htm: &'a str,
    /// The request's URL, without query or fragment.
    pub htu: &'a str,
    /// A unique id.
    pub jti: &'a str,
    /// Now, in seconds since the Unix epoch.
    pub iat: u64,
    /// The access token sent with the proof, whose hash becomes `ath`.
    pub access_token: Option<&'a str>,
    /// The server's nonce, when it asked for one.
    pub nonce: Option<&'a str>,
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// A private JWK as read: `d` is wiped when dropped.
#[derive(serde::Deserialize)]
struct PrivateJwk {
    kty: String,
    crv: String,
    d: Zeroizing<String>,
    x: Option<String>,
    y: Option<String>,
}

fn scalar(text: &str) -> Result<Zeroizing<[u8; 32]>, DpopError> {
    let mut out = Zeroizing::new([0u8; 32]);
    match URL_SAFE_NO_PAD.decode_slice(text, &mut out[..]) {
        Ok(32) => Ok(out),
        _ => Err(DpopError::BadKey),
    }
}

impl ProofKey {
    /// A P-256 key whose scalar is `secret`; `None` when it is zero or not below the order.
    pub fn es256(secret: [u8; 32]) -> Option<Self> {
        let secret = Zeroizing::new(secret);
        p256::ecdsa::SigningKey::from_slice(&secret[..])
            .ok()
            .map(Self::Es256)
    }

    /// An Ed25519 key made from the 32-byte `seed`.
    pub fn ed25519(seed: [u8; 32]) -> Self {
        let seed = Zeroizing::new(seed);
        Self::EdDsa(ed25519_dalek::SigningKey::from_bytes(&seed))
    }

    /// The JWS `alg`.
    pub fn alg(&self) -> &'static str {
        match self {
            Self::Es256(_) => "ES256",
            Self::EdDsa(_) => "EdDSA",
        }
    }

    fn public_members(&self) -> String {
        match self {
            Self::Es256(k) => {
                let p = k.verifying_key().to_encoded_point(false);
                let (x, y) = (p.x().map(|x| b64(x)), p.y().map(|y| b64(y)));
                format!(
                    r#""kty":"EC","crv":"P-256","x":"{}","y":"{}""#,
                    x.unwrap_or_default(),
                    y.unwrap_or_default()
                )
            }
            Self::EdDsa(k) => format!(
                r#""kty":"OKP","crv":"Ed25519","x":"{}""#,
                b64(k.verifying_key().as_bytes())
            ),
        }
    }

    /// The public key as a JWK (JSON text).
    pub fn public_jwk(&self) -> String {
        format!("{{{}}}", self.public_members())
    }

    /// The private key as a JWK (JSON text, with `d`), wiped when dropped.
    pub fn private_jwk(&self) -> Zeroizing<String> {
        let d = match self {
            Self::Es256(k) => Zeroizing::new(b64(&k.to_bytes())),
            Self::EdDsa(k) => Zeroizing::new(b64(k.as_bytes())),
        };
        Zeroizing::new(format!(
            r#"{{{},"d":"{}"}}"#,
            self.public_members(),
            d.as_str()
        ))
    }

    /// Reads a private JWK as [`ProofKey::private_jwk`] writes it (`EC` P-256 or `OKP`
    /// Ed25519 with `d`); the public members, when present, must match `d`.
    pub fn from_private_jwk(json: &str) -> Result<Self, DpopError> {
        let jwk: PrivateJwk = serde_json::from_str(json).map_err(|_| DpopError::BadKey)?;
        let d = scalar(&jwk.d)?;
        let key = match (jwk.kty.as_str(), jwk.crv.as_str()) {
            ("EC", "P-256") => Self::es256(*d).ok_or(DpopError::BadKey)?,
            ("OKP", "Ed25519") => Self::ed25519(*d),
            _ => return Err(DpopError::BadKey),
        };
        let public: Map<String, Value> =
            serde_json::from_str(&key.public_jwk()).map_err(|_| DpopError::BadKey)?;
        let given = [("x", &jwk.x), ("y", &jwk.y)];
        for (name, value) in given {
            if let Some(value) = value {
                if public.get(name).and_then(Value::as_str) != Some(value.as_str()) {
                    return Err(DpopError::BadKey);
                }
            }
        }
        Ok(key)
    }

    /// The RFC 7638 thumbprint of the public key.
    pub fn jkt(&self) -> [u8; 32] {
        super::jkt(&self.public_jwk()).unwrap_or_default()
    }

    /// The thumbprint as unpadded base64url.
    pub fn jkt_b64(&self) -> String {
        b64(&self.jkt())
    }

    /// The header of a proof: `typ` `dpop+jwt`, `alg` and the public `jwk`.
    pub fn header(&self) -> String {
        format!(
            r#"{{"typ":"dpop+jwt","alg":"{}","jwk":{}}}"#,
            self.alg(),
            self.public_jwk()
        )
    }

    /// The claims of a proof as JSON text.
    pub fn claims(claims: &ProofClaims<'_>) -> String {
        let mut out = Map::new();
        out.insert("jti".into(), claims.jti.into());
        out.insert("htm".into(), claims.htm.into());
        out.insert("htu".into(), claims.htu.into());
        out.insert("iat".into(), claims.iat.into());
        if let Some(token) = claims.access_token {
            out.insert("ath".into(), ath(token).into());
        }
        if let Some(nonce) = claims.nonce {
            out.insert("nonce".into(), nonce.into());
        }
        Value::Object(out).to_string()
    }

    /// A proof with these claims.
    pub fn proof(&self, claims: &ProofClaims<'_>) -> String {
        self.sign_parts(&self.header(), &Self::claims(claims))
    }

    /// A compact JWS of any header and claims text, signed with this key.
    pub fn sign_parts(&self, header: &str, claims: &str) -> String {
        let signed = format!("{}.{}", b64(header.as_bytes()), b64(claims.as_bytes()));
        let sig = match self {
            Self::Es256(k) => {
                use p256::ecdsa::signature::Signer as _;
                let s: p256::ecdsa::Signature = k.sign(signed.as_bytes());
                s.to_bytes().to_vec()
            }
            Self::EdDsa(k) => {
                use ed25519_dalek::Signer as _;
                k.sign(signed.as_bytes()).to_bytes().to_vec()
            }
        };
        format!("{signed}.{}", b64(&sig))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dpop::{check_proof, Expect, NonceCheck};

    fn expect(token: Option<&str>) -> Expect<'_> {
        Expect {
            method: "GET",
            url: "https://api.example.com/apiv2/x",
            access_token: token,
            now: 1_700_000_000,
            window_seconds: 60,
            nonce_check: NonceCheck::Off,
        }
    }

    #[test]
    fn proofs_made_here_pass_the_check_and_name_the_key() {
        for key in [
            ProofKey::es256([3; 32]).unwrap(),
            ProofKey::ed25519([4; 32]),
        ] {
            let claims = ProofClaims {
                htm: "GET",
                htu: "https://api.example.com/apiv2/x",
                jti: "a",
                iat: 1_700_000_000,
                access_token: Some("mmat2.t"),
                nonce: None,
            };
            let proof = check_proof(&key.proof(&claims), &expect(Some("mmat2.t"))).unwrap();
            assert_eq!(proof.jkt, key.jkt());
            assert_ne!(key.jkt(), [0; 32]);
            assert_eq!(
                check_proof(&key.proof(&claims), &expect(Some("other"))),
                Err(DpopError::AthMismatch)
            );
        }
    }

    #[test]
    fn private_jwk_round_trips_and_refuses_a_mismatched_public_half() {
        for key in [
            ProofKey::es256([5; 32]).unwrap(),
            ProofKey::ed25519([6; 32]),
        ] {
            let back = ProofKey::from_private_jwk(&key.private_jwk()).unwrap();
            assert_eq!(back.jkt(), key.jkt());
            assert!(!key.public_jwk().contains("\"d\""));
        }
        let a = ProofKey::ed25519([1; 32]).private_jwk();
        let b = ProofKey::ed25519([2; 32]).public_jwk();
        let x_of_b = &b[b.find(r#""x":"#).unwrap()..b.len() - 1];
        let start = a.find(r#""x":"#).unwrap();
        let end = a[start..].find(',').unwrap() + start;
        let mixed = format!("{}{}{}", &a[..start], x_of_b, &a[end..]);
        assert_eq!(
            ProofKey::from_private_jwk(&mixed).unwrap_err(),
            DpopError::BadKey
        );
        assert_eq!(ProofKey::es256([0; 32]).map(|k| k.alg()), None);
        assert!(ProofKey::from_private_jwk(r#"{"kty":"oct","k":"AAAA"}"#).is_err());
    }

    #[test]
    fn debug_shows_no_private_key() {
        let key = ProofKey::ed25519([8; 32]);
        let d = key.private_jwk();
        let d = &d[d.find(r#""d":"#).unwrap() + 5..d.len() - 2];
        assert!(!format!("{key:?}").contains(d));
    }
}
