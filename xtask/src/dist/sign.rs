//! `dist/SHA256SUMS.sig`: a detached Ed25519 signature (RFC 8032, over the bytes of
//! `SHA256SUMS` as they are) made with the release manager's key, `cargo xtask dist --sign-key
//! FILE`. The key is an unencrypted PKCS#8 PEM (`openssl genpkey -algorithm ed25519 -out FILE`),
//! mode 0600 and kept outside the repository; its public half is published apart from the
//! artifacts. The signature is the 64 raw bytes stock OpenSSL reads:
//!
//! ```sh
//! openssl pkeyutl -verify -pubin -inkey release.pub -rawin -in SHA256SUMS -sigfile SHA256SUMS.sig
//! ```
//!
//! Without a key, `dist` says that `SHA256SUMS` is unsigned. The check of `cargo xtask test`
//! (`check::check_signature`) signs with a throwaway key and verifies with OpenSSL.

use crate::util::root;
use anyhow::{bail, ensure, Context, Result};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey};
use std::path::Path;

pub const FILE: &str = "SHA256SUMS.sig";

/// What every Ed25519 private key in PKCS#8 (RFC 8410, version 1) begins with: the sequence, the
/// version 0, the algorithm `id-Ed25519` (1.3.101.112) and the octet string holding the 32-byte
/// seed as an octet string.
const PKCS8_V1: [u8; 16] = [
    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];
/// The same for version 2 (RFC 5958's `OneAsymmetricKey`), the public key following the seed.
const PKCS8_V2: [u8; 16] = [
    0x30, 0x51, 0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20,
];
/// What follows the seed in version 2: the public key, `[1]` as a bit string.
const PKCS8_V2_PUBLIC: [u8; 3] = [0x81, 0x21, 0x00];
/// What an Ed25519 public key in SubjectPublicKeyInfo (RFC 8410) begins with.
const SPKI: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// The base64 between `-----BEGIN LABEL-----` and `-----END LABEL-----` of `pem`, decoded.
fn pem_body(pem: &str, label: &str) -> Option<Vec<u8>> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = pem.find(&begin)? + begin.len();
    let len = pem[start..].find(&end)?;
    let text: String = pem[start..start + len]
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    STANDARD.decode(text).ok()
}

/// The Ed25519 key of a PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`, as `openssl genpkey
/// -algorithm ed25519` writes it; version 2, with the public key, is read too).
pub fn signing_key_from_pem(pem: &str) -> Result<SigningKey> {
    if pem.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        bail!(
            "the signing key is encrypted: give its plain PKCS#8 form \
             (openssl pkey -in KEY -out PLAIN, on a private tmpfs), removed after signing"
        );
    }
    let der = pem_body(pem, "PRIVATE KEY")
        .context("not a PEM private key (-----BEGIN PRIVATE KEY-----)")?;
    let seed_at = PKCS8_V1.len();
    let seed = |der: &[u8]| -> [u8; 32] {
        let mut seed = [0; 32];
        seed.copy_from_slice(&der[seed_at..seed_at + 32]);
        seed
    };
    if der.len() == 48 && der[..seed_at] == PKCS8_V1 {
        return Ok(SigningKey::from_bytes(&seed(&der)));
    }
    let public_at = seed_at + 32 + PKCS8_V2_PUBLIC.len();
    if der.len() == 83
        && der[..seed_at] == PKCS8_V2
        && der[seed_at + 32..public_at] == PKCS8_V2_PUBLIC
    {
        let key = SigningKey::from_bytes(&seed(&der));
        ensure!(
            key.verifying_key().as_bytes()[..] == der[public_at..],
            "the key's public half is not its private key's"
        );
        return Ok(key);
    }
    bail!("not an Ed25519 private key (openssl genpkey -algorithm ed25519 -out FILE makes one)")
}

/// The public half of `key` as a PEM (`-----BEGIN PUBLIC KEY-----`), as `openssl pkey -pubout`
/// writes it.
pub fn public_key_pem(key: &SigningKey) -> String {
    let mut der = SPKI.to_vec();
    der.extend_from_slice(key.verifying_key().as_bytes());
    format!(
        "-----BEGIN PUBLIC KEY-----\n{}\n-----END PUBLIC KEY-----\n",
        STANDARD.encode(der)
    )
}

/// The detached signature of `message`: Ed25519 (pure, RFC 8032), 64 bytes.
pub fn sign(key: &SigningKey, message: &[u8]) -> [u8; 64] {
    key.sign(message).to_bytes()
}

/// Reads the signing key in `path`: a file only its owner may read or write, outside the
/// repository.
pub fn read_key(path: &Path) -> Result<SigningKey> {
    use std::os::unix::fs::PermissionsExt;
    let full = path
        .canonicalize()
        .with_context(|| format!("{}", path.display()))?;
    let repository = root().canonicalize()?;
    ensure!(
        !full.starts_with(&repository),
        "{}: the signing key is in the repository; keep it outside ({})",
        path.display(),
        repository.display()
    );
    let meta = std::fs::metadata(&full)?;
    ensure!(
        meta.permissions().mode() & 0o077 == 0,
        "{}: group or others may read or write the signing key: chmod 0600 it",
        path.display()
    );
    let pem = std::fs::read_to_string(path).with_context(|| format!("{}", path.display()))?;
    signing_key_from_pem(&pem).with_context(|| format!("{}", path.display()))
}

/// Writes `dir/SHA256SUMS.sig`, the signature of `dir/SHA256SUMS` under `key`; returns the
/// public key's PEM, to compare with the published one.
pub fn sign_sums(dir: &Path, key: &SigningKey) -> Result<String> {
    let sums = std::fs::read(dir.join(super::sums::FILE))?;
    std::fs::write(dir.join(FILE), sign(key, &sums))?;
    Ok(public_key_pem(key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Verifier as _;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 8032's first test vector, as a PKCS#8 PEM (version 1).
    const SECRET: &str = "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60";
    const PUBLIC: &str = "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a";
    const SIGNATURE: &str = "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e06522490155\
                             5fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b";

    fn pem(der: &[u8], label: &str) -> String {
        format!(
            "-----BEGIN {label}-----\n{}\n-----END {label}-----\n",
            STANDARD.encode(der)
        )
    }

    fn v1() -> String {
        let mut der = PKCS8_V1.to_vec();
        der.extend(hex(SECRET));
        pem(&der, "PRIVATE KEY")
    }

    #[test]
    fn signatures_are_rfc_8032s() {
        let key = signing_key_from_pem(&v1()).unwrap();
        assert_eq!(key.verifying_key().as_bytes()[..], hex(PUBLIC)[..]);
        assert_eq!(sign(&key, b"")[..], hex(SIGNATURE)[..]);
        let sums = b"0123abcd  issuer\n";
        let sig = ed25519_dalek::Signature::from_bytes(&sign(&key, sums));
        assert!(key.verifying_key().verify(sums, &sig).is_ok());
        assert!(key
            .verifying_key()
            .verify(b"0123abce  issuer\n", &sig)
            .is_err());
    }

    #[test]
    fn the_public_key_is_written_as_openssl_writes_it() {
        let key = signing_key_from_pem(&v1()).unwrap();
        // `openssl pkey -pubout` of the same key.
        assert_eq!(
            public_key_pem(&key),
            "-----BEGIN PUBLIC KEY-----\n\
             MCowBQYDK2VwAyEA11qYAYKxCrfVS/7TyWQHOg7hcvPapiMlrwIaaPcHURo=\n\
             -----END PUBLIC KEY-----\n"
        );
    }

    #[test]
    fn only_ed25519_private_keys_are_read() {
        // Version 2, its public key included, and wrapped lines.
        let mut der = PKCS8_V2.to_vec();
        der.extend(hex(SECRET));
        der.extend(PKCS8_V2_PUBLIC);
        der.extend(hex(PUBLIC));
        let wrapped = pem(&der, "PRIVATE KEY").replacen("MFEC", "MFEC\n", 1);
        let key = signing_key_from_pem(&wrapped).unwrap();
        assert_eq!(key.verifying_key().as_bytes()[..], hex(PUBLIC)[..]);
        let last = der.len() - 1;
        der[last] ^= 1;
        let e = signing_key_from_pem(&pem(&der, "PRIVATE KEY")).unwrap_err();
        assert!(e.to_string().contains("public half"), "{e}");
        // Another algorithm (X25519, 1.3.101.110), the public key, an encrypted key, garbage.
        let mut x25519 = PKCS8_V1.to_vec();
        x25519[11] = 0x6e;
        x25519.extend(hex(SECRET));
        let key = signing_key_from_pem(&v1()).unwrap();
        for (bad, why) in [
            (pem(&x25519, "PRIVATE KEY"), "not an Ed25519"),
            (public_key_pem(&key), "not a PEM private key"),
            (pem(&[1, 2], "ENCRYPTED PRIVATE KEY"), "encrypted"),
            (
                "-----BEGIN PRIVATE KEY-----\n!!\n-----END PRIVATE KEY-----\n".into(),
                "not a PEM",
            ),
            (pem(&PKCS8_V1, "PRIVATE KEY"), "not an Ed25519"),
        ] {
            let e = signing_key_from_pem(&bad).unwrap_err();
            assert!(e.to_string().contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn a_key_file_is_private_and_outside_the_repository() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("xtask-sign-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("release.key");
        std::fs::write(&path, v1()).unwrap();
        std::fs::set_permissions(&path, PermissionsExt::from_mode(0o640)).unwrap();
        let e = read_key(&path).unwrap_err();
        assert!(e.to_string().contains("chmod 0600"), "{e}");
        std::fs::set_permissions(&path, PermissionsExt::from_mode(0o600)).unwrap();
        let key = read_key(&path).unwrap();
        // Signed in a folder, the signature is the file's beside it.
        std::fs::write(dir.join(super::super::sums::FILE), b"0123  issuer\n").unwrap();
        let public = sign_sums(&dir, &key).unwrap();
        assert_eq!(public, public_key_pem(&key));
        let sig = std::fs::read(dir.join(FILE)).unwrap();
        assert_eq!(sig, sign(&key, b"0123  issuer\n"));
        std::fs::remove_dir_all(&dir).unwrap();
        let inside = root().join("Cargo.toml");
        let e = read_key(&inside).unwrap_err();
        assert!(e.to_string().contains("in the repository"), "{e}");
    }
}
