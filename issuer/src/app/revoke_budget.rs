//! How many revocations one client may record: a token bucket per client, in memory per issuer.
//!
//! Every recorded revocation is kept until the tokens it covers have expired, and travels in
//! every edge snapshot and every filter VM's set, so one client's credential must not be able to
//! grow that set without bound. A client gets `per_minute` recordings as a
//! burst and then `per_minute` a minute; beyond that the revoke endpoint answers 429 with
//! `Retry-After` and records nothing. What bounds the whole set is in `docs/issuer.md`.

use std::collections::HashMap;
use std::sync::Mutex;

/// Most clients tracked at once; past it, buckets that have refilled are forgotten first (a
/// full bucket is the same as none).
const MAX_CLIENTS: usize = 10_000;

/// The per-client buckets.
#[derive(Debug)]
pub struct RevokeBudget {
    per_minute: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

/// One recording in bucket units: a bucket gains `per_minute` units a millisecond, so the refill
/// is exact in integers.
const ONE: u64 = 60_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    /// Recordings left, in [`ONE`]ths (refilled continuously).
    units: u64,
    /// When `units` was last brought up to date, milliseconds.
    at_ms: u64,
}

impl RevokeBudget {
    /// Buckets of `per_minute` recordings (at least 1).
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute: per_minute.max(1),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    fn capacity(&self) -> u64 {
        u64::from(self.per_minute) * ONE
    }

    fn refilled(&self, b: Bucket, now_ms: u64) -> u64 {
        let gained = now_ms
            .saturating_sub(b.at_ms)
            .saturating_mul(u64::from(self.per_minute));
        b.units.saturating_add(gained).min(self.capacity())
    }

    /// Takes one recording for `client` at `now_ms` (milliseconds since the epoch): `Ok` if it
    /// may record, else `Err(seconds)` until it may.
    pub fn take(&self, client: &str, now_ms: u64) -> Result<(), u64> {
        let mut buckets = self
            .buckets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_CLIENTS && !buckets.contains_key(client) {
            let full = self.capacity();
            buckets.retain(|_, b| self.refilled(*b, now_ms) < full);
            if buckets.len() >= MAX_CLIENTS {
                // Every tracked client is spending: refuse newcomers rather than forget a bucket.
                return Err(ONE.div_ceil(u64::from(self.per_minute) * 1000));
            }
        }
        let fresh = Bucket {
            units: self.capacity(),
            at_ms: now_ms,
        };
        let b = buckets.entry(client.to_owned()).or_insert(fresh);
        let units = self.refilled(*b, now_ms);
        *b = Bucket {
            units: units.saturating_sub(ONE),
            at_ms: now_ms,
        };
        if units >= ONE {
            Ok(())
        } else {
            b.units = units;
            // Until a whole recording has accrued, rounded up to seconds.
            let wait_ms = (ONE - units).div_ceil(u64::from(self.per_minute));
            Err(wait_ms.div_ceil(1000).max(1))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let b = RevokeBudget::new(60);
        for i in 0..60 {
            assert_eq!(b.take("a", 1_000), Ok(()), "{i}");
        }
        assert_eq!(b.take("a", 1_000), Err(1));
        // Another client has its own bucket.
        assert_eq!(b.take("b", 1_000), Ok(()));
        // One a second comes back.
        assert_eq!(b.take("a", 1_999), Err(1));
        assert_eq!(b.take("a", 2_000), Ok(()));
        assert_eq!(b.take("a", 2_000), Err(1));
        // A minute refills the whole burst, and no more.
        for _ in 0..60 {
            assert_eq!(b.take("a", 600_000), Ok(()));
        }
        assert!(b.take("a", 600_000).is_err());
    }

    #[test]
    fn a_slow_rate_says_how_long_to_wait() {
        let b = RevokeBudget::new(2);
        assert_eq!(b.take("a", 0), Ok(()));
        assert_eq!(b.take("a", 0), Ok(()));
        assert_eq!(b.take("a", 0), Err(30));
        assert_eq!(b.take("a", 29_000), Err(1));
        assert_eq!(b.take("a", 30_000), Ok(()));
    }

    #[test]
    fn tracked_clients_are_bounded() {
        let b = RevokeBudget::new(1);
        for i in 0..MAX_CLIENTS {
            assert_eq!(b.take(&format!("c{i}"), 0), Ok(()));
        }
        // Everyone is still spending: a newcomer waits, nobody's bucket is forgotten.
        assert!(b.take("new", 1).is_err());
        assert!(b.take("c0", 1).is_err());
        // Once buckets have refilled they are dropped to make room.
        assert_eq!(b.take("new", 61_000), Ok(()));
        assert!(b.buckets.lock().unwrap().len() <= 2);
    }
}
