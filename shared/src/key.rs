//! Token signing keys and the key ring that verification picks them from.

use core::fmt;
use zeroize::Zeroizing;

/// Length of every key in bytes (256 bits).
pub const KEY_LEN: usize = 32;

/// One HMAC-SHA256 key with its id. The secret is zeroized on drop and never printed.
#[derive(Clone)]
pub struct Key {
    id: u32,
    secret: Zeroizing<[u8; KEY_LEN]>,
}

impl Key {
    /// A key from its id and 32 secret bytes.
    pub fn new(id: u32, secret: [u8; KEY_LEN]) -> Self {
        Self {
            id,
            secret: Zeroizing::new(secret),
        }
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
