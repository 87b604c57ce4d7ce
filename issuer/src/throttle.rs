//! Temporary, growing back-off against password guessing, per user name and per source address.
//!
//! After `free_failures` consecutive failures a key must wait before it may try again; each further
//! failure doubles the wait, up to `max_delay`. A success clears the user's count. Nothing is ever
//! locked for good, and state lives in memory only (a restart forgives).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;

/// Back-off settings.
#[derive(Debug, Clone, Copy)]
pub struct ThrottlePolicy {
    /// Failures per user name allowed before waits begin.
    pub user_free_failures: u32,
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
    User(String),
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
        std::iter::once(Subject::User(user.to_owned())).chain(addr.map(Subject::Addr))
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

    fn failure(&self, user: &str, now: u64) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
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
            Subject::User(_) => self.policy.user_free_failures,
            Subject::Addr(_) => self.policy.addr_free_failures,
        }
    }

    fn success(&self, user: &str, addr: Option<IpAddr>) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.remove(&Subject::User(user.to_owned()));
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
    /// Wrong credentials: the user's failures grow (the address keeps its charge).
    pub fn failed(mut self, now: u64) {
        self.settled = true;
        self.throttle.failure(&self.user, now);
    }

    /// Right credentials: the user's count starts over and the address gets its charge back.
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
    fn delay_is_capped() {
        let t = Throttle::new(ThrottlePolicy::default());
        for i in 0..200 {
            let _ = fail(&t, "x", None, 1000 + i * 400);
        }
        assert_eq!(t.attempt("x", None, 1000 + 199 * 400).err(), Some(300));
    }
}
