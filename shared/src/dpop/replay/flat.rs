//! One bucket of the Wasm filter's memory, read from bytes and written back on every bound
//! request: the memory of [`ReplayCache`] kept as flat lists instead of maps and ordered sets.
//!
//! Its invariant: **given what [`ReplayCache::to_bytes`] writes, it answers every proof as
//! [`ReplayCache::from_bytes`] followed by [`ReplayCache::insert`] would, and writes back the
//! same memory.** A bucket holds a few hundred ids at most, so a scan of the list does what the
//! maps and sets do, and reading the bucket costs one list instead of five indexes built id by
//! id: in Envoy's V8 that building cost a bound request more than the rest of the replay check.
//! No id is hashed, so no client can grind `jti`s into collisions either.
//!
//! Bytes this memory did not write (damaged) are read as far as they go, as `from_bytes` reads
//! them; an id held twice there is kept twice, and a proof with that id is refused while either
//! is fresh.

#[cfg(doc)]
use super::ReplayCache;
use super::{Accepted, Reader, Replay, ENTRY_BYTES, SWEEP_STEP};
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    id: [u8; 16],
    expires: u64,
    key: u64,
}

impl Entry {
    /// The order of the memory's ids: by expiry, then id.
    fn order(&self, other: &Self) -> std::cmp::Ordering {
        (self.expires, &self.id).cmp(&(other.expires, &other.id))
    }
}

/// A bucket of at most `capacity` ids (see the module's documentation).
#[derive(Debug, Clone)]
pub struct FlatBucket {
    /// The bucket's own floor: no proof expiring at or before it is accepted.
    floor: u64,
    /// `(key, floor)` of each key with a floor.
    floors: Vec<(u64, u64)>,
    /// The ids in the order they were read then held: each key's oldest first.
    ids: Vec<Entry>,
    /// `(floor, key)` of the keys left with a floor alone, oldest first.
    orphans: VecDeque<(u64, u64)>,
    capacity: usize,
}

impl FlatBucket {
    /// The bucket `bytes` hold ([`ReplayCache::to_bytes`]), for at most `capacity` ids.
    pub fn from_bytes(bytes: &[u8], capacity: usize) -> Self {
        let mut r = Reader(bytes);
        let floor = r.u64().unwrap_or(0);
        let mut floors: Vec<(u64, u64)> = Vec::new();
        for _ in 0..r.u32().unwrap_or(0) {
            let (Some(key), Some(at)) = (r.u64(), r.u64()) else {
                break;
            };
            floors.push((key, at));
        }
        let mut ids = Vec::with_capacity(r.0.len() / ENTRY_BYTES + 1);
        while let (Some(id), Some(expires), Some(key)) = (r.id(), r.u64(), r.u64()) {
            ids.push(Entry { id, expires, key });
        }
        let mut b = Self {
            floor,
            floors,
            ids,
            orphans: VecDeque::new(),
            capacity: capacity.max(1),
        };
        let mut holding: Vec<u64> = b.ids.iter().map(|e| e.key).collect();
        holding.sort_unstable();
        let mut orphans: Vec<(u64, u64)> = b
            .floors
            .iter()
            .filter(|(key, _)| holding.binary_search(key).is_err())
            .map(|(key, _)| (b.floor_of(*key), *key))
            .collect();
        orphans.sort_unstable();
        orphans.dedup();
        b.orphans = orphans.into();
        b
    }

    /// The most ids one key may hold: a quarter of the bucket.
    fn per_key(&self) -> usize {
        (self.capacity / 4).max(1)
    }

    /// Accepts `p` unless its id is held and not expired at `now`, it is older than the memory
    /// vouches for, or its key holds its share; when full, forgets the oldest id of the key that
    /// holds the most ([`ReplayCache::insert`]).
    pub fn insert(&mut self, p: &Accepted, now: u64) -> Result<(), Replay> {
        self.sweep(now);
        if self.ids.iter().any(|e| e.id == p.id && e.expires > now) {
            return Err(Replay::Replayed);
        }
        if let Some(at) = self.ids.iter().position(|e| e.id == p.id) {
            self.remove_at(at, now);
        }
        if p.expires <= self.floor.max(self.floor_of(p.key)) {
            return Err(Replay::TooOld);
        }
        if self.held(p.key) >= self.per_key() {
            return Err(Replay::KeyBusy);
        }
        if self.ids.len() >= self.capacity {
            self.forget_from_the_heaviest(now);
        }
        let new = Entry {
            id: p.id,
            expires: p.expires,
            key: p.key,
        };
        // In the memory's order, which the bytes were read in: written without sorting. Nothing
        // reads the order of a key's ids again before they are written.
        let at = self.ids.partition_point(|e| e.order(&new).is_lt());
        self.ids.insert(at, new);
        Ok(())
    }

    /// How many ids `key` holds.
    fn held(&self, key: u64) -> usize {
        self.ids.iter().filter(|e| e.key == key).count()
    }

    /// `key`'s floor: the last one read or set (bytes this memory wrote name a key once).
    fn floor_of(&self, key: u64) -> u64 {
        self.floors
            .iter()
            .rfind(|(k, _)| *k == key)
            .map_or(0, |f| f.1)
    }

    /// Takes `key`'s floor out; what it was, if it had one.
    fn take_floor(&mut self, key: u64) -> Option<u64> {
        let floor = self.floors.iter().rfind(|(k, _)| *k == key)?.1;
        self.floors.retain(|(k, _)| *k != key);
        Some(floor)
    }

    /// Drops the id at `at`; its key's floor too when the key holds nothing and the floor has
    /// passed, else the key is kept as an orphan while its floor holds.
    fn remove_at(&mut self, at: usize, now: u64) {
        let gone = self.ids.remove(at);
        if self.held(gone.key) > 0 {
            return;
        }
        let floor = self.floor_of(gone.key);
        if floor <= now {
            self.take_floor(gone.key);
        } else {
            self.orphan(gone.key, floor);
        }
    }

    /// Drops up to [`SWEEP_STEP`] expired ids, oldest first, and up to as many passed floors.
    fn sweep(&mut self, now: u64) {
        for _ in 0..SWEEP_STEP {
            let oldest = self.ids.iter().enumerate().min_by(|a, b| a.1.order(b.1));
            match oldest {
                Some((i, e)) if e.expires <= now => self.remove_at(i, now),
                _ => break,
            }
        }
        for _ in 0..SWEEP_STEP {
            match self.orphans.front() {
                Some(&(floor, key)) if floor <= now => {
                    self.orphans.pop_front();
                    if self.held(key) == 0 && self.floor_of(key) <= now {
                        self.take_floor(key);
                    }
                }
                _ => break,
            }
        }
    }

    /// Makes room by forgetting the oldest id of the key that holds the most (the largest key of
    /// those that tie), and keeps a floor for that key.
    fn forget_from_the_heaviest(&mut self, now: u64) {
        let mut keys: Vec<u64> = self.ids.iter().map(|e| e.key).collect();
        keys.sort_unstable();
        let heaviest = keys
            .chunk_by(|a, b| a == b)
            .map(|run| (run.len(), run[0]))
            .max();
        let Some((_, key)) = heaviest else {
            return;
        };
        let Some(at) = self.ids.iter().position(|e| e.key == key) else {
            return;
        };
        let floor = self.floor_of(key).max(self.ids[at].expires);
        self.floors.retain(|(k, _)| *k != key);
        self.floors.push((key, floor));
        self.remove_at(at, now);
    }

    /// Keeps `key`'s floor while it holds no id; beyond `capacity` such keys, the oldest one's
    /// floor becomes the bucket's.
    fn orphan(&mut self, key: u64, floor: u64) {
        if self.orphans.len() >= self.capacity {
            if let Some((_, old)) = self.orphans.pop_front() {
                if self.held(old) == 0 {
                    if let Some(at) = self.take_floor(old) {
                        self.floor = self.floor.max(at);
                    }
                }
            }
        }
        self.orphans.push_back((floor, key));
    }

    /// How many ids are held.
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    /// True if none is.
    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// What is live at `now`, as [`ReplayCache::to_bytes`] writes it: the bucket's floor, the
    /// keys' floors, then the ids oldest first.
    pub fn to_bytes(&self, now: u64) -> Vec<u8> {
        let floors = || self.floors.iter().filter(move |(_, at)| *at > now);
        let live = || self.ids.iter().filter(move |e| e.expires > now);
        let (kept, held) = (floors().count(), live().count());
        let mut out = Vec::with_capacity(12 + kept * 16 + held * ENTRY_BYTES);
        out.extend_from_slice(&self.floor.to_be_bytes());
        out.extend_from_slice(&(kept as u32).to_be_bytes());
        for (key, at) in floors() {
            out.extend_from_slice(&key.to_be_bytes());
            out.extend_from_slice(&at.to_be_bytes());
        }
        let put = |out: &mut Vec<u8>, e: &Entry| {
            out.extend_from_slice(&e.id);
            out.extend_from_slice(&e.expires.to_be_bytes());
            out.extend_from_slice(&e.key.to_be_bytes());
        };
        if self.ids.is_sorted_by(|a, b| a.order(b).is_le()) {
            live().for_each(|e| put(&mut out, e));
        } else {
            // Bytes this memory did not write, read out of order.
            let mut sorted: Vec<&Entry> = live().collect();
            // An insertion sort: no other sort's code in the Wasm module, which has a size limit.
            for i in 1..sorted.len() {
                let mut j = i;
                while j > 0 && sorted[j - 1].order(sorted[j]).is_gt() {
                    sorted.swap(j - 1, j);
                    j -= 1;
                }
            }
            sorted.into_iter().for_each(|e| put(&mut out, e));
        }
        out
    }
}
