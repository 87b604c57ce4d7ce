//! Random secrets and the keyed hashes that stand for them in storage.
//!
//! Client secrets and refresh tokens are 256-bit random values. Only an HMAC-SHA256 of each, under
//! the data dir's hash key (`hash.key`, 0600), is stored, so a copy of the database alone neither
//! reveals nor verifies them.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use subtle::ConstantTimeEq;
use zeroize::Zeroizing;

/// Prefix of every refresh token (family `mmrt`, version 1).
pub const REFRESH_PREFIX: &str = "mmrt1.";
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

/// A new refresh token: the prefix and 256 random bits in base64url.
pub fn new_refresh_token() -> Zeroizing<String> {
    Zeroizing::new(format!(
        "{REFRESH_PREFIX}{}",
        URL_SAFE_NO_PAD.encode(*random32())
    ))
}

/// True if `s` has the shape of a refresh token (checked before any lookup).
pub fn looks_like_refresh_token(s: &str) -> bool {
    s.len() == REFRESH_PREFIX.len() + 43
        && s.starts_with(REFRESH_PREFIX)
        && URL_SAFE_NO_PAD
            .decode(&s[REFRESH_PREFIX.len()..])
            .is_ok_and(|b| b.len() == 32)
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

    fn mac(&self, domain: &[u8], parts: &[&[u8]]) -> [u8; 32] {
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&*self.0).expect("HMAC takes any key");
        mac.update(domain);
        for p in parts {
            mac.update(&(p.len() as u64).to_be_bytes());
            mac.update(p);
        }
        mac.finalize().into_bytes().into()
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

    /// The storage key of a refresh token.
    pub fn refresh_hash(&self, token: &str) -> [u8; 32] {
        self.mac(b"mms/refresh-hash/v1", &[token.as_bytes()])
    }

    /// The successor of a refresh token. Deterministic, so a retried refresh inside the retry
    /// window receives the identical successor without the server storing any plaintext.
    pub fn refresh_successor(&self, token: &str) -> Zeroizing<String> {
        let next = Zeroizing::new(self.mac(b"mms/refresh-successor/v1", &[token.as_bytes()]));
        Zeroizing::new(format!("{REFRESH_PREFIX}{}", URL_SAFE_NO_PAD.encode(*next)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_and_hashes() {
        let key = HashKey::new(random32());
        let rt = new_refresh_token();
        assert!(looks_like_refresh_token(&rt));
        assert!(!looks_like_refresh_token("mmrt1.short"));
        let next = key.refresh_successor(&rt);
        assert!(looks_like_refresh_token(&next));
        assert_eq!(next, key.refresh_successor(&rt));
        assert_ne!(key.refresh_hash(&rt), key.refresh_hash(&next));
        let s = new_client_secret();
        let h = key.client_secret_hash("app", &s);
        assert!(key.client_secret_matches("app", &s, &h));
        assert!(!key.client_secret_matches("other", &s, &h));
        assert!(!format!("{key:?}").contains(&format!("{:?}", &key.0[..4])));
    }
}
