//! The password hash schemes a user record may hold: Argon2id (what this server makes), and
//! bcrypt (`$2b$`) and PBKDF2-SHA256 (`$pbkdf2-sha256$`, the PHC form of the `pbkdf2` crate) of
//! users moved in from another server (`issuer apply`), which are replaced by Argon2id at the
//! user's first successful sign-in.
//!
//! An imported hash must meet these bounds, so no weak hash comes in and no hash makes a sign-in
//! cost more than a few seconds:
//! - Argon2id, version 0x13: memory 7 to 64 MiB and memory × passes at least 35 MiB (the weakest
//!   line of the OWASP table: 7 MiB × 5), 1 to 10 passes, 1 to 16 lanes; one with other
//!   parameters than this server's is replaced by its own Argon2id at the first sign-in too;
//! - bcrypt `$2b$`: cost 10 to 14;
//! - PBKDF2-SHA256: 100 000 to 2 000 000 iterations, a salt of at least 8 bytes, a 32-byte hash.

use argon2::password_hash::{PasswordHash, PasswordVerifier};
use std::str::FromStr;

/// How a password hash was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordScheme {
    /// Argon2id (`$argon2id$`).
    Argon2id,
    /// bcrypt (`$2b$`).
    Bcrypt,
    /// PBKDF2 with HMAC-SHA256 (`$pbkdf2-sha256$`).
    Pbkdf2Sha256,
}

impl PasswordScheme {
    /// The name `issuer user list --json` shows: `argon2id`, `bcrypt` or `pbkdf2-sha256`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Argon2id => "argon2id",
            Self::Bcrypt => "bcrypt",
            Self::Pbkdf2Sha256 => "pbkdf2-sha256",
        }
    }

    /// The scheme a hash names by its prefix (`None` for none of these, such as the empty hash of
    /// a user without a password).
    pub fn of(hash: &str) -> Option<Self> {
        if hash.starts_with("$argon2id$") {
            Some(Self::Argon2id)
        } else if hash.starts_with("$2b$") {
            Some(Self::Bcrypt)
        } else if hash.starts_with("$pbkdf2-sha256$") {
            Some(Self::Pbkdf2Sha256)
        } else {
            None
        }
    }
}

/// Why a password hash is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    /// Not `$argon2id$`, `$2b$` or `$pbkdf2-sha256$`.
    #[error("password_hash must be a PHC string of argon2id ($argon2id$), bcrypt ($2b$) or pbkdf2-sha256 ($pbkdf2-sha256$)")]
    UnknownScheme,
    /// The string does not parse as a hash of its scheme.
    #[error("password_hash is not a well-formed {0} hash")]
    Malformed(&'static str),
    /// Parameters outside the accepted bounds.
    #[error("password_hash is a {scheme} hash with {what}")]
    OutOfBounds {
        /// The scheme's name.
        scheme: &'static str,
        /// Which bound it breaks.
        what: &'static str,
    },
}

/// Checks that `hash` is a well-formed hash of an accepted scheme within the bounds above.
pub fn check_hash(hash: &str) -> Result<PasswordScheme, HashError> {
    let scheme = PasswordScheme::of(hash).ok_or(HashError::UnknownScheme)?;
    let malformed = HashError::Malformed(scheme.name());
    let bound = |what| HashError::OutOfBounds {
        scheme: scheme.name(),
        what,
    };
    match scheme {
        PasswordScheme::Argon2id => {
            let h = PasswordHash::new(hash).map_err(|_| malformed.clone())?;
            let p = argon2::Params::try_from(&h).map_err(|_| malformed.clone())?;
            if h.version != Some(0x13) || h.salt.is_none() || h.hash.is_none() {
                return Err(malformed);
            }
            let (m, t) = (p.m_cost(), p.t_cost());
            if !(7 * 1024..=64 * 1024).contains(&m) || m.saturating_mul(t) < 35 * 1024 {
                return Err(bound(
                    "memory below 7 MiB, above 64 MiB, or memory × passes below 35 MiB",
                ));
            }
            if t > 10 || p.p_cost() > 16 {
                return Err(bound("more than 10 passes or 16 lanes"));
            }
        }
        PasswordScheme::Bcrypt => {
            let parts = bcrypt::HashParts::from_str(hash).map_err(|_| malformed)?;
            if !(10..=14).contains(&parts.get_cost()) {
                return Err(bound("a cost outside 10 to 14"));
            }
        }
        PasswordScheme::Pbkdf2Sha256 => {
            let h = PasswordHash::new(hash).map_err(|_| malformed.clone())?;
            let p = pbkdf2::Params::try_from(&h).map_err(|_| malformed.clone())?;
            let (Some(salt), Some(out)) = (h.salt, h.hash) else {
                return Err(malformed);
            };
            let mut buf = [0u8; 64];
            let salt_len = salt.decode_b64(&mut buf).map_err(|_| malformed)?.len();
            if !(100_000..=2_000_000).contains(&p.rounds) {
                return Err(bound("iterations outside 100000 to 2000000"));
            }
            if salt_len < 8 || out.len() != 32 || p.output_length != 32 {
                return Err(bound("a salt under 8 bytes or a hash not of 32 bytes"));
            }
        }
    }
    Ok(scheme)
}

/// True if `password` matches the bcrypt or PBKDF2 hash `hash` (checked against the bounds
/// first, so a record can make no sign-in cost more than they allow); false for any other.
pub(super) fn verify_imported(password: &str, hash: &str) -> bool {
    match check_hash(hash) {
        // bcrypt compares in constant time and, like every bcrypt, reads 72 bytes of password.
        Ok(PasswordScheme::Bcrypt) => bcrypt::verify(password, hash).unwrap_or(false),
        // The crate compares its output in constant time.
        Ok(PasswordScheme::Pbkdf2Sha256) => PasswordHash::new(hash).is_ok_and(|h| {
            pbkdf2::Pbkdf2
                .verify_password(password.as_bytes(), &h)
                .is_ok()
        }),
        Ok(PasswordScheme::Argon2id) | Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use argon2::password_hash::{PasswordHasher, SaltString};

    fn pbkdf2_hash(password: &str, rounds: u32, salt: &[u8]) -> String {
        let salt = SaltString::encode_b64(salt).unwrap();
        let params = pbkdf2::Params {
            rounds,
            output_length: 32,
        };
        pbkdf2::Pbkdf2
            .hash_password_customized(
                password.as_bytes(),
                Some(pbkdf2::Algorithm::Pbkdf2Sha256.ident()),
                None,
                params,
                &salt,
            )
            .unwrap()
            .to_string()
    }

    #[test]
    fn imported_hashes_verify_within_bounds() {
        let b = bcrypt::hash("pw", 10).unwrap();
        assert!(b.starts_with("$2b$10$"));
        assert_eq!(check_hash(&b), Ok(PasswordScheme::Bcrypt));
        assert!(verify_imported("pw", &b) && !verify_imported("px", &b));
        let p = pbkdf2_hash("pw", 100_000, b"0123456789abcdef");
        assert!(p.starts_with("$pbkdf2-sha256$i=100000,l=32$"), "{p}");
        assert_eq!(check_hash(&p), Ok(PasswordScheme::Pbkdf2Sha256));
        assert!(verify_imported("pw", &p) && !verify_imported("px", &p));
        let a = crate::passwords::hash_password("pw");
        assert_eq!(check_hash(&a), Ok(PasswordScheme::Argon2id));
        assert!(
            !verify_imported("pw", &a),
            "Argon2id goes through its own path"
        );
    }

    #[test]
    fn weak_foreign_and_malformed_hashes_are_refused() {
        let weak_bcrypt = bcrypt::hash("pw", 4).unwrap();
        assert!(matches!(
            check_hash(&weak_bcrypt),
            Err(HashError::OutOfBounds { .. })
        ));
        assert!(!verify_imported("pw", &weak_bcrypt));
        let few_rounds = pbkdf2_hash("pw", 1_000, b"0123456789abcdef");
        assert!(matches!(
            check_hash(&few_rounds),
            Err(HashError::OutOfBounds { .. })
        ));
        let short_salt = pbkdf2_hash("pw", 100_000, b"0123");
        assert!(matches!(
            check_hash(&short_salt),
            Err(HashError::OutOfBounds { .. })
        ));
        let y = bcrypt::hash("pw", 10).unwrap().replacen("$2b$", "$2y$", 1);
        for other in [
            "",
            "plain",
            y.as_str(),
            "$argon2i$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$aGFzaA",
            "$pbkdf2-sha512$i=100000,l=64$c2FsdHNhbHQ$aGFzaA",
            "$scrypt$ln=16,r=8,p=1$c2FsdA$aGFzaA",
        ] {
            assert_eq!(check_hash(other), Err(HashError::UnknownScheme), "{other}");
        }
        for bad in ["$2b$10$short", "$pbkdf2-sha256$i=x$$", "$argon2id$v=19$m=1"] {
            assert!(
                matches!(check_hash(bad), Err(HashError::Malformed(_))),
                "{bad}"
            );
        }
        let argon_weak = "$argon2id$v=19$m=1024,t=1,p=1$c2FsdHNhbHQ$aGFzaGhhc2hoYXNoaGFzaA";
        assert!(matches!(
            check_hash(argon_weak),
            Err(HashError::OutOfBounds { .. })
        ));
    }
}
