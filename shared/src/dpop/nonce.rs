//! Stateless DPoP server nonces (RFC 9449 section 8).
//!
//! A nonce is `base64url(kid || slot || tag)`: the 4-byte big-endian id of the key that made it,
//! the 8-byte big-endian time slot `now / window`, and the first 16 bytes of
//! HMAC-SHA256(key, `"mmat-dpop-nonce1" || kid || slot`). The domain string keeps the MAC input
//! apart from every token's (which starts `mmat1.` or `mmat2.`). Any issuer and any edge holding
//! the key accepts it: a nonce is good in its own slot and in the slots either side, so it lives
//! between one and two windows and tolerates a window of clock difference. Nothing is stored; a
//! replay of a whole proof within its life is stopped by the `jti` cache, not by the nonce.

use crate::key::{Key, KeyRing};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::Mac as _;

const DOMAIN: &[u8] = b"mmat-dpop-nonce1";
const TAG_LEN: usize = 16;
const RAW_LEN: usize = 4 + 8 + TAG_LEN;
/// Length of a nonce in characters.
pub const NONCE_LEN: usize = 38;

fn tag(key: &Key, slot: u64) -> [u8; TAG_LEN] {
    let mut mac = key.mac();
    mac.update(DOMAIN);
    mac.update(&key.id().to_be_bytes());
    mac.update(&slot.to_be_bytes());
    let full = mac.finalize().into_bytes();
    let mut out = [0u8; TAG_LEN];
    out.copy_from_slice(&full[..TAG_LEN]);
    out
}

/// A nonce for the time `now` (seconds since the Unix epoch) under `key`; `window` (seconds, at
/// least 1) is the slot length, the same everywhere the nonce is checked.
pub fn nonce_for(key: &Key, now: u64, window: u64) -> String {
    let slot = now / window.max(1);
    let mut raw = [0u8; RAW_LEN];
    raw[..4].copy_from_slice(&key.id().to_be_bytes());
    raw[4..12].copy_from_slice(&slot.to_be_bytes());
    raw[12..].copy_from_slice(&tag(key, slot));
    URL_SAFE_NO_PAD.encode(raw)
}

/// Whether `nonce` was made by [`nonce_for`] under a key of `ring` with the same `window`, in
/// the slot of `now` or one either side.
pub fn nonce_ok(ring: &KeyRing, nonce: &str, now: u64, window: u64) -> bool {
    let mut raw = [0u8; RAW_LEN];
    if nonce.len() != NONCE_LEN || URL_SAFE_NO_PAD.decode_slice(nonce, &mut raw) != Ok(RAW_LEN) {
        return false;
    }
    let mut kid = [0u8; 4];
    kid.copy_from_slice(&raw[..4]);
    let mut slot = [0u8; 8];
    slot.copy_from_slice(&raw[4..12]);
    let slot = u64::from_be_bytes(slot);
    let Some(key) = ring.get(u32::from_be_bytes(kid)) else {
        return false;
    };
    let current = now / window.max(1);
    if slot.abs_diff(current) > 1 {
        return false;
    }
    subtle::ConstantTimeEq::ct_eq(&tag(key, slot)[..], &raw[12..]).into()
}
