//! Back-off against guessing client secrets, per source address (third outside probe, finding
//! 11: 3,000 wrong secrets in 2.5 s were all answered).
//!
//! Counted per address only, never per client: a stranger who knows a client id must not be able
//! to lock the client out. An address gets [`FREE_FAILURES`] failed client authentications free;
//! each further failure makes it wait [`BASE_WAIT_MS`], doubling up to [`MAX_WAIT_MS`]. While it
//! waits every client authentication from it is answered 429 `slow_down` with `Retry-After`,
//! the right secret included, and is not counted. A success clears nothing (a guesser with a
//! client of their own could otherwise reset the count between guesses); an address is forgiven
//! after [`FORGIVE_AFTER_MS`] without a failure. A failure is a presented id and secret that do
//! not authenticate an active client: an unknown id, a wrong secret, or an inactive client
//! (answered alike, so the count is no oracle). No or malformed credentials are not a guess.
//!
//! An IPv6 address counts by its /64 ([`IPV6_PREFIX`]), the smallest block a host is usually
//! given, so one host cannot take a fresh count per address; IPv4-mapped addresses count as
//! IPv4. The address is the one the password back-off uses (`Call::client_ip`: the peer, or what
//! a `--trusted-proxy` says). The counts live in this issuer's memory: with several issuers on
//! PostgreSQL each counts on its own, so a guesser spread over N issuers gets N times the
//! guesses (still far from any secret the rules allow). At most [`MAX_TRACKED`] addresses are
//! held: in two generations, the older dropped whole when the newer fills, so an update costs
//! O(1) amortised and never scans under the lock.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Failed client authentications an address gets before it must wait.
pub const FREE_FAILURES: u32 = 10;
/// The first wait, milliseconds.
pub const BASE_WAIT_MS: u64 = 1_000;
/// The longest wait, milliseconds.
pub const MAX_WAIT_MS: u64 = 300_000;
/// An address without a failure this long starts afresh, milliseconds.
pub const FORGIVE_AFTER_MS: u64 = 2 * MAX_WAIT_MS;
/// The prefix length by which IPv6 addresses are counted (the password back-off's default).
pub const IPV6_PREFIX: u8 = 64;
/// Most addresses held at once (two generations of half as many).
pub const MAX_TRACKED: usize = 100_000;

/// Where a client authentication came from, as counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    /// No address known (never over TCP): all such calls count together.
    Unknown,
    V4(u32),
    /// The first [`IPV6_PREFIX`] bits.
    V6(u128),
}

impl Source {
    fn of(ip: Option<IpAddr>) -> Self {
        match ip.map(|ip| ip.to_canonical()) {
            None => Self::Unknown,
            Some(IpAddr::V4(a)) => Self::V4(a.into()),
            Some(IpAddr::V6(a)) => {
                let mask = u128::MAX << (128 - u32::from(IPV6_PREFIX));
                Self::V6(u128::from(a) & mask)
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Count {
    failures: u32,
    last_failure_ms: u64,
    blocked_until_ms: u64,
}

/// The counts: the newer generation takes every update; the older is read, and an address found
/// there moves up. When the newer fills, it becomes the older and the older is dropped.
#[derive(Debug, Default)]
struct Generations {
    newer: HashMap<Source, Count>,
    older: HashMap<Source, Count>,
}

impl Generations {
    fn get(&self, source: &Source) -> Option<Count> {
        self.newer
            .get(source)
            .or_else(|| self.older.get(source))
            .copied()
    }

    /// Stores `count`; returns the generation dropped to make room, for the caller to free
    /// outside the lock.
    fn put(&mut self, source: Source, count: Count) -> Option<HashMap<Source, Count>> {
        let mut dropped = None;
        if !self.newer.contains_key(&source) && self.newer.len() >= MAX_TRACKED / 2 {
            let newer = std::mem::take(&mut self.newer);
            dropped = Some(std::mem::replace(&mut self.older, newer));
        }
        self.older.remove(&source);
        self.newer.insert(source, count);
        dropped
    }
}

/// The back-off of client authentication (see the module).
#[derive(Debug, Default)]
pub struct ClientAuthThrottle {
    counts: Mutex<Generations>,
}

impl ClientAuthThrottle {
    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a client authentication from `ip` may be tried at `now_ms` (milliseconds since
    /// the epoch): `Err(seconds)` to wait, rounded up.
    pub fn check(&self, ip: Option<IpAddr>, now_ms: u64) -> Result<(), u64> {
        let Some(count) = self.lock().get(&Source::of(ip)) else {
            return Ok(());
        };
        if count.blocked_until_ms > now_ms {
            Err((count.blocked_until_ms - now_ms).div_ceil(1000))
        } else {
            Ok(())
        }
    }

    /// Counts a failed client authentication from `ip` at `now_ms`.
    pub fn failed(&self, ip: Option<IpAddr>, now_ms: u64) {
        let source = Source::of(ip);
        let mut counts = self.lock();
        let count = match counts.get(&source) {
            Some(c) if now_ms.saturating_sub(c.last_failure_ms) < FORGIVE_AFTER_MS => c,
            _ => Count {
                failures: 0,
                last_failure_ms: now_ms,
                blocked_until_ms: 0,
            },
        };
        let failures = count.failures.saturating_add(1);
        let blocked_until_ms = match failures.checked_sub(FREE_FAILURES + 1) {
            None => count.blocked_until_ms,
            Some(doublings) => {
                let wait = BASE_WAIT_MS
                    .checked_shl(doublings.min(32))
                    .map_or(MAX_WAIT_MS, |w| w.min(MAX_WAIT_MS));
                count.blocked_until_ms.max(now_ms.saturating_add(wait))
            }
        };
        let count = Count {
            failures,
            last_failure_ms: now_ms,
            blocked_until_ms,
        };
        let dropped = counts.put(source, count);
        drop(counts);
        drop(dropped);
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        let counts = self.lock();
        counts.newer.len() + counts.older.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    /// Fails from `from` until it must wait; returns the failures that were free.
    fn fail_until_held(t: &ClientAuthThrottle, from: Option<IpAddr>, now_ms: u64) -> u32 {
        let mut free = 0;
        while t.check(from, now_ms).is_ok() {
            t.failed(from, now_ms);
            free += 1;
            assert!(free <= FREE_FAILURES + 1, "never held");
        }
        free
    }

    #[test]
    fn free_failures_then_a_doubling_wait_up_to_the_cap() {
        let t = ClientAuthThrottle::default();
        let a = ip("192.0.2.1");
        assert_eq!(fail_until_held(&t, a, 0), FREE_FAILURES + 1);
        assert_eq!(t.check(a, 0), Err(1));
        assert_eq!(t.check(a, 999), Err(1));
        assert_eq!(t.check(a, 1_000), Ok(()));
        let mut at = 1_000;
        for expected in [2, 4, 8, 16, 32, 64, 128, 256, 300, 300] {
            t.failed(a, at);
            assert_eq!(t.check(a, at), Err(expected));
            at += expected * 1_000;
        }
        // Others are not held, and nothing is held for good.
        assert_eq!(t.check(ip("192.0.2.2"), at - 1), Ok(()));
        assert_eq!(t.check(a, at), Ok(()));
    }

    #[test]
    fn an_address_is_forgiven_after_a_quiet_spell() {
        let t = ClientAuthThrottle::default();
        let a = ip("192.0.2.1");
        for _ in 0..FREE_FAILURES {
            t.failed(a, 0);
        }
        t.failed(a, FORGIVE_AFTER_MS);
        assert_eq!(t.check(a, FORGIVE_AFTER_MS), Ok(()), "counted afresh");
        assert_eq!(fail_until_held(&t, a, FORGIVE_AFTER_MS), FREE_FAILURES);
    }

    #[test]
    fn ipv6_counts_by_its_64_prefix_and_mapped_ipv4_as_ipv4() {
        let t = ClientAuthThrottle::default();
        for i in 0..=FREE_FAILURES {
            t.failed(ip(&format!("2001:db8:1:1::{i:x}")), 0);
        }
        assert!(t.check(ip("2001:db8:1:1:ffff:ffff:ffff:ffff"), 0).is_err());
        assert_eq!(t.check(ip("2001:db8:1:2::1"), 0), Ok(()));
        for _ in 0..=FREE_FAILURES {
            t.failed(ip("::ffff:192.0.2.9"), 0);
        }
        assert!(t.check(ip("192.0.2.9"), 0).is_err());
        assert_eq!(t.check(None, 0), Ok(()));
    }

    #[test]
    fn tracked_addresses_are_bounded() {
        let t = ClientAuthThrottle::default();
        let held = ip("198.51.100.1");
        fail_until_held(&t, held, 0);
        for i in 0..(MAX_TRACKED as u32 + 10) {
            t.failed(Some(IpAddr::V4(i.into())), 0);
            assert!(t.tracked() <= MAX_TRACKED);
        }
        // Only a flood of this many addresses pushes an address out.
        assert_eq!(t.check(held, 0), Ok(()));
    }
}
