//! Temporary, growing back-off against password guessing, counted three ways:
//!
//! - per user name **and** source address (5 free failures): the guesser from one address meets
//!   the back-off, while the user signing in from elsewhere does not (OWASP's answer to lock-out
//!   by a third party);
//! - per user name across all addresses (50 free failures): guesses spread over many addresses
//!   are still bounded, at the price that such an attacker can make the user wait too;
//! - per source address across all users (20 free failures): credential stuffing.
//!
//! After its free failures a key must wait before it may try again; each further failure doubles
//! the wait, up to `max_delay`. A success clears the count of its user and address and gives the
//! address its charge back; the user's total forgives only with time, so a guesser cannot reset it
//! by signing in to an account of their own. Nothing is ever locked for good, and state lives in
//! memory only (a restart forgives). `docs/threat-model.md` weighs the choice.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Back-off settings.
#[derive(Debug, Clone, Copy)]
pub struct ThrottlePolicy {
    /// Failures per user name from one address allowed before waits begin.
    pub user_free_failures: u32,
    /// Failures per user name from all addresses together allowed before waits begin.
    pub user_total_free_failures: u32,
    /// Failures per source address allowed before waits begin.
    pub addr_free_failures: u32,
    /// First wait, in seconds.
    pub base_delay: u64,
    /// Longest wait, in seconds.
    pub max_delay: u64,
}

impl Default for ThrottlePolicy {
    fn default() -> Self {
        Self {
            user_free_failures: 5,
            user_total_free_failures: 50,
            addr_free_failures: 20,
            base_delay: 1,
            max_delay: 300,
        }
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct Entry {
    failures: u32,
    blocked_until: u64,
    last_failure: u64,
}

#[derive(Debug, Hash, PartialEq, Eq, Clone)]
enum Subject {
    /// One user name from one address (or from wherever, when the address is unknown).
    UserAt(String, Option<IpAddr>),
    /// One user name from every address.
    User(String),
    /// One address, every user name.
    Addr(IpAddr),
}

/// Most keys tracked; beyond this, entries that no longer block anything are dropped first.
const MAX_ENTRIES: usize = 100_000;

/// The throttle's memory.
#[derive(Debug, Default)]
pub struct Throttle {
    policy: ThrottlePolicy,
    entries: Mutex<HashMap<Subject, Entry>>,
}

impl Throttle {
    /// A throttle with this policy.
    pub fn new(policy: ThrottlePolicy) -> Self {
        Self {
            policy,
            entries: Mutex::default(),
        }
    }

    fn keys(user: &str, addr: Option<IpAddr>) -> impl Iterator<Item = Subject> {
        [
            Subject::UserAt(user.to_owned(), addr),
            Subject::User(user.to_owned()),
        ]
        .into_iter()
        .chain(addr.map(Subject::Addr))
    }

    /// Starts a sign-in attempt: `Err(seconds)` to wait, or the [`Attempt`]. The address is charged
    /// now, under one lock with the check, so concurrent guesses from one address across many users
    /// cannot outrun its count; [`Attempt::succeeded`] refunds it. Per user, the caller serialises
    /// attempts (see `App`) and settles each with [`Attempt::failed`] or `succeeded`.
    pub fn attempt(&self, user: &str, addr: Option<IpAddr>, now: u64) -> Result<Attempt<'_>, u64> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let wait = Self::keys(user, addr)
            .filter_map(|k| entries.get(&k))
            .filter(|e| e.blocked_until > now)
            .map(|e| e.blocked_until - now)
            .max();
        if let Some(wait) = wait {
            return Err(wait);
        }
        if let Some(addr) = addr {
            self.charge(&mut entries, Subject::Addr(addr), now);
        }
        Ok(Attempt {
            throttle: self,
            user: user.to_owned(),
            addr,
            settled: false,
        })
    }

    fn failure(&self, user: &str, addr: Option<IpAddr>, now: u64) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        self.charge(&mut entries, Subject::UserAt(user.to_owned(), addr), now);
        self.charge(&mut entries, Subject::User(user.to_owned()), now);
    }

    fn charge(&self, entries: &mut HashMap<Subject, Entry>, key: Subject, now: u64) {
        if entries.len() >= MAX_ENTRIES {
            let horizon = self.policy.max_delay * 2;
            entries.retain(|_, e| {
                e.blocked_until > now || now.saturating_sub(e.last_failure) < horizon
            });
        }
        let free = self.free(&key);
        let e = entries.entry(key).or_default();
        // A long quiet spell forgives old failures.
        if now.saturating_sub(e.last_failure) > self.policy.max_delay * 2 {
            e.failures = 0;
        }
        e.failures += 1;
        e.last_failure = now;
        if e.failures > free {
            let exp = (e.failures - free - 1).min(20);
            e.blocked_until = now + (self.policy.base_delay << exp).min(self.policy.max_delay);
        }
    }

    fn free(&self, key: &Subject) -> u32 {
        match key {
            Subject::UserAt(..) => self.policy.user_free_failures,
            Subject::User(_) => self.policy.user_total_free_failures,
            Subject::Addr(_) => self.policy.addr_free_failures,
        }
    }

    fn success(&self, user: &str, addr: Option<IpAddr>) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.remove(&Subject::UserAt(user.to_owned(), addr));
        self.refund(&mut entries, addr);
    }

    fn refund(&self, entries: &mut HashMap<Subject, Entry>, addr: Option<IpAddr>) {
        if let Some(addr) = addr {
            let key = Subject::Addr(addr);
            let free = self.free(&key);
            if let Some(e) = entries.get_mut(&key) {
                e.failures = e.failures.saturating_sub(1);
                if e.failures <= free {
                    e.blocked_until = 0;
                }
            }
        }
    }
}

/// A sign-in attempt in progress. Settle it with [`Attempt::failed`] or [`Attempt::succeeded`];
/// dropped unsettled (the client went away mid-check), it gives the address its charge back.
pub struct Attempt<'a> {
    throttle: &'a Throttle,
    user: String,
    addr: Option<IpAddr>,
    settled: bool,
}

impl Attempt<'_> {
    /// Wrong credentials, an unknown or a disabled user: the user's failures grow, from this
    /// address and in total (the address keeps its charge).
    pub fn failed(mut self, now: u64) {
        self.settled = true;
        self.throttle.failure(&self.user, self.addr, now);
    }

    /// Right credentials of an active user: the user's count from this address starts over and
    /// the address gets its charge back.
    pub fn succeeded(mut self) {
        self.settled = true;
        self.throttle.success(&self.user, self.addr);
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if !self.settled {
            let mut entries = self
                .throttle
                .entries
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            self.throttle.refund(&mut entries, self.addr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fail(t: &Throttle, user: &str, addr: Option<IpAddr>, now: u64) -> Result<(), u64> {
        t.attempt(user, addr, now)?.failed(now);
        Ok(())
    }

    #[test]
    fn backs_off_growing_then_forgives() {
        let t = Throttle::new(ThrottlePolicy::default());
        let ip = Some("10.0.0.1".parse().unwrap());
        for _ in 0..6 {
            assert_eq!(fail(&t, "bob", ip, 100), Ok(()));
        }
        assert_eq!(
            t.attempt("bob", ip, 100).err(),
            Some(1),
            "the sixth failure set a 1 s wait"
        );
        assert_eq!(fail(&t, "bob", ip, 101), Ok(()));
        assert_eq!(
            t.attempt("bob", ip, 101).err(),
            Some(2),
            "each further failure doubles it"
        );
        assert!(
            t.attempt("alice", None, 101).is_ok(),
            "other users are not affected"
        );
        t.attempt("bob", ip, 103)
            .expect("the wait is temporary")
            .succeeded();
        assert!(t.attempt("bob", None, 103).is_ok());
    }

    #[test]
    fn an_address_is_charged_before_its_attempts_finish() {
        let t = Throttle::new(ThrottlePolicy::default());
        let ip = Some("10.0.0.3".parse().unwrap());
        // Nothing finishes: the free attempts and the one that sets the wait get through.
        let in_flight: Vec<_> = (0..100)
            .filter_map(|i| t.attempt(&format!("user{i}"), ip, 50).ok())
            .collect();
        assert_eq!(in_flight.len(), 21);
        // Abandoned (the clients went away): the address gets its charges back.
        drop(in_flight);
        assert!(t.attempt("later", ip, 50).is_ok());
    }

    #[test]
    fn successes_cost_nothing() {
        let t = Throttle::new(ThrottlePolicy::default());
        let ip = Some("10.0.0.4".parse().unwrap());
        for i in 0..100 {
            t.attempt("busy", ip, 50 + i)
                .expect("never throttled")
                .succeeded();
        }
    }

    #[test]
    fn address_is_throttled_across_users_and_refunded_on_success() {
        let t = Throttle::new(ThrottlePolicy::default());
        let ip = Some("10.0.0.2".parse().unwrap());
        for i in 0..21 {
            assert!(fail(&t, &format!("user{i}"), ip, 50).is_ok());
        }
        assert!(t.attempt("fresh", ip, 50).is_err());
        assert!(t.attempt("fresh", None, 50).is_ok());
        t.success("user20", ip);
        assert!(
            t.attempt("fresh2", ip, 50).is_ok(),
            "a success gives the address its attempt back"
        );
    }

    #[test]
    fn a_guesser_elsewhere_does_not_lock_the_user_out() {
        let t = Throttle::new(ThrottlePolicy::default());
        let attacker = Some("203.0.113.9".parse().unwrap());
        let user = Some("198.51.100.7".parse().unwrap());
        for _ in 0..6 {
            assert_eq!(fail(&t, "bob", attacker, 100), Ok(()));
        }
        assert!(t.attempt("bob", attacker, 100).is_err());
        t.attempt("bob", user, 100)
            .expect("bob from his own address is not throttled")
            .succeeded();
        assert!(
            t.attempt("bob", attacker, 100).is_err(),
            "bob's success does not clear the attacker's back-off"
        );
    }

    #[test]
    fn guesses_spread_over_addresses_are_bounded_per_user() {
        let t = Throttle::new(ThrottlePolicy::default());
        // Each address stays within its free failures; the user's total does not.
        let addr = |i: u32| Some(IpAddr::from([10, 1, (i / 250) as u8, (i % 250) as u8]));
        for i in 0..51 {
            assert_eq!(fail(&t, "carol", addr(i), 100), Ok(()), "guess {i}");
        }
        assert_eq!(t.attempt("carol", addr(1000), 100).err(), Some(1));
        // A success of the attacker's own account does not reset carol's total.
        t.attempt("mallory", addr(0), 100).unwrap().succeeded();
        assert!(t.attempt("carol", addr(1001), 100).is_err());
        assert!(t.attempt("carol", addr(1001), 101).is_ok(), "only a wait");
    }

    #[test]
    fn delay_is_capped() {
        let t = Throttle::new(ThrottlePolicy::default());
        for i in 0..200 {
            let _ = fail(&t, "x", None, 1000 + i * 400);
        }
        assert_eq!(t.attempt("x", None, 1000 + 199 * 400).err(), Some(300));
    }
}
