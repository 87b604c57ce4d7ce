//! The memory that accepts a DPoP proof once: the id of each accepted proof until the proof
//! could no longer pass the clock check, bounded. Both filters keep one per Envoy (the native
//! build in locked shards, [`ShardedReplays`]; the Wasm build as bytes in Envoy's shared data,
//! [`ReplayCache::to_bytes`], each bucket read and written flat, [`FlatBucket`]) and the issuer's
//! embedded store one per issuer.
//!
//! Its invariant: **a proof is accepted at most once while it is fresh, and no client can make
//! the memory refuse another client's fresh proof.** How each half holds:
//! - A key (the proof key's thumbprint, [`Accepted::key`]) holds at most a quarter of a shard
//!   ([`ReplayCache::per_key`]): its next proofs are refused ([`Replay::KeyBusy`], 429) until
//!   its own expire. It takes four bound tokens under four keys to fill a shard.
//! - A full shard forgets instead of refusing: the oldest proof of the key that holds the most,
//!   and keeps a floor for that key, so its proofs that expire no later than the forgotten one
//!   are refused ([`Replay::TooOld`]); its newer ones pass, and no other key is touched. A flood
//!   under several keys costs the flooding keys their own memory, never an honest key's, unless
//!   that key holds the most. A key left with nothing but its floor is kept in a bounded list;
//!   beyond it, the oldest such floor becomes the shard's, the last resort.
//! - A proof dated before the memory began, plus the most a proof may be dated ahead
//!   ([`MAX_AHEAD_SECONDS`]), may have been accepted by the memory a restart lost: refused
//!   ([`Replay::TooOld`]). A client gets through again that many seconds after a restart.
//! - Expired ids leave a few on each insert, oldest first from an ordered index: no request ever
//!   walks the whole memory.

use super::MAX_AHEAD_SECONDS;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::{Mutex, PoisonError};

mod flat;
pub use flat::FlatBucket;

/// A proof that passed every check but this memory: what it remembers it by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accepted {
    /// A digest of the proof's key and `jti` ([`super::Proof::replay_id`]).
    pub id: [u8; 16],
    /// The first eight bytes of the key's thumbprint: whose proof it is.
    pub key: u64,
    /// When the proof says it was made (seconds since the epoch).
    pub iat: u64,
    /// Until when it is remembered (exclusive; [`super::Proof::remember_until`]).
    pub expires: u64,
}

/// Why a proof is not accepted by the memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replay {
    /// Its id is remembered: the proof was used before.
    Replayed,
    /// It is older than what the memory can vouch for (made before it began, or no newer than
    /// an id of its key that it forgot): it may have been used; a new proof passes.
    TooOld,
    /// Its key holds its whole share of the memory: that key waits for its own proofs to expire.
    KeyBusy,
    /// The memory could not be read or written (the Wasm filter's shared data): try again.
    Busy,
}

/// Where an adapter keeps the proofs it accepted.
pub trait Replays {
    /// Accepts `proof` until it expires, or says why not.
    fn first_use(&self, proof: &Accepted, now: u64) -> Result<(), Replay>;
}

/// Bytes one id takes in [`ReplayCache::to_bytes`].
pub const ENTRY_BYTES: usize = 32;

/// Expired ids an insert drops at most before its own.
const SWEEP_STEP: usize = 4;

#[derive(Debug, Clone, Copy)]
struct Held {
    expires: u64,
    key: u64,
}

#[derive(Debug, Clone, Default)]
struct KeyUse {
    /// The key's ids, oldest first.
    held: VecDeque<[u8; 16]>,
    floor: u64,
}

/// The bucket of the Wasm filter's memory, of `buckets`, that holds the proof id `id`: by its
/// first four bytes, so that any count of buckets gets an even share of ids.
pub fn bucket_of(id: &[u8; 16], buckets: usize) -> usize {
    let lead = u32::from_be_bytes([id[0], id[1], id[2], id[3]]);
    usize::try_from(lead).unwrap_or(usize::MAX) % buckets.max(1)
}

/// Proof ids with their key and expiry, at most `capacity`; one shard of the memory (the Wasm
/// filter's buckets are the same memory kept flat, [`FlatBucket`]).
#[derive(Debug, Clone, Default)]
pub struct ReplayCache {
    ids: HashMap<[u8; 16], Held>,
    by_expiry: BTreeSet<(u64, [u8; 16])>,
    keys: HashMap<u64, KeyUse>,
    /// Keys by how many ids each holds: the last holds the most.
    by_load: BTreeSet<(usize, u64)>,
    /// Keys that hold only a floor, with it, oldest first: at most `capacity`.
    orphans: VecDeque<(u64, u64)>,
    /// The shard's own floor: no proof expiring at or before it is accepted.
    floor: u64,
    capacity: usize,
}

impl ReplayCache {
    /// Empty, for at most `capacity` ids (at least 1), with room reserved.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1);
        Self {
            ids: HashMap::with_capacity(capacity),
            by_expiry: BTreeSet::new(),
            keys: HashMap::default(),
            by_load: BTreeSet::new(),
            orphans: VecDeque::new(),
            floor: 0,
            capacity,
        }
    }

    /// The most ids one key may hold: a quarter of the shard.
    pub fn per_key(&self) -> usize {
        (self.capacity / 4).max(1)
    }

    /// Accepts `p` unless its id is held and not expired at `now`, it is older than the memory
    /// vouches for, or its key holds its share; when full, forgets the oldest id of the key that
    /// holds the most.
    pub fn insert(&mut self, p: &Accepted, now: u64) -> Result<(), Replay> {
        self.sweep(now, SWEEP_STEP);
        if let Some(h) = self.ids.get(&p.id) {
            if h.expires > now {
                return Err(Replay::Replayed);
            }
            self.remove(&p.id, now);
        }
        let (held, floor) = self
            .keys
            .get(&p.key)
            .map_or((0, 0), |k| (k.held.len(), k.floor));
        if p.expires <= self.floor.max(floor) {
            return Err(Replay::TooOld);
        }
        if held >= self.per_key() {
            return Err(Replay::KeyBusy);
        }
        if self.ids.len() >= self.capacity {
            self.forget_from_the_heaviest(now);
        }
        self.hold(p.id, p.key, p.expires);
        Ok(())
    }

    fn hold(&mut self, id: [u8; 16], key: u64, expires: u64) {
        self.ids.insert(id, Held { expires, key });
        self.by_expiry.insert((expires, id));
        let k = self.keys.entry(key).or_default();
        let was = k.held.len();
        k.held.push_back(id);
        self.by_load.remove(&(was, key));
        self.by_load.insert((was + 1, key));
    }

    /// Drops `id`; its key's entry too when it holds nothing and its floor has passed.
    fn remove(&mut self, id: &[u8; 16], now: u64) -> Option<Held> {
        let held = self.ids.remove(id)?;
        self.by_expiry.remove(&(held.expires, *id));
        let Some(k) = self.keys.get_mut(&held.key) else {
            return Some(held);
        };
        let was = k.held.len();
        // Oldest first, so the id to drop is nearly always the first.
        if let Some(at) = k.held.iter().position(|h| h == id) {
            k.held.remove(at);
        }
        let (left, floor) = (k.held.len(), k.floor);
        self.by_load.remove(&(was, held.key));
        match left {
            0 if floor <= now => {
                self.keys.remove(&held.key);
            }
            0 => self.orphan(held.key, floor),
            n => {
                self.by_load.insert((n, held.key));
            }
        }
        Some(held)
    }

    /// Drops up to `step` expired ids, oldest first, and up to `step` floors that have passed.
    fn sweep(&mut self, now: u64, step: usize) {
        for _ in 0..step {
            match self.by_expiry.first() {
                Some(&(at, id)) if at <= now => {
                    self.remove(&id, now);
                }
                _ => break,
            }
        }
        for _ in 0..step {
            match self.orphans.front() {
                Some(&(floor, key)) if floor <= now => {
                    self.orphans.pop_front();
                    if self
                        .keys
                        .get(&key)
                        .is_some_and(|k| k.held.is_empty() && k.floor <= now)
                    {
                        self.keys.remove(&key);
                    }
                }
                _ => break,
            }
        }
    }

    /// Makes room by forgetting the oldest id of the key that holds the most, and keeps a floor
    /// for that key.
    fn forget_from_the_heaviest(&mut self, now: u64) {
        let Some(&(_, key)) = self.by_load.last() else {
            return;
        };
        let Some(k) = self.keys.get_mut(&key) else {
            return;
        };
        let Some(id) = k.held.front().copied() else {
            return;
        };
        if let Some(h) = self.ids.get(&id) {
            k.floor = k.floor.max(h.expires);
        }
        self.remove(&id, now);
    }

    /// Keeps `key`'s floor while it holds no id; beyond `capacity` such keys, the oldest one's
    /// floor becomes the shard's.
    fn orphan(&mut self, key: u64, floor: u64) {
        if self.orphans.len() >= self.capacity {
            if let Some((_, old)) = self.orphans.pop_front() {
                if self.keys.get(&old).is_some_and(|k| k.held.is_empty()) {
                    if let Some(k) = self.keys.remove(&old) {
                        self.floor = self.floor.max(k.floor);
                    }
                }
            }
        }
        self.orphans.push_back((floor, key));
    }

    /// Drops every id expired at `now` (oldest first, none other looked at); returns how many.
    pub fn drop_expired(&mut self, now: u64) -> usize {
        let before = self.ids.len();
        self.sweep(now, usize::MAX);
        before - self.ids.len()
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

    /// What is live at `now`, as bytes: the shard's floor, the keys' floors, then the ids
    /// ([`ENTRY_BYTES`] each).
    pub fn to_bytes(&self, now: u64) -> Vec<u8> {
        let floors: Vec<(u64, u64)> = self
            .keys
            .iter()
            .filter(|(_, k)| k.floor > now)
            .map(|(key, k)| (*key, k.floor))
            .collect();
        let mut out = Vec::with_capacity(12 + floors.len() * 16 + self.ids.len() * ENTRY_BYTES);
        out.extend_from_slice(&self.floor.to_be_bytes());
        out.extend_from_slice(&(floors.len() as u32).to_be_bytes());
        for (key, floor) in floors {
            out.extend_from_slice(&key.to_be_bytes());
            out.extend_from_slice(&floor.to_be_bytes());
        }
        // Oldest first, so that each key's ids read back in their order.
        for (expires, id) in self.by_expiry.iter().filter(|(at, _)| *at > now) {
            let key = self.ids.get(id).map_or(0, |h| h.key);
            out.extend_from_slice(id);
            out.extend_from_slice(&expires.to_be_bytes());
            out.extend_from_slice(&key.to_be_bytes());
        }
        out
    }

    /// The memory [`ReplayCache::to_bytes`] wrote, for at most `capacity` ids: its floors, each
    /// id held in turn as when it was written, then the keys left with a floor alone. Bytes too
    /// short for their own counts read as far as they go: a damaged record never fails a
    /// request. No request reads it (the Wasm filter reads its buckets flat, [`FlatBucket`]):
    /// it is what [`FlatBucket`] is held to.
    pub fn from_bytes(bytes: &[u8], capacity: usize) -> Self {
        let mut c = Self::new(capacity);
        let mut r = Reader(bytes);
        c.floor = r.u64().unwrap_or(0);
        for _ in 0..r.u32().unwrap_or(0) {
            let (Some(key), Some(floor)) = (r.u64(), r.u64()) else {
                break;
            };
            c.keys.entry(key).or_default().floor = floor;
        }
        while let (Some(id), Some(expires), Some(key)) = (r.id(), r.u64(), r.u64()) {
            if !c.ids.contains_key(&id) {
                c.hold(id, key, expires);
            }
        }
        let mut orphans: Vec<(u64, u64)> = c
            .keys
            .iter()
            .filter(|(_, k)| k.held.is_empty())
            .map(|(key, k)| (k.floor, *key))
            .collect();
        orphans.sort_unstable();
        c.orphans = orphans.into();
        c
    }
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take::<8>().map(u64::from_be_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take::<4>().map(u32::from_be_bytes)
    }
    fn id(&mut self) -> Option<[u8; 16]> {
        self.take::<16>()
    }
}

/// The memory split in locked shards by the id's first byte, so callers rarely wait on each
/// other: the native filter keeps one per process, the issuer's embedded store one per issuer.
#[derive(Debug)]
pub struct ShardedReplays {
    shards: Vec<Mutex<ReplayCache>>,
    since: u64,
}

/// Shards of [`ShardedReplays`].
pub const SHARDS: usize = 16;

impl ShardedReplays {
    /// Empty, for `capacity` ids in all (each shard holds its share, rounded up), begun at
    /// `since` (seconds since the epoch; 0 where another check covers restarts).
    pub fn new(capacity: usize, since: u64) -> Self {
        let each = capacity.div_ceil(SHARDS);
        Self {
            shards: (0..SHARDS)
                .map(|_| Mutex::new(ReplayCache::new(each)))
                .collect(),
            since,
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

impl ShardedReplays {
    /// Drops every id expired at `now`, a shard at a time; returns how many.
    pub fn drop_expired(&self, now: u64) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .drop_expired(now)
            })
            .sum()
    }
}

/// Whether a proof may have been accepted by a memory that began at `since` and was lost:
/// dated before it began plus the most a proof may be dated ahead.
pub fn predates(proof: &Accepted, since: u64) -> bool {
    since > 0 && proof.iat < since.saturating_add(MAX_AHEAD_SECONDS)
}

impl Replays for ShardedReplays {
    fn first_use(&self, proof: &Accepted, now: u64) -> Result<(), Replay> {
        if predates(proof, self.since) {
            return Err(Replay::TooOld);
        }
        let shard = &self.shards[usize::from(proof.id[0]) % self.shards.len()];
        shard
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(proof, now)
    }
}

#[cfg(test)]
mod tests;
