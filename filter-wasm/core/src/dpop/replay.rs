//! The memory that accepts a DPoP proof once per Envoy: proof ids with their expiry, bounded.
//! Full means refused (503, `Retry-After: 1`), never "forget one and accept": a forgotten id
//! could be replayed. [`ReplayCache`] is the structure; the native filter keeps one per process
//! behind locks, and the Wasm filter keeps buckets of it in Envoy's shared data
//! ([`ReplayCache::from_bytes`], [`ReplayCache::to_bytes`]), which every worker's VM reads.

use std::collections::hash_map::{Entry, HashMap};
use std::sync::{Mutex, PoisonError};

/// Why a proof is not accepted by the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Its id is remembered: the proof was used before.
    Replayed,
    /// No room, and no expired id to reclaim.
    Full,
}

/// Where an adapter keeps the ids it accepted.
pub trait Replays {
    /// Accepts `id` until `expires`, or says why not.
    fn first_use(&self, id: &[u8; 16], expires: u64, now: u64) -> Result<(), Replay>;
}

/// Bytes one id takes in [`ReplayCache::to_bytes`].
pub const ENTRY_BYTES: usize = 24;

/// Proof ids and their expiry, at most `capacity`.
#[derive(Debug, Clone, Default)]
pub struct ReplayCache {
    ids: HashMap<[u8; 16], u64>,
    capacity: usize,
    /// The second expired ids were last dropped: nothing more expires within it, so a full cache
    /// is swept at most once a second, not on every refused request.
    swept_at: u64,
}

impl ReplayCache {
    /// Empty, for at most `capacity` ids, with room for all of them reserved: the table never
    /// grows under load, so no request waits for it to be rebuilt.
    pub fn new(capacity: usize) -> Self {
        Self {
            ids: HashMap::with_capacity(capacity),
            capacity,
            swept_at: 0,
        }
    }

    /// Accepts `id` until `expires` unless it is remembered and not expired at `now`; expired
    /// ids are reclaimed when the memory is full.
    pub fn insert(&mut self, id: &[u8; 16], expires: u64, now: u64) -> Result<(), Replay> {
        let full = self.ids.len() >= self.capacity;
        if full && self.swept_at < now && !self.ids.contains_key(id) {
            self.ids.retain(|_, at| *at > now);
            self.swept_at = now;
        }
        let full = self.ids.len() >= self.capacity;
        match self.ids.entry(*id) {
            Entry::Occupied(e) if *e.get() > now => Err(Replay::Replayed),
            Entry::Occupied(mut e) => {
                e.insert(expires);
                Ok(())
            }
            Entry::Vacant(_) if full => Err(Replay::Full),
            Entry::Vacant(e) => {
                e.insert(expires);
                Ok(())
            }
        }
    }

    /// Raises the bound to `capacity` (never lowers it), reserving the room at once.
    pub fn grow(&mut self, capacity: usize) {
        if capacity > self.capacity {
            self.ids.reserve(capacity.saturating_sub(self.ids.len()));
            self.capacity = capacity;
        }
    }

    /// How many ids are held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True if none is.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// The ids not expired at `now`, as bytes ([`ENTRY_BYTES`] each).
    pub fn to_bytes(&self, now: u64) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.ids.len() * ENTRY_BYTES);
        for (id, at) in self.ids.iter().filter(|(_, at)| **at > now) {
            out.extend_from_slice(id);
            out.extend_from_slice(&at.to_be_bytes());
        }
        out
    }

    /// The memory [`ReplayCache::to_bytes`] wrote, for at most `capacity` ids; a trailing
    /// partial entry is ignored.
    pub fn from_bytes(bytes: &[u8], capacity: usize) -> Self {
        let mut ids = HashMap::with_capacity(bytes.len() / ENTRY_BYTES);
        for entry in bytes.chunks_exact(ENTRY_BYTES) {
            let mut id = [0u8; 16];
            id.copy_from_slice(&entry[..16]);
            let mut at = [0u8; 8];
            at.copy_from_slice(&entry[16..]);
            ids.insert(id, u64::from_be_bytes(at));
        }
        Self {
            ids,
            capacity,
            swept_at: 0,
        }
    }
}

/// The memory split in locked shards by the id's first byte, so workers rarely wait on each
/// other: the native filter keeps one per process.
#[derive(Debug)]
pub struct ShardedReplays {
    shards: Vec<Mutex<ReplayCache>>,
}

/// Shards of [`ShardedReplays`].
pub const SHARDS: usize = 16;

impl ShardedReplays {
    /// Empty, for `capacity` ids in all (each shard holds its share, rounded up).
    pub fn new(capacity: usize) -> Self {
        let each = capacity.div_ceil(SHARDS);
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(ReplayCache::new(each)))
                .collect(),
        }
    }

    /// Raises the bound to `capacity` ids in all when it is larger, keeping every id held: a
    /// configuration that asks for more memory than the one before gets it without a restart.
    pub fn grow(&self, capacity: usize) {
        let each = capacity.div_ceil(SHARDS);
        for shard in &self.shards {
            shard
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .grow(each);
        }
    }
}

impl Replays for ShardedReplays {
    fn first_use(&self, id: &[u8; 16], expires: u64, now: u64) -> Result<(), Replay> {
        let shard = &self.shards[usize::from(id[0]) % self.shards.len()];
        shard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, expires, now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn once_until_expiry_then_again_and_full_is_refused() {
        let mut c = ReplayCache::new(2);
        assert_eq!(c.insert(&[1; 16], 100, 10), Ok(()));
        assert_eq!(c.insert(&[1; 16], 100, 99), Err(Replay::Replayed));
        assert_eq!(c.insert(&[2; 16], 50, 10), Ok(()));
        assert_eq!(c.insert(&[3; 16], 100, 10), Err(Replay::Full));
        assert_eq!(
            c.insert(&[3; 16], 100, 50),
            Ok(()),
            "an expired id reclaimed"
        );
        assert_eq!(
            c.insert(&[1; 16], 200, 100),
            Ok(()),
            "expired, accepted again"
        );
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn shards_share_the_work_and_refuse_a_replay_in_any() {
        let r = ShardedReplays::new(32);
        for b in 0..32u8 {
            assert_eq!(r.first_use(&[b; 16], 100, 0), Ok(()));
            assert_eq!(r.first_use(&[b; 16], 100, 1), Err(Replay::Replayed));
        }
        assert_eq!(r.first_use(&[0; 16], 100, 0).err(), Some(Replay::Replayed));
        assert_eq!(r.first_use(&[16; 16], 100, 0).err(), Some(Replay::Replayed));
        let mut one = [0u8; 16];
        one[1] = 1;
        assert_eq!(
            r.first_use(&one, 100, 0),
            Err(Replay::Full),
            "its shard holds 2"
        );
    }

    #[test]
    fn growing_keeps_the_ids_held_and_never_shrinks() {
        let r = ShardedReplays::new(SHARDS);
        assert_eq!(r.first_use(&[0; 16], 100, 0), Ok(()));
        let mut next = [0u8; 16];
        next[1] = 1;
        assert_eq!(r.first_use(&next, 100, 0), Err(Replay::Full), "one a shard");
        r.grow(2 * SHARDS);
        assert_eq!(r.first_use(&next, 100, 0), Ok(()), "two a shard now");
        assert_eq!(r.first_use(&[0; 16], 100, 1), Err(Replay::Replayed), "kept");
        r.grow(SHARDS);
        next[1] = 2;
        assert_eq!(r.first_use(&next, 100, 0), Err(Replay::Full), "not shrunk");
    }

    #[test]
    fn bytes_round_trip_without_expired_ids() {
        let mut c = ReplayCache::new(10);
        c.insert(&[1; 16], 100, 0).unwrap();
        c.insert(&[2; 16], 20, 0).unwrap();
        let bytes = c.to_bytes(30);
        assert_eq!(bytes.len(), ENTRY_BYTES);
        let mut back = ReplayCache::from_bytes(&bytes, 10);
        assert_eq!(back.insert(&[1; 16], 100, 31), Err(Replay::Replayed));
        assert_eq!(back.insert(&[2; 16], 100, 31), Ok(()));
        assert!(ReplayCache::from_bytes(&[0; 23], 10).is_empty());
    }
}
