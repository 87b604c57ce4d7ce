//! Back-off against guessing client secrets, per source address.
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
//! O(1) amortised and never scans under the lock. Pushing a held address out takes failures from
//! some 50,000 other addresses, each of which got its own free failures anyway.

use crate::throttle::counted_address;
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

/// Where a client authentication came from, as counted: the address by
/// [`counted_address`] (an IPv6 address by its first [`IPV6_PREFIX`] bits), or `None` when no
/// address is known (never over TCP: all such calls count together).
type Source = Option<IpAddr>;

fn source_of(ip: Option<IpAddr>) -> Source {
    ip.map(|ip| counted_address(ip, IPV6_PREFIX))
}

#[derive(Debug, Clone, Copy, Default)]
struct Count {
    /// Failures since the address was last forgiven.
    failures: u32,
    last_failure_ms: u64,
    blocked_until_ms: u64,
}

impl Count {
    /// Seconds to wait at `now_ms`, if any.
    fn wait(&self, now_ms: u64) -> Result<(), u64> {
        if self.blocked_until_ms > now_ms {
            Err((self.blocked_until_ms - now_ms).div_ceil(1000))
        } else {
            Ok(())
        }
    }

    /// The count after a failure at `now_ms`.
    fn fail(mut self, now_ms: u64) -> Self {
        self.failures = self.failures.saturating_add(1);
        self.last_failure_ms = now_ms;
        if let Some(doublings) = self.failures.checked_sub(FREE_FAILURES + 1) {
            let wait = BASE_WAIT_MS
                .checked_shl(doublings.min(32))
                .map_or(MAX_WAIT_MS, |w| w.min(MAX_WAIT_MS));
            self.blocked_until_ms = self.blocked_until_ms.max(now_ms.saturating_add(wait));
        }
        self
    }
}

/// The counts: the newer generation takes every update; the older is read, and an address found
/// there moves up. When the newer fills, it becomes the older and the older is dropped.
#[derive(Debug, Default)]
struct Generations {
    newer: HashMap<Source, Count>,
    older: HashMap<Source, Count>,
}

impl Generations {
    /// The count of `source` at `now_ms`, forgiven if quiet long enough.
    fn get(&self, source: &Source, now_ms: u64) -> Count {
        let count = self
            .newer
            .get(source)
            .or_else(|| self.older.get(source))
            .copied()
            .unwrap_or_default();
        let quiet = now_ms.saturating_sub(count.last_failure_ms) >= FORGIVE_AFTER_MS;
        if quiet && count.blocked_until_ms <= now_ms {
            Count::default()
        } else {
            count
        }
    }

    /// Stores `count`; returns the generation dropped to make room, for the caller to free
    /// outside the lock.
    fn put(&mut self, source: Source, count: Count) -> Option<HashMap<Source, Count>> {
        self.older.remove(&source);
        let mut dropped = None;
        if !self.newer.contains_key(&source) && self.newer.len() >= MAX_TRACKED / 2 {
            let newer = std::mem::take(&mut self.newer);
            dropped = Some(std::mem::replace(&mut self.older, newer));
        }
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

    /// Whether `ip` must wait at `now_ms` (milliseconds since the epoch): `Err(seconds)`. A cheap
    /// look before the client is read; [`ClientAuthThrottle::attempt`] decides.
    pub fn check(&self, ip: Option<IpAddr>, now_ms: u64) -> Result<(), u64> {
        self.lock().get(&source_of(ip), now_ms).wait(now_ms)
    }

    /// One client authentication from `ip` at `now_ms`: `Err(seconds)` if the address must wait
    /// (then `authenticates` is not called), else whether `authenticates()` said yes, a no
    /// counted. The look, the check and the count are one step under the lock (the check is one
    /// keyed hash), so a burst of concurrent guesses cannot pass before the first is counted.
    pub fn attempt(
        &self,
        ip: Option<IpAddr>,
        now_ms: u64,
        authenticates: impl FnOnce() -> bool,
    ) -> Result<bool, u64> {
        let source = source_of(ip);
        let mut counts = self.lock();
        let count = counts.get(&source, now_ms);
        count.wait(now_ms)?;
        if authenticates() {
            return Ok(true);
        }
        let dropped = counts.put(source, count.fail(now_ms));
        drop(counts);
        drop(dropped);
        Ok(false)
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

    fn fail(t: &ClientAuthThrottle, from: Option<IpAddr>, now_ms: u64) {
        assert_eq!(t.attempt(from, now_ms, || false), Ok(false));
    }

    /// A successful authentication, or the wait.
    fn succeed(t: &ClientAuthThrottle, from: Option<IpAddr>, now_ms: u64) -> Result<(), u64> {
        t.attempt(from, now_ms, || true).map(|ok| assert!(ok))
    }

    /// Fails from `from` until it must wait; returns the failures that were free.
    fn fail_until_held(t: &ClientAuthThrottle, from: Option<IpAddr>, now_ms: u64) -> u32 {
        let mut free = 0;
        while t.attempt(from, now_ms, || false).is_ok() {
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
        assert_eq!(succeed(&t, a, 999), Err(1), "the right secret waits too");
        assert_eq!(succeed(&t, a, 1_000), Ok(()), "a success clears nothing");
        let mut at = 1_000;
        for expected in [2, 4, 8, 16, 32, 64, 128, 256, 300, 300] {
            fail(&t, a, at);
            assert_eq!(t.check(a, at), Err(expected));
            at += expected * 1_000;
        }
        // Others are not held, and nothing is held for good.
        assert_eq!(succeed(&t, ip("192.0.2.2"), at - 1), Ok(()));
        assert_eq!(t.check(a, at), Ok(()));
    }

    #[test]
    fn a_held_address_has_no_secret_checked() {
        let t = ClientAuthThrottle::default();
        let a = ip("192.0.2.1");
        fail_until_held(&t, a, 0);
        assert_eq!(
            t.attempt(a, 10, || unreachable!("checked while held")),
            Err(1)
        );
    }

    #[test]
    fn an_address_is_forgiven_after_a_quiet_spell() {
        let t = ClientAuthThrottle::default();
        let a = ip("192.0.2.1");
        for _ in 0..FREE_FAILURES {
            fail(&t, a, 0);
        }
        fail(&t, a, FORGIVE_AFTER_MS);
        assert_eq!(t.check(a, FORGIVE_AFTER_MS), Ok(()), "counted afresh");
        assert_eq!(fail_until_held(&t, a, FORGIVE_AFTER_MS), FREE_FAILURES);
    }

    #[test]
    fn ipv6_counts_by_its_64_prefix_and_mapped_ipv4_as_ipv4() {
        let t = ClientAuthThrottle::default();
        for i in 0..=FREE_FAILURES {
            fail(&t, ip(&format!("2001:db8:1:1::{i:x}")), 0);
        }
        assert!(t.check(ip("2001:db8:1:1:ffff:ffff:ffff:ffff"), 0).is_err());
        assert_eq!(succeed(&t, ip("2001:db8:1:2::1"), 0), Ok(()));
        for _ in 0..=FREE_FAILURES {
            fail(&t, ip("::ffff:192.0.2.9"), 0);
        }
        assert!(t.check(ip("192.0.2.9"), 0).is_err());
        assert_eq!(succeed(&t, None, 0), Ok(()));
    }

    #[test]
    fn tracked_addresses_are_bounded() {
        let t = ClientAuthThrottle::default();
        let held = ip("198.51.100.1");
        fail_until_held(&t, held, 0);
        // Successes leave nothing behind.
        assert_eq!(succeed(&t, ip("192.0.2.1"), 0), Ok(()));
        assert_eq!(t.tracked(), 1);
        for i in 0..(MAX_TRACKED as u32 + 10) {
            fail(&t, Some(IpAddr::V4(i.into())), 0);
            assert!(t.tracked() <= MAX_TRACKED);
        }
        // Only a flood of this many addresses pushes an address out.
        assert_eq!(t.check(held, 0), Ok(()));
    }
}
