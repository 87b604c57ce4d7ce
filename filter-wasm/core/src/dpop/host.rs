//! ES256 proofs verified by the host's crypto library: what the Wasm filter asks Envoy's
//! BoringSSL through the foreign function `verify_signature` (Envoy's
//! `source/extensions/common/wasm/ext/verify_signature.proto`: a hash name, a DER
//! `SubjectPublicKeyInfo`, a DER signature and the signed text in; a `result` flag and an `error`
//! text out), and how a VM finds out at start whether to trust it.
//!
//! Pure: the adapter makes the call ([`ForeignCall`]); this module writes the request (protobuf,
//! by hand: four fields), reads the answer, and runs the known-answer check ([`host_answers_rightly`]).
//! A host that answers anything but a well-formed `result` leaves the decision to the module's
//! own code ([`shared::dpop::Es256Verifier`]'s `None`): no answer ever accepts a proof.

use shared::dpop::der::{es256_sig_der, p256_spki};
use shared::dpop::Es256Verifier;

/// The foreign function's name in Envoy.
pub const VERIFY_SIGNATURE: &str = "verify_signature";

/// Makes the foreign call: the serialized arguments in, the serialized answer out, `None` when
/// the host refuses the call (no such function, a bad argument, a failure).
pub trait ForeignCall {
    /// Calls [`VERIFY_SIGNATURE`] with `arguments`.
    fn verify_signature(&self, arguments: &[u8]) -> Option<Vec<u8>>;
}

/// Who verifies this VM's ES256 proofs: its own code (the default), or a host found to answer
/// rightly. A `'static` verifier: the adapter's is a unit value, so the state stays `Send`.
#[derive(Clone, Copy, Default)]
pub struct Es256By(Option<&'static (dyn Es256Verifier + Sync)>);

impl Es256By {
    /// The module's own code.
    pub const MODULE: Self = Self(None);

    /// `host`, which [`host_answers_rightly`] has checked.
    pub fn host(host: &'static (dyn Es256Verifier + Sync)) -> Self {
        Self(Some(host))
    }

    /// The verifier to hand [`shared::dpop::check_proof_with`].
    pub fn verifier(self) -> Option<&'static dyn Es256Verifier> {
        match self.0 {
            Some(v) => Some(v),
            None => None,
        }
    }

    /// `host` or `module`, for logs.
    pub fn name(self) -> &'static str {
        if self.0.is_some() {
            "host"
        } else {
            "module"
        }
    }
}

impl core::fmt::Debug for Es256By {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// ES256 through a host's `verify_signature`: an [`Es256Verifier`] over any [`ForeignCall`].
pub struct HostEs256<C>(pub C);

impl<C: ForeignCall> Es256Verifier for HostEs256<C> {
    fn verify_es256(
        &self,
        x: &[u8; 32],
        y: &[u8; 32],
        signed: &[u8],
        sig: &[u8; 64],
    ) -> Option<bool> {
        let answer = self.0.verify_signature(&request(x, y, signed, sig))?;
        read_answer(&answer)
    }
}

/// A protobuf field's key: its number and wire type.
fn key(field: u8, wire: u8) -> u8 {
    field << 3 | wire
}

fn varint(out: &mut Vec<u8>, mut n: usize) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn bytes_field(out: &mut Vec<u8>, field: u8, value: &[u8]) {
    out.push(key(field, 2));
    varint(out, value.len());
    out.extend_from_slice(value);
}

/// The serialized `VerifySignatureArguments`: `hash_function` (1) `sha256`, `public_key` (2) the
/// point's SPKI, `signature` (3) the DER signature, `text` (4) the signed bytes.
pub fn request(x: &[u8; 32], y: &[u8; 32], signed: &[u8], sig: &[u8; 64]) -> Vec<u8> {
    let spki = p256_spki(x, y);
    let der = es256_sig_der(sig);
    let mut out = Vec::with_capacity(signed.len() + spki.len() + der.as_bytes().len() + 16);
    bytes_field(&mut out, 1, b"sha256");
    bytes_field(&mut out, 2, &spki);
    bytes_field(&mut out, 3, der.as_bytes());
    bytes_field(&mut out, 4, signed);
    out
}

fn read_varint(input: &mut &[u8]) -> Option<u64> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = input.split_first()?;
        *input = rest;
        n |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(n);
        }
    }
    None
}

/// The `result` of a serialized `VerifySignatureResult`: `Some(true)` only for a well-formed
/// message whose field 1 (a varint) is 1 and last; `Some(false)` for one without it or with 0
/// (proto3 leaves a false flag out); `None` for bytes that are no such message.
pub fn read_answer(mut input: &[u8]) -> Option<bool> {
    let mut result = false;
    while !input.is_empty() {
        let tag = read_varint(&mut input)?;
        match (tag >> 3, tag & 7) {
            (1, 0) => {
                result = match read_varint(&mut input)? {
                    0 => false,
                    1 => true,
                    _ => return None,
                }
            }
            (0, _) => return None,
            (_, 0) => {
                read_varint(&mut input)?;
            }
            (_, 2) => {
                let len = usize::try_from(read_varint(&mut input)?).ok()?;
                input = input.get(len..)?;
            }
            _ => return None,
        }
    }
    Some(result)
}

/// The known answer: a P-256 key, a text and its signature (made once by another library, with
/// both halves of the signature's integers taking a DER leading zero), and its low-`s` twin.
const KNOWN_X: [u8; 32] = [
    0x3a, 0xd3, 0x86, 0x1a, 0x95, 0x62, 0x13, 0x92, 0x51, 0x6b, 0xb5, 0x93, 0xef, 0x05, 0x58, 0x3e,
    0xd2, 0xe5, 0x86, 0x6f, 0x5c, 0xb6, 0x26, 0x0a, 0x30, 0x17, 0x23, 0x7f, 0xd8, 0x9b, 0x90, 0xaf,
];
const KNOWN_Y: [u8; 32] = [
    0xd0, 0x96, 0x1c, 0x7e, 0x37, 0x07, 0x5a, 0x67, 0x91, 0xa3, 0x9c, 0x61, 0xf5, 0x62, 0x95, 0xb0,
    0x2b, 0x6d, 0x26, 0x56, 0x7b, 0x61, 0x5e, 0x60, 0xaa, 0x41, 0xee, 0x1c, 0x8e, 0x83, 0x38, 0x8d,
];
const KNOWN_TEXT: &[u8] = b"mms_auth: does the host verify ES256?";
const KNOWN_SIG: [u8; 64] = [
    0xd5, 0x21, 0x66, 0x25, 0xe1, 0xf4, 0xd9, 0x80, 0x4e, 0x05, 0xc5, 0x8a, 0xc7, 0x2a, 0xc7, 0xca,
    0xd8, 0xd4, 0xbd, 0xbd, 0xe3, 0xb9, 0x01, 0xf4, 0x70, 0x2f, 0x13, 0xc4, 0xe7, 0x54, 0x24, 0x13,
    0x8b, 0xb5, 0x1d, 0x59, 0x53, 0x9a, 0xff, 0xc4, 0xf2, 0xae, 0xad, 0xf7, 0x7d, 0xdb, 0x82, 0x47,
    0xce, 0xcd, 0xda, 0x04, 0x36, 0xfd, 0x62, 0x41, 0xec, 0x54, 0x9f, 0x67, 0x3e, 0xfe, 0x04, 0x42,
];
/// `n - s` of [`KNOWN_SIG`]: the same signature with the low `s`.
const KNOWN_LOW_S: [u8; 32] = [
    0x74, 0x4a, 0xe2, 0xa5, 0xac, 0x65, 0x00, 0x3c, 0x0d, 0x51, 0x52, 0x08, 0x82, 0x24, 0x7d, 0xb7,
    0xee, 0x19, 0x20, 0xa9, 0x70, 0x1a, 0x3c, 0x43, 0x07, 0x65, 0x2b, 0x5b, 0xbd, 0x65, 0x21, 0x0f,
];

/// Whether `host` verifies as the module does, asked once per VM at start: the known signature
/// accepted with either `s` (WebCrypto makes both), and refused over another text or with a
/// changed `r`. Anything else (no answer, an unreadable one, a wrong one) keeps the VM on its
/// own verification.
pub fn host_answers_rightly(host: &dyn Es256Verifier) -> bool {
    let mut low = KNOWN_SIG;
    low[32..].copy_from_slice(&KNOWN_LOW_S);
    let mut other_r = KNOWN_SIG;
    other_r[31] ^= 1;
    let ask = |text: &[u8], sig: &[u8; 64]| host.verify_es256(&KNOWN_X, &KNOWN_Y, text, sig);
    ask(KNOWN_TEXT, &KNOWN_SIG) == Some(true)
        && ask(KNOWN_TEXT, &low) == Some(true)
        && ask(b"mms_auth: does the host verify ES256!", &KNOWN_SIG) == Some(false)
        && ask(KNOWN_TEXT, &other_r) == Some(false)
}

#[cfg(test)]
pub(crate) mod tests;
