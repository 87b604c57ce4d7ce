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

    /// Seconds to wait before this user may try from this address, or `None` if it may now.
    pub fn check(&self, user: &str, addr: Option<IpAddr>, now: u64) -> Option<u64> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        Self::keys(user, addr)
            .filter_map(|k| entries.get(&k))
            .filter(|e| e.blocked_until > now)
            .map(|e| e.blocked_until - now)
            .max()
    }

    /// Records a failed attempt.
    pub fn failure(&self, user: &str, addr: Option<IpAddr>, now: u64) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES {
            let horizon = self.policy.max_delay * 2;
            entries.retain(|_, e| {
                e.blocked_until > now || now.saturating_sub(e.last_failure) < horizon
            });
        }
        for key in Self::keys(user, addr) {
            let free = match key {
                Subject::User(_) => self.policy.user_free_failures,
                Subject::Addr(_) => self.policy.addr_free_failures,
            };
            let e = entries.entry(key).or_default();
            // A long quiet spell forgives old failures.
            if now.saturating_sub(e.last_failure) > self.policy.max_delay * 2 {
                e.failures = 0;
            }
            e.failures += 1;
            e.last_failure = now;
            if e.failures > free {
                let exp = (e.failures - free - 1).min(20);
                let delay = (self.policy.base_delay << exp).min(self.policy.max_delay);
                e.blocked_until = now + delay;
            }
        }
    }

    /// Records a successful sign-in: the user's count starts over (the address keeps its own).
    pub fn success(&self, user: &str) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries.remove(&Subject::User(user.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backs_off_growing_then_forgives() {
        let t = Throttle::new(ThrottlePolicy::default());
        let ip = Some("10.0.0.1".parse().unwrap());
        for _ in 0..5 {
            assert_eq!(t.check("bob", ip, 100), None);
            t.failure("bob", ip, 100);
        }
        assert_eq!(t.check("bob", ip, 100), None);
        t.failure("bob", ip, 100);
        assert_eq!(t.check("bob", ip, 100), Some(1));
        t.failure("bob", ip, 101);
        assert_eq!(t.check("bob", ip, 101), Some(2));
        assert_eq!(
            t.check("alice", None, 101),
            None,
            "other users are not affected"
        );
        assert_eq!(t.check("bob", ip, 103), None, "the wait is temporary");
        t.success("bob");
        assert_eq!(t.check("bob", None, 103), None);
    }

    #[test]
    fn address_is_throttled_across_users() {
        let t = Throttle::new(ThrottlePolicy::default());
        let ip = Some("10.0.0.2".parse().unwrap());
        for i in 0..21 {
            t.failure(&format!("user{i}"), ip, 50);
        }
        assert!(t.check("fresh", ip, 50).is_some());
        assert_eq!(t.check("fresh", None, 50), None);
    }

    #[test]
    fn delay_is_capped() {
        let t = Throttle::new(ThrottlePolicy::default());
        for _ in 0..200 {
            t.failure("x", None, 1000);
        }
        assert_eq!(t.check("x", None, 1000), Some(300));
    }
}
