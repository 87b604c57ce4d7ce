//! The DPoP replay memory (`shared::dpop::replay`), measured where the filters and the issuer use
//! it: the heap it takes per remembered proof (counted by this binary's allocator, printed
//! first), and the time of one `first_use` on a memory that is full, for honest traffic (many
//! keys, the oldest ids expiring as new ones come) and for one key flooding it, beside a
//! baseline run in the same process: the unbounded map of ids the memory replaced (one
//! `HashMap` insert and one remove an operation, at the same size).

use criterion::{black_box, criterion_group, Criterion};
use shared::dpop::replay::{Accepted, FlatBucket, ReplayCache, Replays, ShardedReplays};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; only a counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's guarantees for `layout`, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: `ptr` came from `alloc` with `layout`, as the caller guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        // SAFETY: the caller's guarantees for `ptr`, `layout` and `new_size`, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Proof lifetime: the default window of 60 s, so an id is kept for two.
const KEPT: u64 = 120;
const NOW: u64 = 1_700_000_000;

/// The `n`th proof of key `key`, made at `now`.
fn proof(n: u64, key: u64, now: u64) -> Accepted {
    let mut id = [0u8; 16];
    // Spread over the shards as digests are.
    id[..8].copy_from_slice(&n.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    id[8..].copy_from_slice(&key.to_be_bytes());
    Accepted {
        id,
        key,
        iat: now,
        expires: now + KEPT,
    }
}

/// Heap bytes per id of a memory of `capacity` ids, filled by `keys` keys in turn.
fn bytes_per_id(capacity: usize, keys: u64) -> f64 {
    let before = LIVE.load(Ordering::Relaxed);
    let memory = ShardedReplays::new(capacity, 0);
    for n in 0..capacity as u64 {
        let _ = memory.first_use(&proof(n, n % keys, NOW), NOW);
    }
    let after = LIVE.load(Ordering::Relaxed);
    drop(memory);
    (after - before) as f64 / capacity as f64
}

/// One `first_use` on a full memory of 100,000 ids: 10,000 honest keys with time moving on
/// (a second every 1,000 proofs, so ids expire as they come), and one key flooding it.
fn first_use(c: &mut Criterion) {
    let capacity = 100_000u64;
    let honest = ShardedReplays::new(capacity as usize, 0);
    let mut n = 0u64;
    let mut now = NOW;
    for _ in 0..capacity {
        let _ = honest.first_use(&proof(n, n % 10_000, now), now);
        n += 1;
        now = NOW + n / 1_000;
    }
    c.bench_function("replay_first_use_full_honest", |b| {
        b.iter(|| {
            n += 1;
            now = NOW + n / 1_000;
            black_box(honest.first_use(&proof(n, n % 10_000, now), now))
        })
    });
    let flooded = ShardedReplays::new(capacity as usize, 0);
    let mut m = 0u64;
    c.bench_function("replay_first_use_one_key_flood", |b| {
        b.iter(|| {
            m += 1;
            black_box(flooded.first_use(&proof(m, 7, NOW), NOW))
        })
    });
}

/// The baseline: a plain map of 100,000 ids, each operation inserting one and removing the
/// oldest, as the memory before the bounded one did at its best.
fn baseline(c: &mut Criterion) {
    let mut map = std::collections::HashMap::with_capacity(100_000);
    let mut n = 0u64;
    for _ in 0..100_000 {
        map.insert(proof(n, n % 10_000, NOW).id, NOW + KEPT);
        n += 1;
    }
    c.bench_function("baseline_hashmap_insert_and_remove", |b| {
        b.iter(|| {
            map.insert(proof(n, n % 10_000, NOW).id, NOW + KEPT);
            map.remove(&proof(n - 100_000, (n - 100_000) % 10_000, NOW).id);
            n += 1;
            black_box(map.len())
        })
    });
}

/// The Wasm filter's step on a full bucket (128 ids under 32 keys, as bytes): read it, accept
/// one proof of a new key, write it back; kept flat as the filter does, and beside it the same
/// through the native build's cache (maps and ordered sets) read from the same bytes.
fn bucket(c: &mut Criterion) {
    let mut full = ReplayCache::new(129);
    for n in 0..128u64 {
        let mut p = proof(n, n % 32, NOW);
        p.expires += n / 4;
        let _ = full.insert(&p, NOW);
    }
    let bytes = full.to_bytes(NOW);
    let mut n = 1_000u64;
    c.bench_function("replay_bucket_full_flat", |b| {
        b.iter(|| {
            n += 1;
            let mut bucket = FlatBucket::from_bytes(black_box(&bytes), 129);
            let _ = bucket.insert(&proof(n, 1_000 + n, NOW), NOW);
            black_box(bucket.to_bytes(NOW))
        })
    });
    c.bench_function("replay_bucket_full_as_cache", |b| {
        b.iter(|| {
            n += 1;
            let mut cache = ReplayCache::from_bytes(black_box(&bytes), 129);
            let _ = cache.insert(&proof(n, 1_000 + n, NOW), NOW);
            black_box(cache.to_bytes(NOW))
        })
    });
}

criterion_group!(benches, baseline, first_use, bucket);

fn main() {
    for (capacity, keys) in [(100_000, 10_000), (100_000, 100_000), (1_000_000, 10_000)] {
        println!(
            "replay memory: {capacity} ids from {keys} keys: {:.1} heap bytes an id",
            bytes_per_id(capacity, keys)
        );
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
