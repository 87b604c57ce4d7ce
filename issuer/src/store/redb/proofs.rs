//! [`ProofIds`] for [`RedbStore`]: in the issuer's memory, not in the file. A redb data dir has
//! one issuer (the file is locked), so its memory is every issuer of the store; a write per
//! token request would cost a disk sync for a record that lives a minute. What a restart
//! forgets, the app covers by refusing, for a window after it starts, the proofs made before it
//! started (`docs/dpop.md`).

use super::RedbStore;
use crate::store::{ProofIds, StoreError};
use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// Proof ids remembered at most: 24 bytes and the map's overhead each, about 50 MB. At the
/// default one-minute window that is over 16,000 token requests with proofs a second.
pub const MAX_PROOF_IDS: usize = 1_000_000;

/// The proof ids and when each expires.
#[derive(Debug, Default)]
pub struct SeenProofs {
    ids: Mutex<HashMap<[u8; 16], u64>>,
}

impl SeenProofs {
    /// See [`ProofIds::first_use`]; full (and nothing expired) is a transient error.
    pub fn first_use(&self, id: &[u8; 16], expires: u64, now: u64) -> Result<bool, StoreError> {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        if ids.get(id).is_some_and(|&at| at > now) {
            return Ok(false);
        }
        if ids.len() >= MAX_PROOF_IDS {
            ids.retain(|_, at| *at > now);
            if ids.len() >= MAX_PROOF_IDS {
                return Err(StoreError::Unavailable(
                    "the memory of DPoP proof ids is full".into(),
                ));
            }
        }
        ids.insert(*id, expires);
        Ok(true)
    }

    /// Forgets the expired ids; returns how many.
    pub fn sweep(&self, now: u64) -> u64 {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        let before = ids.len();
        ids.retain(|_, at| *at > now);
        (before - ids.len()) as u64
    }
}

#[async_trait::async_trait]
impl ProofIds for RedbStore {
    async fn first_use(&self, id: &[u8; 16], expires: u64, now: u64) -> Result<bool, StoreError> {
        self.proofs.first_use(id, expires, now)
    }
}
