//! The memory of used DPoP proofs of the Wasm filter: Envoy's shared data, which every worker's
//! VM of this plugin reads and writes, so a proof is accepted once per Envoy. It is split in
//! [`BUCKETS`] keys by the proof id's first bytes; each holds a [`ReplayCache`] as bytes, updated
//! with compare-and-swap and retried [`ATTEMPTS`] times when another worker wrote it meanwhile
//! (then refused as full: never accepted unrecorded).

use filter_core::dpop::{Replay, ReplayCache, Replays};
use proxy_wasm::hostcalls;
use proxy_wasm::types::Status;

/// Keys the memory is split in.
pub const BUCKETS: usize = 1024;
/// Writes tried on one bucket before a proof is refused.
const ATTEMPTS: usize = 8;

/// The memory, `capacity` ids in all.
pub struct SharedReplays {
    per_bucket: usize,
}

impl SharedReplays {
    /// For `capacity` ids in all (each bucket its share, rounded up).
    pub fn new(capacity: usize) -> Self {
        Self {
            per_bucket: capacity.div_ceil(BUCKETS),
        }
    }
}

impl Replays for SharedReplays {
    fn first_use(&self, id: &[u8; 16], expires: u64, now: u64) -> Result<(), Replay> {
        let bucket = usize::from(u16::from_be_bytes([id[0], id[1]])) % BUCKETS;
        let key = format!("mms_auth.dpop.{bucket}");
        for _ in 0..ATTEMPTS {
            let Ok((bytes, cas)) = hostcalls::get_shared_data(&key) else {
                return Err(Replay::Full);
            };
            let mut cache =
                ReplayCache::from_bytes(bytes.as_deref().unwrap_or(&[]), self.per_bucket);
            cache.insert(id, expires, now)?;
            match hostcalls::set_shared_data(&key, Some(&cache.to_bytes(now)), cas) {
                Ok(()) => return Ok(()),
                Err(Status::CasMismatch) => continue,
                Err(_) => return Err(Replay::Full),
            }
        }
        Err(Replay::Full)
    }
}
