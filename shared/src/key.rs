//! Token signing keys and the key ring that verification picks them from.

use core::fmt;
use hmac::{Hmac, KeyInit};
use sha2::Sha256;
use zeroize::Zeroizing;

pub(crate) type HmacSha256 = Hmac<Sha256>;
/// SHA-256's block, in bytes: the length of an HMAC-SHA256 key once padded.
const HMAC_BLOCK_LEN: usize = 64;

/// Length of every key in bytes (256 bits).
pub const KEY_LEN: usize = 32;

/// One HMAC-SHA256 key with its id. The secret is zeroized on drop and never printed.
///
/// The key also keeps HMAC's keyed inner and outer hash states, computed once here, so a token
/// costs two SHA-256 blocks fewer. Those states are as secret as the key: they are wiped on drop
/// too (the `zeroize` features of `hmac` and `sha2`, checked below at compile time).
#[derive(Clone)]
pub struct Key {
    id: u32,
    secret: Zeroizing<[u8; KEY_LEN]>,
    keyed: HmacSha256,
}

// Fails to compile if the hash states a `Key` keeps stop being wiped on drop.
const _: () = {
    fn wiped_on_drop<T: zeroize::ZeroizeOnDrop>() {}
    let _ = wiped_on_drop::<sha2::block_api::Sha256VarCore>;
    let _ = wiped_on_drop::<
        hmac::digest::block_buffer::BlockBuffer<
            hmac::digest::consts::U64,
            hmac::digest::block_buffer::Eager,
        >,
    >;
};

impl Key {
    /// A key from its id and 32 secret bytes.
    pub fn new(id: u32, secret: [u8; KEY_LEN]) -> Self {
        let secret = Zeroizing::new(secret);
        // HMAC pads a key shorter than the hash's block with zeros: padded here, the key is the
        // block-sized one whose constructor cannot fail, and the states are the same. The padded
        // copy is not wiped, as the one `new_from_slice` made inside `hmac` was not: wiping its
        // 64 bytes added 1.6 KB to the Wasm module.
        let mut block = [0u8; HMAC_BLOCK_LEN];
        block[..KEY_LEN].copy_from_slice(&*secret);
        let keyed = HmacSha256::new((&block).into());
        Self { id, secret, keyed }
    }

    /// A key from its id and a secret of any length; `None` unless it is exactly 32 bytes.
    pub fn from_slice(id: u32, secret: &[u8]) -> Option<Self> {
        let bytes: [u8; KEY_LEN] = secret.try_into().ok()?;
        Some(Self::new(id, bytes))
    }

    /// The key id carried in tokens signed with this key.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The secret bytes, for storage and for configuration export only.
    pub fn secret(&self) -> &[u8; KEY_LEN] {
        &self.secret
    }

    /// A fresh HMAC computation under this key, started from the precomputed states.
    pub(crate) fn mac(&self) -> HmacSha256 {
        self.keyed.clone()
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Key")
            .field("id", &self.id)
            .field("secret", &"[redacted]")
            .finish()
    }
}

/// The keys that may verify tokens, and the one that signs new ones.
///
/// Verification looks a key up by the id in the token; it never tries several keys.
#[derive(Clone, Debug, Default)]
pub struct KeyRing {
    keys: Vec<Key>,
    signing: Option<u32>,
}

impl KeyRing {
    /// A ring of the given keys; `signing` names the key that signs (it must be one of them).
    /// Returns `None` if two keys share an id or the signing id is not in the ring.
    pub fn new(mut keys: Vec<Key>, signing: Option<u32>) -> Option<Self> {
        keys.sort_by_key(Key::id);
        if keys.windows(2).any(|w| w[0].id == w[1].id) {
            return None;
        }
        if let Some(id) = signing {
            keys.binary_search_by_key(&id, Key::id).ok()?;
        }
        Some(Self { keys, signing })
    }

    /// The key with this id, if the ring holds it.
    pub fn get(&self, id: u32) -> Option<&Key> {
        self.keys
            .binary_search_by_key(&id, Key::id)
            .ok()
            .map(|i| &self.keys[i])
    }

    /// The key new tokens are signed with.
    pub fn signing_key(&self) -> Option<&Key> {
        self.signing.and_then(|id| self.get(id))
    }

    /// Every key of the ring, by ascending id.
    pub fn keys(&self) -> &[Key] {
        &self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_secret() {
        let key = Key::new(7, [0xAB; KEY_LEN]);
        let shown = format!("{key:?} {:?}", KeyRing::new(vec![key.clone()], Some(7)));
        assert!(shown.contains("redacted"));
        assert!(!shown.to_lowercase().contains("ab, ab") && !shown.contains("171"));
    }

    #[test]
    fn ring_rejects_duplicate_ids_and_unknown_signing_key() {
        let a = Key::new(1, [1; KEY_LEN]);
        assert!(KeyRing::new(vec![a.clone(), a.clone()], None).is_none());
        assert!(KeyRing::new(vec![a.clone()], Some(2)).is_none());
        let ring = KeyRing::new(vec![Key::new(3, [3; KEY_LEN]), a], Some(3)).unwrap();
        assert_eq!(ring.signing_key().map(Key::id), Some(3));
        assert_eq!(ring.get(1).map(Key::id), Some(1));
        assert!(ring.get(2).is_none());
    }

    #[test]
    fn from_slice_requires_exactly_32_bytes() {
        assert!(Key::from_slice(1, &[0; 31]).is_none());
        assert!(Key::from_slice(1, &[0; 33]).is_none());
        assert!(Key::from_slice(1, &[0; 32]).is_some());
    }
}
