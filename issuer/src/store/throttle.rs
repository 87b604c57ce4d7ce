//! Where the password back-off's counts live ([`ThrottleBook`]): this process's memory
//! ([`MemoryBook`], with the embedded store), or the PostgreSQL database that several issuers
//! share. The policy that reads and writes them is `crate::throttle`.

use super::StoreError;
use std::collections::HashMap;
use std::sync::Mutex;

/// The count of one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Entry {
    /// Failures counted (forgiven after a quiet spell).
    pub failures: u32,
    /// No attempt before this time (seconds since the epoch).
    pub blocked_until: u64,
    /// The last failure.
    pub last_failure: u64,
}

/// Where the counts live. `update` runs `f` over the entries of `keys` (absent keys are absent
/// from the map) as one atomic step and keeps what `f` left: changed and new entries stored,
/// removed ones deleted. `f` may run more than once (a shared book retries on contention).
#[async_trait::async_trait]
pub trait ThrottleBook: Send + Sync + std::fmt::Debug {
    /// See the trait.
    async fn update(
        &self,
        keys: &[String],
        now: u64,
        f: &mut (dyn for<'m> FnMut(&'m mut HashMap<String, Entry>) + Send),
    ) -> Result<(), StoreError>;
}

/// Most keys a memory book tracks; beyond this, entries that no longer block anything go first.
const MAX_ENTRIES: usize = 100_000;
/// An entry this long without a failure is forgiven and may be forgotten (twice the longest
/// wait a policy may set).
pub const FORGET_AFTER: u64 = 2 * 86_400;

/// The counts in this process's memory.
#[derive(Debug)]
pub struct MemoryBook {
    entries: Mutex<HashMap<String, Entry>>,
    /// When the book is full, entries that block nothing and saw no failure for this long go.
    prune_after: u64,
}

impl MemoryBook {
    /// A book that, when full, forgets entries that block nothing and saw no failure for
    /// `prune_after` seconds (twice the policy's longest wait).
    pub fn new(prune_after: u64) -> Self {
        Self {
            entries: Mutex::default(),
            prune_after,
        }
    }
}

#[async_trait::async_trait]
impl ThrottleBook for MemoryBook {
    async fn update(
        &self,
        keys: &[String],
        now: u64,
        f: &mut (dyn for<'m> FnMut(&'m mut HashMap<String, Entry>) + Send),
    ) -> Result<(), StoreError> {
        let mut all = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if all.len() >= MAX_ENTRIES {
            all.retain(|_, e| {
                e.blocked_until > now || now.saturating_sub(e.last_failure) < self.prune_after
            });
        }
        let mut some: HashMap<String, Entry> = keys
            .iter()
            .filter_map(|k| all.get(k).map(|e| (k.clone(), *e)))
            .collect();
        f(&mut some);
        for k in keys {
            match some.get(k) {
                Some(e) => {
                    all.insert(k.clone(), *e);
                }
                None => {
                    all.remove(k);
                }
            }
        }
        Ok(())
    }
}
