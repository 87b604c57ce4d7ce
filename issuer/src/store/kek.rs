//! The key-encryption key (KEK): secrets a shared database holds (signing keys, the hash key)
//! are sealed under it, so a dump of the database alone can neither mint a token nor match a
//! client secret. Each issuer and admin command reads it from `--kek-file`: at least 32 random
//! bytes in any form (raw, hex, base64), from which the key is derived with HKDF-SHA256.
//!
//! Sealed values are XChaCha20-Poly1305 with a random 24-byte nonce, bound to their purpose and
//! row by the associated data, so a sealed signing key cannot be swapped into another row.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use sha2::Sha256;
use std::path::Path;
use zeroize::Zeroizing;

/// Fewest bytes a KEK file may hold.
pub const MIN_KEK_FILE_BYTES: usize = 32;
const NONCE_LEN: usize = 24;

/// Why a KEK could not be loaded or a value not be opened. Never contains key material.
#[derive(Debug, thiserror::Error)]
pub enum KekError {
    /// The file fails the check of secret files, or could not be read.
    #[error(transparent)]
    File(#[from] crate::secret_file::FileError),
    /// No KEK file was named, and the PostgreSQL store needs one.
    #[error(
        "the PostgreSQL store needs --kek-file (env ISSUER_KEK_FILE): the key that seals \
         signing keys and the hash key in the database"
    )]
    NotGiven,
    /// The file holds too little.
    #[error("the key-encryption key file {0} holds fewer than {MIN_KEK_FILE_BYTES} bytes")]
    TooShort(String),
    /// A sealed value does not open under this key: the wrong key, or a damaged value.
    #[error("a sealed {0} does not open with this key-encryption key (wrong --kek-file?)")]
    WrongKey(&'static str),
}

/// The derived key-encryption key, and during a KEK rotation the previous one, which still opens
/// what it sealed. Wiped on drop; never printed.
pub struct Kek {
    key: Zeroizing<[u8; 32]>,
    previous: Option<Box<Kek>>,
}

impl std::fmt::Debug for Kek {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kek(..)")
    }
}

impl Kek {
    /// Reads and derives the KEK from `path` (surrounding whitespace ignored, at least 32 bytes),
    /// a file that passes the check of secret files ([`crate::secret_file`]: 0600 or stricter,
    /// the issuer's user's or root's, in a folder only they may write).
    pub fn from_file(path: &Path) -> Result<Self, KekError> {
        let name = path.display().to_string();
        let bytes = crate::secret_file::read("key-encryption key file", path)?;
        let start = bytes.iter().position(|b| !b.is_ascii_whitespace());
        let end = bytes.iter().rposition(|b| !b.is_ascii_whitespace());
        let material = match (start, end) {
            (Some(s), Some(e)) => &bytes[s..=e],
            _ => &[][..],
        };
        if material.len() < MIN_KEK_FILE_BYTES {
            return Err(KekError::TooShort(name));
        }
        Ok(Self::derive(material))
    }

    /// Derives the KEK from raw material.
    pub fn derive(material: &[u8]) -> Self {
        let mut key = Zeroizing::new([0u8; 32]);
        Hkdf::<Sha256>::new(Some(b"mms-issuer/kek/v1"), material)
            .expand(b"seal", key.as_mut())
            .expect("32 bytes is a valid HKDF-SHA256 length");
        Self {
            key,
            previous: None,
        }
    }

    /// This key, which seals, with `previous` still opening what it sealed (for a KEK rotation:
    /// `docs/deploy-postgres.md`).
    pub fn with_previous(mut self, previous: Kek) -> Self {
        self.previous = Some(Box::new(previous));
        self
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(self.key.as_ref().into())
    }

    /// Seals `plaintext` for `purpose` (for example `signing-key/3`): nonce then ciphertext.
    pub fn seal(&self, purpose: &str, plaintext: &[u8]) -> Vec<u8> {
        let nonce: [u8; NONCE_LEN] = rand::random();
        let sealed = self
            .cipher()
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: plaintext,
                    aad: purpose.as_bytes(),
                },
            )
            .expect("XChaCha20-Poly1305 seals any message of this size");
        [nonce.as_slice(), &sealed].concat()
    }

    /// Opens a value sealed for `purpose`; `what` names it in the error.
    pub fn open(
        &self,
        purpose: &str,
        sealed: &[u8],
        what: &'static str,
    ) -> Result<Zeroizing<Vec<u8>>, KekError> {
        if sealed.len() < NONCE_LEN {
            return Err(KekError::WrongKey(what));
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let opened = self.cipher().decrypt(
            XNonce::from_slice(nonce),
            Payload {
                msg: body,
                aad: purpose.as_bytes(),
            },
        );
        match (opened, &self.previous) {
            (Ok(plain), _) => Ok(Zeroizing::new(plain)),
            (Err(_), Some(previous)) => previous.open(purpose, sealed, what),
            (Err(_), None) => Err(KekError::WrongKey(what)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret_file::FileError;

    #[test]
    fn sealed_values_open_only_with_their_key_and_purpose() {
        let kek = Kek::derive(&[1; 32]);
        let sealed = kek.seal("signing-key/1", b"secret");
        assert_eq!(
            kek.open("signing-key/1", &sealed, "key")
                .unwrap()
                .as_slice(),
            b"secret"
        );
        assert!(kek.open("signing-key/2", &sealed, "key").is_err());
        assert!(Kek::derive(&[2; 32])
            .open("signing-key/1", &sealed, "key")
            .is_err());
        assert!(kek.open("signing-key/1", &sealed[..10], "key").is_err());
        assert!(!format!("{kek:?}").contains('1'));
    }

    #[test]
    fn the_previous_key_opens_during_a_rotation() {
        let old = Kek::derive(&[1; 32]);
        let sealed = old.seal("hash-key", b"h");
        let both = Kek::derive(&[2; 32]).with_previous(Kek::derive(&[1; 32]));
        assert_eq!(
            both.open("hash-key", &sealed, "h").unwrap().as_slice(),
            b"h"
        );
        let resealed = both.seal("hash-key", b"h");
        assert!(
            old.open("hash-key", &resealed, "h").is_err(),
            "new seals use the new key"
        );
        assert!(Kek::derive(&[2; 32])
            .open("hash-key", &resealed, "h")
            .is_ok());
    }

    #[test]
    fn kek_files_must_be_long_and_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kek");
        std::fs::write(&path, "  short\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(Kek::from_file(&path), Err(KekError::TooShort(_))));
        std::fs::write(&path, format!("{}\n", "ab".repeat(32))).unwrap();
        let a = Kek::from_file(&path).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            Kek::from_file(&path),
            Err(KekError::File(FileError::Readable { mode: 0o644, .. }))
        ));
        let sealed = a.seal("p", b"x");
        assert!(Kek::derive("ab".repeat(32).as_bytes())
            .open("p", &sealed, "x")
            .is_ok());
    }
}
