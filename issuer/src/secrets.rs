//! Random secrets, refresh tokens, and the keyed hashes that stand for them in storage.
//!
//! Client secrets are 256-bit random values of which only an HMAC-SHA256 under the store's hash key
//! (`hash.key`, 0600, or sealed under the KEK in PostgreSQL) is stored, so a copy of the database
//! alone neither reveals nor verifies them.
//!
//! Refresh tokens (`mmrt2.`, see [`RefreshToken`]) name their family and generation and carry a
//! tag under the hash key over both, so the store keeps one small record per family and
//! verifies any generation without storing a hash per token.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::Sha256;
use shared::revocation::FAMILY_TAG_LEN;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// Prefix of refresh tokens of the current format ([`RefreshToken`]).
pub const REFRESH_PREFIX: &str = "mmrt2.";
/// Length of a current refresh token: the prefix and 52 bytes in base64url.
const REFRESH_LEN: usize = 6 + 70;
/// Prefix of generated client secrets.
pub const CLIENT_SECRET_PREFIX: &str = "mmcs1.";

/// 32 bytes from the operating system's generator.
pub fn random32() -> Zeroizing<[u8; 32]> {
    let mut b = Zeroizing::new([0u8; 32]);
    rand::rng().fill_bytes(&mut *b);
    b
}

/// A new random 128-bit id.
pub fn random16() -> [u8; 16] {
    let mut b = [0u8; 16];
    rand::rng().fill_bytes(&mut b);
    b
}

/// A new client secret: the prefix and 256 random bits in base64url.
pub fn new_client_secret() -> Zeroizing<String> {
    Zeroizing::new(format!(
        "{CLIENT_SECRET_PREFIX}{}",
        URL_SAFE_NO_PAD.encode(*random32())
    ))
}

/// Fewest bytes a client secret chosen by an operator may have (`client add --secret-stdin`, an
/// apply file's `secret_file`). Generated secrets ([`new_client_secret`]) have 49.
pub const MIN_CLIENT_SECRET_BYTES: usize = 16;
/// Fewest different characters such a secret must hold: refuses `aaaa…` and `abab…`, and never a
/// random one (16 random hex digits show fewer than 5 different ones about once in two million).
pub const MIN_CLIENT_SECRET_CHARS: usize = 5;

/// Why a client secret chosen by an operator is refused. The message never holds the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WeakSecret {
    /// Fewer than [`MIN_CLIENT_SECRET_BYTES`] bytes.
    #[error(
        "a client secret must be at least {MIN_CLIENT_SECRET_BYTES} bytes long (this one has \
         {0}); omit --secret-stdin or secret_file to have a 256-bit secret generated"
    )]
    TooShort(usize),
    /// Fewer than [`MIN_CLIENT_SECRET_CHARS`] different characters.
    #[error(
        "a client secret must hold at least {MIN_CLIENT_SECRET_CHARS} different characters; \
         omit --secret-stdin or secret_file to have a 256-bit secret generated"
    )]
    TooUniform,
}

/// Checks a client secret an operator chose (see [`WeakSecret`]); generated ones always pass.
pub fn check_client_secret(secret: &str) -> Result<(), WeakSecret> {
    if secret.len() < MIN_CLIENT_SECRET_BYTES {
        return Err(WeakSecret::TooShort(secret.len()));
    }
    let mut seen: Vec<char> = Vec::with_capacity(MIN_CLIENT_SECRET_CHARS);
    for c in secret.chars() {
        if !seen.contains(&c) {
            seen.push(c);
            if seen.len() >= MIN_CLIENT_SECRET_CHARS {
                return Ok(());
            }
        }
    }
    Err(WeakSecret::TooUniform)
}

/// A verified refresh token: generation `generation` of family `family`. Only
/// [`HashKey::verify_refresh`] makes one from a presented string, so holding one means the tag was
/// made with this store's hash key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RefreshToken {
    /// The family's random 128-bit id (its key in the store).
    pub family: [u8; 16],
    /// How many rotations precede this token in its family.
    pub generation: u32,
}

impl RefreshToken {
    /// The first token of a new family.
    pub fn new_family() -> Self {
        Self {
            family: random16(),
            generation: 0,
        }
    }

    /// The token that rotating this one gives, or `None` when the generation counter is spent.
    pub fn successor(self) -> Option<Self> {
        Some(Self {
            family: self.family,
            generation: self.generation.checked_add(1)?,
        })
    }
}

/// The data dir's hash key. Zeroized on drop, redacted in `Debug`.
#[derive(Clone)]
pub struct HashKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashKey([redacted])")
    }
}

impl HashKey {
    /// Wraps 32 key bytes.
    pub fn new(bytes: Zeroizing<[u8; 32]>) -> Self {
        Self(bytes)
    }

    /// The key's bytes, only for the backup of the data dir that holds it (`issuer backup`).
    pub(crate) fn bytes(&self) -> &[u8; 32] {
        &self.0
    }

    fn mac(&self, domain: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        let mut mac =
            <Hmac<Sha256> as KeyInit>::new_from_slice(&*self.0).expect("HMAC takes any key");
        mac.update(domain);
        for p in parts {
            mac.update(&(p.len() as u64).to_be_bytes());
            mac.update(p);
        }
        mac.finalize().into_bytes().into()
    }

    /// A key for another purpose, derived from this one and `domain` (HMAC as a PRF).
    pub fn derive(&self, domain: &[u8]) -> [u8; 32] {
        self.mac(domain, &[])
    }

    /// The stored form of a client secret, bound to the client id.
    pub fn client_secret_hash(&self, client_id: &str, secret: &str) -> [u8; 32] {
        self.mac(
            b"mms/client-secret/v1",
            &[client_id.as_bytes(), secret.as_bytes()],
        )
    }

    /// True if `secret` is the one whose hash is `stored` (constant time).
    pub fn client_secret_matches(&self, client_id: &str, secret: &str, stored: &[u8; 32]) -> bool {
        self.client_secret_hash(client_id, secret)
            .ct_eq(stored)
            .into()
    }

    /// The tag of a refresh token family that begins the ids of the access tokens minted with
    /// it, so one revocation covers them all (`shared::revocation::Revoked::Family`). Keyed, so
    /// an access token tells nothing about the family's id.
    pub fn family_tag(&self, family: &[u8; 16]) -> [u8; FAMILY_TAG_LEN] {
        let mac = self.mac(b"mms/family-tag/v1", &[family]);
        let mut tag = [0u8; FAMILY_TAG_LEN];
        tag.copy_from_slice(&mac[..FAMILY_TAG_LEN]);
        tag
    }

    /// The revocation of every access token minted with the family `family`: what a store
    /// records in the transaction that revokes the family itself, so the two never part.
    pub fn family_revocation(&self, family: &[u8; 16]) -> shared::revocation::Revoked {
        shared::revocation::Revoked::Family {
            tag: hex::encode(self.family_tag(family)),
        }
    }

    /// The family tag of a current-format refresh token this key made, if it is one.
    pub fn family_tag_of(&self, refresh_token: &str) -> Option<[u8; FAMILY_TAG_LEN]> {
        self.verify_refresh(refresh_token)
            .map(|t| self.family_tag(&t.family))
    }

    fn refresh_tag(&self, token: RefreshToken) -> Zeroizing<[u8; 32]> {
        Zeroizing::new(self.mac(
            b"mms/refresh-token/v2",
            &[&token.family, &token.generation.to_be_bytes()],
        ))
    }

    /// The string form of `token`: the prefix, then family, generation and tag in base64url.
    /// Deterministic, so a retry inside the window gets the identical successor.
    pub fn encode_refresh(&self, token: RefreshToken) -> Zeroizing<String> {
        let mut raw = Zeroizing::new([0u8; 52]);
        raw[..16].copy_from_slice(&token.family);
        raw[16..20].copy_from_slice(&token.generation.to_be_bytes());
        raw[20..].copy_from_slice(&*self.refresh_tag(token));
        let mut s = Zeroizing::new(String::with_capacity(REFRESH_LEN));
        s.push_str(REFRESH_PREFIX);
        URL_SAFE_NO_PAD.encode_string(raw.as_slice(), &mut s);
        s
    }

    /// The token `s` stands for, if it is a current-format refresh token whose tag this key made
    /// (compared in constant time). Anything else, from any client, is `None`.
    pub fn verify_refresh(&self, s: &str) -> Option<RefreshToken> {
        let body = s.strip_prefix(REFRESH_PREFIX)?;
        if s.len() != REFRESH_LEN {
            return None;
        }
        // Room for base64's estimate of 70 characters (54 bytes); exactly 52 must decode.
        let mut raw = Zeroizing::new([0u8; 54]);
        if URL_SAFE_NO_PAD.decode_slice(body, &mut *raw).ok()? != 52 {
            return None;
        }
        let token = RefreshToken {
            family: raw[..16].try_into().ok()?,
            generation: u32::from_be_bytes(raw[16..20].try_into().ok()?),
        };
        bool::from(self.refresh_tag(token).ct_eq(&raw[20..52])).then_some(token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refresh_tokens_verify_only_under_their_key_and_unaltered() {
        let key = HashKey::new(random32());
        let other = HashKey::new(random32());
        let first = RefreshToken::new_family();
        let s = key.encode_refresh(first);
        assert!(s.starts_with(REFRESH_PREFIX));
        assert_eq!(s.len(), REFRESH_LEN);
        assert_eq!(key.verify_refresh(&s), Some(first));
        assert_eq!(other.verify_refresh(&s), None);
        let next = first.successor().expect("a successor");
        assert_eq!(next.generation, 1);
        assert_eq!(key.encode_refresh(next), key.encode_refresh(next));
        assert_ne!(key.encode_refresh(next), s);
        for i in REFRESH_PREFIX.len()..s.len() {
            let mut bytes = s.as_bytes().to_vec();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(bytes).expect("ascii");
            assert_eq!(key.verify_refresh(&altered), None, "altered at {i}");
        }
        for bad in [
            "",
            "mmrt2.",
            "mmrt1.x",
            &s[..s.len() - 1],
            &format!("{}A", &*s),
        ] {
            assert_eq!(key.verify_refresh(bad), None, "{bad:?}");
        }
        let last = RefreshToken {
            family: first.family,
            generation: u32::MAX,
        };
        assert_eq!(last.successor(), None);
    }

    #[test]
    fn weak_client_secrets_are_refused() {
        assert_eq!(check_client_secret(""), Err(WeakSecret::TooShort(0)));
        assert_eq!(
            check_client_secret("fifteen-bytes!!"),
            Err(WeakSecret::TooShort(15))
        );
        assert_eq!(
            check_client_secret(&"a".repeat(64)),
            Err(WeakSecret::TooUniform)
        );
        assert_eq!(
            check_client_secret(&"abcd".repeat(8)),
            Err(WeakSecret::TooUniform)
        );
        assert_eq!(check_client_secret("sixteen-bytes-ok"), Ok(()));
        assert_eq!(check_client_secret(&new_client_secret()), Ok(()));
        // The message never holds the secret.
        let e = check_client_secret("abababababababababab").unwrap_err();
        assert!(!e.to_string().contains("abab"), "{e}");
    }

    #[test]
    fn client_secrets_are_bound_to_their_client() {
        let key = HashKey::new(random32());
        let s = new_client_secret();
        let h = key.client_secret_hash("app", &s);
        assert!(key.client_secret_matches("app", &s, &h));
        assert!(!key.client_secret_matches("other", &s, &h));
        assert!(!format!("{key:?}").contains(&format!("{:?}", &key.0[..4])));
    }
}
