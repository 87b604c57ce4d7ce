//! The memory of used DPoP proofs of the Wasm filter: Envoy's shared data, which every worker's
//! VM of this plugin reads and writes, so a proof is accepted once per Envoy. It is split in
//! buckets keyed by the proof id's first bytes ([`bucket_of`]; about [`PER_BUCKET`] ids each,
//! at most [`MAX_BUCKETS`]); each holds a [`FlatBucket`] as bytes, updated with
//! compare-and-swap and retried [`ATTEMPTS`] times when another worker wrote it meanwhile (then
//! refused as busy: never accepted unrecorded).
//!
//! A layout (bucket count) is a memory of its own, begun when the first VM configured with it
//! (a key of its own in the shared data, kept across VM restarts, gone with the Envoy process):
//! proofs dated before it began are refused ([`filter_core::dpop::replay::predates`]), so
//! neither a restart of Envoy nor a configuration that changes the layout lets a proof pass
//! twice.

use filter_core::dpop::replay::{bucket_of, predates};
use filter_core::dpop::{Accepted, FlatBucket, Replay, Replays};
use proxy_wasm::hostcalls;
use proxy_wasm::types::Status;

/// Ids a bucket is sized for: one request reads and writes one bucket, so a bucket stays small.
pub const PER_BUCKET: usize = 128;
/// Buckets at most: enough for a bucket of about [`PER_BUCKET`] ids at the largest memory the
/// configuration allows (`dpop.replay_entries`, 1,000,000).
pub const MAX_BUCKETS: usize = 8192;
/// The shared data's keys begin with this: a layout of its own since ids go to buckets by their
/// first four bytes ([`bucket_of`]), so that a module that chose by two never shares a bucket
/// with this one (during an upgrade both run, each with its own memory).
const LAYOUT: &str = "mms_auth.dpop.v2";
/// Writes tried on one bucket before a proof is refused.
const ATTEMPTS: usize = 8;

/// The memory, `capacity` ids in all.
pub struct SharedReplays {
    buckets: usize,
    per_bucket: usize,
    since: u64,
}

impl SharedReplays {
    /// The memory for `capacity` ids in all, as one VM configured at `now` finds it: begun by
    /// the first VM with this layout (or now, by this one).
    pub fn open(capacity: usize, now: u64) -> Self {
        let buckets = (capacity / PER_BUCKET).clamp(1, MAX_BUCKETS);
        Self {
            buckets,
            per_bucket: capacity.div_ceil(buckets),
            since: begun(buckets, now),
        }
    }
}

/// When the memory with `buckets` began: read from the shared data, or written there as `now`
/// by the first VM to ask. A shared data that cannot be read counts as begun now.
fn begun(buckets: usize, now: u64) -> u64 {
    let key = format!("{LAYOUT}.{buckets}.since");
    for _ in 0..ATTEMPTS {
        match hostcalls::get_shared_data(&key) {
            Ok((Some(bytes), _)) => {
                if let Ok(at) = <[u8; 8]>::try_from(bytes.as_slice()) {
                    return u64::from_be_bytes(at);
                }
                return now;
            }
            Ok((None, cas)) => {
                match hostcalls::set_shared_data(&key, Some(&now.to_be_bytes()), cas) {
                    Ok(()) => return now,
                    Err(Status::CasMismatch) => continue,
                    Err(_) => return now,
                }
            }
            Err(_) => return now,
        }
    }
    now
}

impl Replays for SharedReplays {
    fn first_use(&self, proof: &Accepted, now: u64) -> Result<(), Replay> {
        if predates(proof, self.since) {
            return Err(Replay::TooOld);
        }
        let bucket = bucket_of(&proof.id, self.buckets);
        let key = format!("{LAYOUT}.{}.{bucket}", self.buckets);
        for _ in 0..ATTEMPTS {
            let Ok((bytes, cas)) = hostcalls::get_shared_data(&key) else {
                return Err(Replay::Busy);
            };
            let mut cache =
                FlatBucket::from_bytes(bytes.as_deref().unwrap_or(&[]), self.per_bucket);
            cache.insert(proof, now)?;
            match hostcalls::set_shared_data(&key, Some(&cache.to_bytes(now)), cas) {
                Ok(()) => return Ok(()),
                Err(Status::CasMismatch) => continue,
                Err(_) => return Err(Replay::Busy),
            }
        }
        Err(Replay::Busy)
    }
}
