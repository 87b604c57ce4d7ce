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

/// Most keys a memory book tracks.
const MAX_ENTRIES: usize = 100_000;
/// What a full memory book is pruned down to: a tenth of it is free again, so the scan of a
/// full book happens at most once per [`MAX_ENTRIES`]` / 10` new keys (a bounded cost per
/// update, averaged), however many of its entries still block.
const PRUNED_TO: usize = MAX_ENTRIES / 10 * 9;
/// An entry this long without a failure is forgiven and may be forgotten (twice the longest
/// wait a policy may set).
pub const FORGET_AFTER: u64 = 2 * 86_400;

/// The counts in this process's memory, at most [`MAX_ENTRIES`] keys.
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

/// Makes room in a full book: entries that block nothing and saw no failure for `prune_after`
/// go first; if that leaves more than [`PRUNED_TO`], those whose last failure is oldest go,
/// entries that block nothing before those that do.
fn prune(all: &mut HashMap<String, Entry>, now: u64, prune_after: u64) {
    all.retain(|_, e| e.blocked_until > now || now.saturating_sub(e.last_failure) < prune_after);
    if all.len() <= PRUNED_TO {
        return;
    }
    let mut by_age: Vec<(bool, u64, String)> = all
        .iter()
        .map(|(k, e)| (e.blocked_until > now, e.last_failure, k.clone()))
        .collect();
    let surplus = all.len() - PRUNED_TO;
    by_age.select_nth_unstable(surplus - 1);
    for (_, _, k) in &by_age[..surplus] {
        all.remove(k);
    }
    tracing::warn!(
        forgotten = surplus,
        "the in-memory back-off book was full: the oldest counts were forgotten"
    );
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
            prune(&mut all, now, self.prune_after);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(blocked_until: u64, last_failure: u64) -> Entry {
        Entry {
            failures: 5,
            blocked_until,
            last_failure,
        }
    }

    #[test]
    fn a_full_book_is_pruned_to_nine_tenths_oldest_and_unblocking_first() {
        let now = 1_000_000;
        let mut all: HashMap<String, Entry> = (0..MAX_ENTRIES as u64)
            .map(|i| {
                // Every entry recent; the even ones still block.
                let blocked = if i % 2 == 0 { now + 100 } else { 0 };
                (format!("k{i}"), entry(blocked, now - 10 - i))
            })
            .collect();
        prune(&mut all, now, 1_000_000);
        assert_eq!(all.len(), PRUNED_TO);
        let blocking = all.values().filter(|e| e.blocked_until > now).count();
        assert_eq!(blocking, MAX_ENTRIES / 2, "every blocking entry kept");
        // The unblocking entries kept are the most recent ones.
        let oldest_kept = all
            .values()
            .filter(|e| e.blocked_until <= now)
            .map(|e| e.last_failure)
            .min()
            .unwrap();
        let newest_gone = (1..MAX_ENTRIES as u64)
            .step_by(2)
            .filter(|i| !all.contains_key(&format!("k{i}")))
            .map(|i| now - 10 - i)
            .max()
            .unwrap();
        assert!(newest_gone < oldest_kept);
    }

    #[tokio::test]
    async fn a_full_book_scans_once_per_tenth_of_its_size() {
        let book = MemoryBook::new(600);
        let now = 1_000_000;
        {
            let mut all = book.entries.lock().unwrap();
            for i in 0..MAX_ENTRIES {
                all.insert(format!("k{i}"), entry(now + 100, now));
            }
        }
        let book = &book;
        let put = |k: String| async move {
            let keys = [k.clone()];
            book.update(&keys, now, &mut |m| {
                m.insert(k.clone(), entry(now + 100, now));
            })
            .await
            .unwrap();
        };
        put("new0".into()).await;
        assert_eq!(book.entries.lock().unwrap().len(), PRUNED_TO + 1);
        for i in 1..(MAX_ENTRIES - PRUNED_TO - 1) {
            put(format!("new{i}")).await;
        }
        // Below the bound again: no scan until it is full.
        assert_eq!(book.entries.lock().unwrap().len(), MAX_ENTRIES - 1);
    }
}
