use super::*;
use proptest::prelude::*;
use sha2::Digest as _;

const WINDOW: u64 = 60;

/// A proof of `key` numbered `n`, made at `iat` (the three make its id), remembered as the edge
/// would remember it at `iat`.
fn proof(key: u64, n: u32, iat: u64) -> Accepted {
    let mut id = [0u8; 16];
    id[..8].copy_from_slice(&key.to_be_bytes());
    id[8..12].copy_from_slice(&n.to_be_bytes());
    id[12..].copy_from_slice(&(iat as u32).to_be_bytes());
    Accepted {
        id,
        key,
        iat,
        expires: iat + WINDOW + 1,
    }
}

#[test]
fn a_proof_passes_once_until_it_expires_then_again() {
    let mut c = ReplayCache::new(8);
    let p = proof(1, 1, 100);
    assert_eq!(c.insert(&p, 100), Ok(()));
    assert_eq!(c.insert(&p, 160), Err(Replay::Replayed));
    let later = Accepted { expires: 300, ..p };
    assert_eq!(c.insert(&later, 161), Ok(()), "expired, accepted again");
    assert_eq!(c.len(), 1);
}

#[test]
fn one_key_holds_at_most_a_quarter_and_only_it_waits() {
    let mut c = ReplayCache::new(8);
    assert_eq!(c.per_key(), 2);
    assert_eq!(c.insert(&proof(1, 1, 100), 100), Ok(()));
    assert_eq!(c.insert(&proof(1, 2, 100), 100), Ok(()));
    assert_eq!(c.insert(&proof(1, 3, 100), 100), Err(Replay::KeyBusy));
    assert_eq!(c.insert(&proof(2, 1, 100), 100), Ok(()), "another key");
    assert_eq!(
        c.insert(&proof(1, 3, 162), 162),
        Ok(()),
        "its own proofs expired"
    );
}

/// The probe's attack: keys of one client fill a shard with proofs dated ahead. Every fresh
/// proof of another key still passes, and the flooding keys lock themselves out.
#[test]
fn proofs_dated_ahead_cannot_crowd_out_a_fresh_proof() {
    let mut c = ReplayCache::new(64);
    let mut refused_flood = 0;
    for now in 1_000..1_200u64 {
        for key in 10..14u64 {
            for n in 0..8 {
                let p = proof(key, (now as u32) * 8 + n, now + MAX_AHEAD_SECONDS);
                if c.insert(&p, now).is_err() {
                    refused_flood += 1;
                }
            }
        }
        if now % 5 == 0 {
            let honest = proof(1, now as u32, now);
            assert_eq!(c.insert(&honest, now), Ok(()), "at {now}");
            assert_eq!(c.insert(&honest, now), Err(Replay::Replayed), "at {now}");
        }
    }
    assert!(refused_flood > 0);
}

#[test]
fn a_full_shard_forgets_the_oldest_of_the_key_holding_most_and_refuses_only_its_older_proofs() {
    let mut c = ReplayCache::new(8);
    let first = proof(7, 1, 105);
    assert_eq!(c.insert(&first, 100), Ok(()));
    assert_eq!(c.insert(&proof(7, 2, 104), 100), Ok(()));
    for key in 1..7 {
        assert_eq!(c.insert(&proof(key, 1, 100), 100), Ok(()));
    }
    assert_eq!(
        c.insert(&proof(8, 1, 100), 100),
        Ok(()),
        "full: one forgotten"
    );
    assert_eq!(c.len(), 8);
    assert_eq!(
        c.insert(&first, 101),
        Err(Replay::TooOld),
        "key 7's oldest went"
    );
    assert_eq!(c.insert(&proof(7, 3, 104), 101), Err(Replay::TooOld));
    assert_eq!(
        c.insert(&proof(7, 2, 104), 101),
        Err(Replay::Replayed),
        "kept"
    );
    assert_eq!(
        c.insert(&proof(1, 1, 100), 101),
        Err(Replay::Replayed),
        "kept"
    );
    assert_eq!(c.insert(&proof(7, 4, 106), 106), Ok(()), "made since");
}

#[test]
fn a_proof_made_before_the_memory_began_is_too_old() {
    let r = ShardedReplays::new(1_000, 1_000);
    let before = proof(1, 1, 1_000 + MAX_AHEAD_SECONDS - 1);
    assert_eq!(r.first_use(&before, 1_001), Err(Replay::TooOld));
    let after = proof(1, 2, 1_000 + MAX_AHEAD_SECONDS);
    assert_eq!(r.first_use(&after, 1_005), Ok(()));
    let unset = ShardedReplays::new(1_000, 0);
    assert_eq!(unset.first_use(&before, 1_001), Ok(()));
}

#[test]
fn shards_refuse_a_replay_in_any_and_growing_keeps_what_they_hold() {
    let r = ShardedReplays::new(SHARDS * 4, 0);
    for n in 0..32u32 {
        let mut p = proof(u64::from(n), n, 100);
        p.id[0] = n as u8;
        assert_eq!(r.first_use(&p, 100), Ok(()));
        assert_eq!(r.first_use(&p, 101), Err(Replay::Replayed));
    }
    r.grow(SHARDS * 8);
    let mut p = proof(3, 3, 100);
    p.id[0] = 3;
    assert_eq!(r.first_use(&p, 102), Err(Replay::Replayed), "kept");
}

#[test]
fn bytes_round_trip_ids_and_floors_without_what_expired() {
    let mut c = ReplayCache::new(8);
    c.insert(&proof(1, 1, 100), 100).unwrap();
    c.insert(&proof(1, 2, 101), 100).unwrap();
    c.insert(&proof(2, 1, 40), 100).unwrap();
    for key in 3..9 {
        c.insert(&proof(key, 1, 100), 100).unwrap();
    }
    let bytes = c.to_bytes(102);
    let mut back: ReplayCache = ReplayCache::from_bytes(&bytes, 8);
    assert_eq!(back.len(), 7, "one expired, one forgotten");
    assert_eq!(back.insert(&proof(1, 2, 101), 102), Err(Replay::Replayed));
    assert_eq!(back.insert(&proof(3, 1, 100), 102), Err(Replay::Replayed));
    assert_eq!(back.insert(&proof(1, 1, 100), 102), Err(Replay::TooOld));
    assert_eq!(back.insert(&proof(2, 2, 102), 102), Ok(()));
}

#[test]
fn damaged_bytes_read_as_far_as_they_go() {
    let mut c = ReplayCache::new(8);
    c.insert(&proof(1, 1, 100), 100).unwrap();
    let bytes = c.to_bytes(100);
    for cut in 0..bytes.len() {
        let _: ReplayCache = ReplayCache::from_bytes(&bytes[..cut], 8);
        let mut flat = FlatBucket::from_bytes(&bytes[..cut], 8);
        let _ = flat.insert(&proof(2, 1, 100), 100);
    }
    let mut huge_count = 0u64.to_be_bytes().to_vec();
    huge_count.extend_from_slice(&u32::MAX.to_be_bytes());
    assert!(ReplayCache::from_bytes(&huge_count, 8).is_empty());
    assert!(FlatBucket::from_bytes(&huge_count, 8).is_empty());
}

#[test]
fn an_insert_drops_at_most_a_few_expired_ids() {
    let mut c = ReplayCache::new(1_000);
    for n in 0..200 {
        c.insert(&proof(u64::from(n % 100), n, 100), 100).unwrap();
    }
    c.insert(&proof(500, 1, 1_000), 1_000).unwrap();
    assert_eq!(c.len(), 200 + 1 - SWEEP_STEP);
}

proptest! {
    /// Whatever the order, keys, dates and memory size: no proof passes twice while it is fresh.
    #[test]
    fn no_proof_passes_twice_while_fresh(
        ops in prop::collection::vec((0u64..6, 0u32..12, 0u64..8, 0u64..3), 1..400),
        capacity in 1usize..12,
    ) {
        let mut c = ReplayCache::new(capacity);
        let mut accepted: HashMap<[u8; 16], u64> = HashMap::new();
        let mut now = 1_000;
        for (key, n, ahead, tick) in ops {
            now += tick;
            let p = proof(key, n, now + ahead);
            if c.insert(&p, now).is_ok() {
                if let Some(until) = accepted.get(&p.id) {
                    prop_assert!(*until <= now, "accepted again while fresh");
                }
                accepted.insert(p.id, p.expires);
            }
        }
    }
}

/// What bytes of the memory say: its floor, the keys' `(key, floor)`, the `(id, expires, key)`
/// of its ids.
type Said = (u64, Vec<(u64, u64)>, Vec<([u8; 16], u64, u64)>);

/// What `bytes` ([`ReplayCache::to_bytes`]) say, whatever the order the keys' floors were
/// written in: the memory's floor, the keys' floors, the ids oldest first.
fn said(bytes: &[u8]) -> Said {
    let mut r = Reader(bytes);
    let floor = r.u64().unwrap_or(0);
    let mut floors: Vec<(u64, u64)> = (0..r.u32().unwrap_or(0))
        .map_while(|_| Some((r.u64()?, r.u64()?)))
        .collect();
    floors.sort_unstable();
    let mut ids = Vec::new();
    while let (Some(id), Some(expires), Some(key)) = (r.id(), r.u64(), r.u64()) {
        ids.push((id, expires, key));
    }
    (floor, floors, ids)
}

proptest! {
    /// The Wasm filter's bucket (read flat from bytes before each proof, written after) answers
    /// every proof and writes the same memory as a [`ReplayCache`] read from the same bytes.
    #[test]
    fn a_flat_bucket_answers_and_writes_as_the_cache_read_from_the_same_bytes(
        ops in prop::collection::vec((0u64..6, 0u32..12, 0u64..8, 0u64..3), 1..300),
        capacity in 1usize..12,
    ) {
        let mut bytes = Vec::new();
        let mut now = 1_000;
        for (key, n, ahead, tick) in ops {
            now += tick;
            let p = proof(key, n, now + ahead);
            let mut flat = FlatBucket::from_bytes(&bytes, capacity);
            let mut cache = ReplayCache::from_bytes(&bytes, capacity);
            let answer = flat.insert(&p, now);
            prop_assert_eq!(answer, cache.insert(&p, now));
            prop_assert_eq!(flat.len(), cache.len());
            if answer.is_ok() {
                let written = flat.to_bytes(now);
                prop_assert_eq!(said(&written), said(&cache.to_bytes(now)));
                bytes = written;
            }
        }
    }
}

/// `bytes` with their ids in reverse order (the floors as they were).
fn reversed(bytes: &[u8]) -> Vec<u8> {
    let (floor, floors, mut ids) = said(bytes);
    ids.reverse();
    let mut out = floor.to_be_bytes().to_vec();
    out.extend_from_slice(&(floors.len() as u32).to_be_bytes());
    for (key, at) in floors {
        out.extend_from_slice(&key.to_be_bytes());
        out.extend_from_slice(&at.to_be_bytes());
    }
    for (id, expires, key) in ids {
        out.extend_from_slice(&id);
        out.extend_from_slice(&expires.to_be_bytes());
        out.extend_from_slice(&key.to_be_bytes());
    }
    out
}

#[test]
fn a_flat_bucket_read_out_of_order_writes_the_memorys_order() {
    let mut c = ReplayCache::new(16);
    for n in 0..10 {
        c.insert(&proof(u64::from(n % 3), n, 100 + u64::from(n)), 100)
            .unwrap();
    }
    let bytes = reversed(&c.to_bytes(100));
    let mut flat = FlatBucket::from_bytes(&bytes, 16);
    let mut cache = ReplayCache::from_bytes(&bytes, 16);
    let p = proof(7, 1, 101);
    assert_eq!(flat.insert(&p, 101), Ok(()));
    assert_eq!(cache.insert(&p, 101), Ok(()));
    assert_eq!(said(&flat.to_bytes(101)), said(&cache.to_bytes(101)));
}

#[test]
fn an_id_a_damaged_bucket_holds_twice_is_refused_while_either_is_fresh() {
    let p = proof(1, 1, 100);
    let mut bytes = 0u64.to_be_bytes().to_vec();
    bytes.extend_from_slice(&0u32.to_be_bytes());
    for expires in [150, p.expires] {
        bytes.extend_from_slice(&p.id);
        bytes.extend_from_slice(&expires.to_be_bytes());
        bytes.extend_from_slice(&p.key.to_be_bytes());
    }
    let mut flat = FlatBucket::from_bytes(&bytes, 8);
    assert_eq!(flat.insert(&p, 155), Err(Replay::Replayed));
}

#[test]
fn ids_go_to_buckets_evenly_by_their_first_four_bytes() {
    let buckets = 7_812;
    let mut counts = vec![0u32; buckets];
    for n in 0..1_000_000u32 {
        let digest = sha2::Sha256::digest(n.to_be_bytes());
        let id: [u8; 16] = digest[..16].try_into().unwrap();
        counts[bucket_of(&id, buckets)] += 1;
    }
    // By two bytes, 65,536 values over 7,812 buckets: the first 3,040 would take nine values
    // each, the others eight, and an eighth more ids.
    let mean = |b: &[u32]| f64::from(b.iter().sum::<u32>()) / b.len() as f64;
    let (first, rest) = counts.split_at(65_536 % buckets);
    let skew = mean(first) / mean(rest);
    assert!((0.97..1.03).contains(&skew), "{skew}");
    assert_eq!(bucket_of(&[0xff; 16], buckets), 0xffff_ffff % buckets);
}
