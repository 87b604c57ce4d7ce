//! ES256 in the DER forms a host's crypto library takes (BoringSSL's `EVP_DigestVerify`, which
//! Envoy offers Wasm filters as the foreign function `verify_signature`): a JWS signature, the raw
//! 64 bytes `r ‖ s` of RFC 7518 section 3.4, as an `ECDSA-Sig-Value` (RFC 3279 section 2.2.3), and
//! a JWK's P-256 point as a `SubjectPublicKeyInfo` (RFC 5480). Both are canonical DER: one
//! encoding per input, no parsing, no allocation.
//!
//! Pure and total: any 64 bytes make a well-formed `ECDSA-Sig-Value` (the verifier refuses a zero
//! or out-of-range `r` or `s`; [`super::check_proof_with`] refuses them before any host is asked).

/// The longest `ECDSA-Sig-Value` of two 32-byte integers: a SEQUENCE header of 2 bytes and two
/// INTEGERs of at most 2 + 33 bytes each (a leading zero when the high bit is set).
pub const MAX_SIG_DER_LEN: usize = 72;

/// Length of a P-256 `SubjectPublicKeyInfo` with an uncompressed point.
pub const SPKI_LEN: usize = 91;

/// Everything of a P-256 `SubjectPublicKeyInfo` before the point's 64 coordinate bytes:
/// SEQUENCE (89 bytes) { SEQUENCE (19) { OID id-ecPublicKey 1.2.840.10045.2.1,
/// OID prime256v1 1.2.840.10045.3.1.7 }, BIT STRING (66 bytes: no unused bits, 0x04) }.
const SPKI_PREFIX: [u8; 27] = [
    0x30, 0x59, // SEQUENCE, 89 bytes
    0x30, 0x13, // SEQUENCE, 19 bytes: the algorithm
    0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, // id-ecPublicKey
    0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, // prime256v1
    0x03, 0x42, 0x00, // BIT STRING, 66 bytes, no unused bits
    0x04, // SEC 1 uncompressed point
];

/// The `SubjectPublicKeyInfo` of the P-256 point (`x`, `y`), big-endian coordinates as a JWK
/// carries them. Whether the point is on the curve is the verifier's to check.
pub fn p256_spki(x: &[u8; 32], y: &[u8; 32]) -> [u8; SPKI_LEN] {
    let mut out = [0u8; SPKI_LEN];
    out[..SPKI_PREFIX.len()].copy_from_slice(&SPKI_PREFIX);
    out[SPKI_PREFIX.len()..SPKI_PREFIX.len() + 32].copy_from_slice(x);
    out[SPKI_PREFIX.len() + 32..].copy_from_slice(y);
    out
}

/// A DER signature being written: [`MAX_SIG_DER_LEN`] bytes of room, `len` of them used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigDer {
    buf: [u8; MAX_SIG_DER_LEN],
    len: usize,
}

impl SigDer {
    /// The encoding.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    fn push(&mut self, byte: u8) {
        self.buf[self.len] = byte;
        self.len += 1;
    }

    /// A non-negative INTEGER of the big-endian `n`: its leading zero bytes dropped (one zero
    /// byte for 0), and a zero byte put back when the first one left has its high bit set.
    fn integer(&mut self, n: &[u8; 32]) {
        let start = n.iter().position(|&b| b != 0).unwrap_or(n.len() - 1);
        let digits = &n[start..];
        let pad = usize::from(digits[0] & 0x80 != 0);
        self.push(0x02);
        // At most 33: a single length byte.
        self.push((digits.len() + pad) as u8);
        if pad == 1 {
            self.push(0);
        }
        for &d in digits {
            self.push(d);
        }
    }
}

/// The `ECDSA-Sig-Value` `SEQUENCE { r INTEGER, s INTEGER }` of a JWS ES256 signature
/// `r ‖ s` (32 bytes each, big-endian).
pub fn es256_sig_der(raw: &[u8; 64]) -> SigDer {
    let mut r = [0u8; 32];
    let mut s = [0u8; 32];
    r.copy_from_slice(&raw[..32]);
    s.copy_from_slice(&raw[32..]);
    let mut body = SigDer {
        buf: [0; MAX_SIG_DER_LEN],
        len: 0,
    };
    body.integer(&r);
    body.integer(&s);
    let mut out = SigDer {
        buf: [0; MAX_SIG_DER_LEN],
        len: 0,
    };
    out.push(0x30);
    // At most 70: a single length byte.
    out.push(body.len as u8);
    for &b in body.as_bytes() {
        out.push(b);
    }
    out
}

#[cfg(test)]
mod tests;
