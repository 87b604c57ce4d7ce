//! [`ProofIds`] for [`RedbStore`]: in the issuer's memory, not in the file. A redb data dir has
//! one issuer (the file is locked), so its memory is every issuer of the store; a write per
//! token request would cost a disk sync for a record that lives a minute. The memory is the
//! edge's ([`ShardedReplays`]: a key's share bounded, full forgets instead of refusing, no walk
//! on a request's path). What a restart forgets, the app covers by refusing the proofs dated
//! before it started (`docs/dpop.md`).

use super::RedbStore;
use crate::store::{ProofIds, StoreError};
use shared::dpop::replay::{Accepted, Replay, Replays, ShardedReplays};

/// Proof ids remembered at most: 32 bytes and the indexes' overhead each, about 100 MB. At the
/// default one-minute window that is over 16,000 token requests with proofs a second.
pub const MAX_PROOF_IDS: usize = 1_000_000;

/// The proof ids and when each expires.
#[derive(Debug)]
pub struct SeenProofs(ShardedReplays);

impl Default for SeenProofs {
    fn default() -> Self {
        Self(ShardedReplays::new(MAX_PROOF_IDS, 0))
    }
}

impl SeenProofs {
    /// Forgets the expired ids; returns how many.
    pub fn sweep(&self, now: u64) -> u64 {
        self.0.drop_expired(now) as u64
    }
}

#[async_trait::async_trait]
impl ProofIds for RedbStore {
    async fn first_use(
        &self,
        proof: &Accepted,
        now: u64,
    ) -> Result<Result<(), Replay>, StoreError> {
        Ok(self.proofs.0.first_use(proof, now))
    }
}
