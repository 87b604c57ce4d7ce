//! User passwords: Argon2id hashing and verification, run on the blocking pool with bounded
//! concurrency so a burst of sign-ins cannot starve the async runtime or exhaust memory.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Argon2id with the OWASP baseline: 19 MiB, 2 passes, 1 lane.
fn argon2() -> Argon2<'static> {
    let params = Params::new(19 * 1024, 2, 1, None).expect("valid Argon2 parameters");
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params)
}

/// Hashes a password into a PHC string.
pub fn hash_password(password: &str) -> String {
    let salt = SaltString::encode_b64(&crate::secrets::random16()).expect("16-byte salt encodes");
    argon2()
        .hash_password(password.as_bytes(), &salt)
        .expect("Argon2 hashing with valid parameters")
        .to_string()
}

/// True if `password` matches the PHC string `hash`; false for a damaged hash too.
pub fn verify_password(password: &str, hash: &str) -> bool {
    PasswordHash::new(hash).is_ok_and(|h| argon2().verify_password(password.as_bytes(), &h).is_ok())
}

/// Verifies passwords off the runtime, at most `permits` at a time.
#[derive(Clone)]
pub struct PasswordChecker {
    permits: Arc<Semaphore>,
    /// Hash checked for unknown users so they cost the same as known ones.
    dummy: Arc<String>,
}

impl PasswordChecker {
    /// A checker allowing `concurrency` simultaneous verifications.
    pub fn new(concurrency: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            dummy: Arc::new(hash_password("unknown user placeholder")),
        }
    }

    /// Checks `password` against `hash`, or against a placeholder when `hash` is `None`
    /// (the answer is then always false, after the same work).
    pub async fn check(&self, password: zeroize::Zeroizing<String>, hash: Option<String>) -> bool {
        let Ok(_permit) = self.permits.acquire().await else {
            return false;
        };
        let known = hash.is_some();
        let hash = hash.unwrap_or_else(|| self.dummy.as_ref().clone());
        let ok = tokio::task::spawn_blocking(move || verify_password(&password, &hash))
            .await
            .unwrap_or(false);
        ok && known
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_and_verify() {
        let h = hash_password("correct horse");
        assert!(h.starts_with("$argon2id$"));
        assert!(verify_password("correct horse", &h));
        assert!(!verify_password("wrong", &h));
        assert!(!verify_password("x", "not a phc string"));
    }
}
