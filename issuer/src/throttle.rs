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
//! the book (a restart of an issuer with the in-memory book forgives). `docs/threat-model.md` weighs the choice.
//!
//! Where the counts live is a [`ThrottleBook`]: this process's memory ([`MemoryBook`], with the
//! embedded store), or the PostgreSQL database that several issuers share, so that guesses spread
//! over N issuers meet the same back-off as guesses at one.

pub use crate::store::throttle::{Entry, MemoryBook, ThrottleBook, FORGET_AFTER};
use crate::store::StoreError;
use serde::Serialize;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

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

#[derive(Debug, Hash, PartialEq, Eq, Clone, Serialize)]
enum Subject {
    /// One user name from one address (or from wherever, when the address is unknown).
    UserAt(String, Option<IpAddr>),
    /// One user name from every address.
    User(String),
    /// One address, every user name.
    Addr(IpAddr),
    /// Sign-ins the directory refused, for one name as typed (without case) or one directory
    /// entry (its DN, whichever name found it): kept below the directory's own lock-out
    /// threshold ([`DIRECTORY_FREE_FAILURES`], [`DIRECTORY_WAIT`]).
    Directory(String),
}

/// Refused binds of one user the directory sees before the issuer stops sending them: below
/// Active Directory's lock-out thresholds in use (5 per CIS, 10 by Windows' default).
pub const DIRECTORY_FREE_FAILURES: u32 = 4;
/// Seconds a user waits after that, each further refused bind: longer than AD's default "reset
/// account lockout counter after" (10 minutes), so the directory's count starts over between
/// two of them and never reaches its threshold through the issuer.
pub const DIRECTORY_WAIT: u64 = 900;

impl Subject {
    /// The key in a book: the subject as JSON (user names hold any printable character).
    fn key(&self) -> String {
        serde_json::to_string(self).expect("subjects serialize")
    }
}

/// The throttle: its policy over a book.
#[derive(Debug)]
pub struct Throttle {
    policy: ThrottlePolicy,
    book: Arc<dyn ThrottleBook>,
}

/// Whether a sign-in attempt may go ahead.
pub enum Turn<'a> {
    /// Check the password, then settle the attempt.
    Go(Attempt<'a>),
    /// Refused: wait this many seconds.
    Wait(u64),
}

impl Throttle {
    /// A throttle with this policy, keeping its counts in `book`.
    pub fn new(policy: ThrottlePolicy, book: Arc<dyn ThrottleBook>) -> Self {
        Self { policy, book }
    }

    /// A throttle with this policy in this process's memory.
    pub fn in_memory(policy: ThrottlePolicy) -> Self {
        Self::new(policy, Arc::new(MemoryBook::new(policy.max_delay * 2)))
    }

    fn free(&self, key: &Subject) -> u32 {
        match key {
            Subject::UserAt(..) => self.policy.user_free_failures,
            Subject::User(_) => self.policy.user_total_free_failures,
            Subject::Addr(_) => self.policy.addr_free_failures,
            Subject::Directory(_) => DIRECTORY_FREE_FAILURES,
        }
    }

    /// Counts one failure of `subject` in its entry.
    fn charge(&self, entries: &mut HashMap<String, Entry>, subject: &Subject, now: u64) {
        let free = self.free(subject);
        let e = entries.entry(subject.key()).or_default();
        let directory = matches!(subject, Subject::Directory(_));
        let forgive_after = if directory {
            DIRECTORY_WAIT
        } else {
            self.policy.max_delay * 2
        };
        // A long quiet spell forgives old failures.
        if now.saturating_sub(e.last_failure) > forgive_after {
            e.failures = 0;
        }
        e.failures += 1;
        e.last_failure = now;
        if directory && e.failures >= free {
            e.blocked_until = now + DIRECTORY_WAIT;
        } else if e.failures > free {
            let exp = (e.failures - free - 1).min(20);
            e.blocked_until = now + (self.policy.base_delay << exp).min(self.policy.max_delay);
        }
    }

    /// Gives `addr` one attempt back.
    fn refund(&self, entries: &mut HashMap<String, Entry>, addr: &Subject) {
        let free = self.free(addr);
        if let Some(e) = entries.get_mut(&addr.key()) {
            e.failures = e.failures.saturating_sub(1);
            if e.failures <= free {
                e.blocked_until = 0;
            }
        }
    }

    /// Starts a sign-in attempt: [`Turn::Wait`] while any of its counts blocks, else the
    /// [`Attempt`]. The address is charged now, in one step with the check, so concurrent guesses
    /// from one address across many users cannot outrun its count; [`Attempt::succeeded`] refunds
    /// it. Per user, the caller serialises attempts (see `App`) and settles each one.
    pub async fn attempt(
        &self,
        user: &str,
        addr: Option<IpAddr>,
        now: u64,
    ) -> Result<Turn<'_>, StoreError> {
        let subjects: Vec<Subject> = [
            Subject::UserAt(user.to_owned(), addr),
            Subject::User(user.to_owned()),
            Subject::Directory(name_key(user)),
        ]
        .into_iter()
        .chain(addr.map(Subject::Addr))
        .collect();
        let keys: Vec<String> = subjects.iter().map(Subject::key).collect();
        let mut wait = None;
        self.book
            .update(&keys, now, &mut |entries| {
                wait = keys
                    .iter()
                    .filter_map(|k| entries.get(k))
                    .filter(|e| e.blocked_until > now)
                    .map(|e| e.blocked_until - now)
                    .max();
                if wait.is_none() {
                    if let Some(a) = subjects.get(3) {
                        self.charge(entries, a, now);
                    }
                }
            })
            .await?;
        Ok(match wait {
            Some(w) => Turn::Wait(w),
            None => Turn::Go(Attempt {
                throttle: self,
                user: user.to_owned(),
                addr,
                settled: false,
            }),
        })
    }
}

impl Throttle {
    /// Takes the lease `name` for `seconds` if nobody holds it at `now`: work that one issuer of
    /// several on a shared book does for all (the directory recheck). The book is the store's
    /// atomic shared map; the lease is an entry blocked until it runs out, never charged.
    pub async fn try_lease(&self, name: &str, now: u64, seconds: u64) -> Result<bool, StoreError> {
        let key = format!("lease:{name}");
        let mut taken = false;
        self.book
            .update(std::slice::from_ref(&key), now, &mut |entries| {
                // Decided afresh each call: a book may run this again after a conflict.
                let e = entries.entry(key.clone()).or_default();
                taken = e.blocked_until <= now;
                if taken {
                    e.blocked_until = now + seconds;
                    e.last_failure = now;
                }
            })
            .await?;
        Ok(taken)
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
    pub async fn failed(self, now: u64) -> Result<(), StoreError> {
        self.failed_with(now, None).await
    }

    /// A sign-in the directory refused (any reason, so a name that exists looks like one that
    /// does not): [`Attempt::failed`], and the directory counts of the name and, when the
    /// directory found one, of the entry `dn` grow too.
    pub async fn failed_in_directory(self, now: u64, dn: Option<&str>) -> Result<(), StoreError> {
        self.failed_with(now, Some(dn)).await
    }

    async fn failed_with(
        mut self,
        now: u64,
        directory: Option<Option<&str>>,
    ) -> Result<(), StoreError> {
        self.settled = true;
        let t = self.throttle;
        let mut subjects = vec![
            Subject::UserAt(self.user.clone(), self.addr),
            Subject::User(self.user.clone()),
        ];
        if let Some(dn) = directory {
            subjects.push(Subject::Directory(name_key(&self.user)));
            subjects.extend(dn.map(|dn| Subject::Directory(dn_key(dn))));
        }
        let keys: Vec<String> = subjects.iter().map(Subject::key).collect();
        t.book
            .update(&keys, now, &mut |entries| {
                for s in &subjects {
                    t.charge(entries, s, now);
                }
            })
            .await
    }

    /// Right credentials of an active user: the user's count from this address starts over and
    /// the address gets its charge back.
    pub async fn succeeded(self, now: u64) -> Result<(), StoreError> {
        self.succeeded_with(now, None).await
    }

    /// The directory vouched for the entry `dn`: [`Attempt::succeeded`], and its directory
    /// counts start over (as the directory's own count does at a good bind).
    pub async fn succeeded_in_directory(self, now: u64, dn: &str) -> Result<(), StoreError> {
        self.succeeded_with(now, Some(dn)).await
    }

    async fn succeeded_with(mut self, now: u64, dn: Option<&str>) -> Result<(), StoreError> {
        self.settled = true;
        let t = self.throttle;
        let mut gone = vec![
            Subject::UserAt(self.user.clone(), self.addr),
            Subject::Directory(name_key(&self.user)),
        ];
        gone.extend(dn.map(|dn| Subject::Directory(dn_key(dn))));
        let addr = self.addr.map(Subject::Addr);
        let keys: Vec<String> = gone.iter().chain(addr.as_ref()).map(Subject::key).collect();
        t.book
            .update(&keys, now, &mut |entries| {
                for s in &gone {
                    entries.remove(&s.key());
                }
                if let Some(a) = &addr {
                    t.refund(entries, a);
                }
            })
            .await
    }
}

/// The directory count of a name as typed: directories match names without case.
fn name_key(user: &str) -> String {
    format!("name:{}", user.to_lowercase())
}

/// The directory count of an entry.
fn dn_key(dn: &str) -> String {
    format!("dn:{dn}")
}

impl Throttle {
    /// How long the directory entry `dn` must wait before the directory is asked to bind it
    /// again (`None`: it may go now). Read only.
    pub async fn directory_wait(&self, dn: &str, now: u64) -> Result<Option<u64>, StoreError> {
        let key = Subject::Directory(dn_key(dn)).key();
        let mut wait = None;
        self.book
            .update(std::slice::from_ref(&key), now, &mut |entries| {
                wait = entries
                    .get(&key)
                    .filter(|e| e.blocked_until > now)
                    .map(|e| e.blocked_until - now);
            })
            .await?;
        Ok(wait)
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        let (false, Some(addr)) = (self.settled, self.addr) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // The refund is a write to the book; the request that dropped us is gone, so it runs on.
        let book = self.throttle.book.clone();
        let policy = self.throttle.policy;
        runtime.spawn(async move {
            let throttle = Throttle::new(policy, book);
            let addr = Subject::Addr(addr);
            let keys = [addr.key()];
            let _ = throttle
                .book
                .update(&keys, 0, &mut |entries| throttle.refund(entries, &addr))
                .await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn go<'t>(
        t: &'t Throttle,
        user: &str,
        addr: Option<IpAddr>,
        now: u64,
    ) -> Result<Attempt<'t>, u64> {
        match t.attempt(user, addr, now).await.unwrap() {
            Turn::Go(a) => Ok(a),
            Turn::Wait(w) => Err(w),
        }
    }

    async fn fail(t: &Throttle, user: &str, addr: Option<IpAddr>, now: u64) -> Result<(), u64> {
        go(t, user, addr, now).await?.failed(now).await.unwrap();
        Ok(())
    }

    #[tokio::test]
    async fn a_lease_goes_to_one_taker_until_it_runs_out_and_charges_nobody() {
        let t = Throttle::in_memory(ThrottlePolicy::default());
        assert!(t.try_lease("recheck", 100, 59).await.unwrap());
        assert!(!t.try_lease("recheck", 100, 59).await.unwrap(), "held");
        assert!(
            !t.try_lease("recheck", 158, 59).await.unwrap(),
            "still held"
        );
        assert!(
            t.try_lease("other", 158, 59).await.unwrap(),
            "leases are by name"
        );
        assert!(t.try_lease("recheck", 159, 59).await.unwrap(), "ran out");
        assert!(
            go(&t, "recheck", None, 159).await.is_ok(),
            "a user of that name is not held back"
        );
    }

    /// Refused binds reach the directory at most [`DIRECTORY_FREE_FAILURES`] times in a row,
    /// then one per [`DIRECTORY_WAIT`], from any number of addresses and under any spelling of
    /// the name that finds the entry (case, UPN): with AD's counter reset after 10 minutes, its
    /// count never passes 4 through the issuer. The grant asks [`Throttle::directory_wait`] of
    /// the entry before it binds, as here.
    #[tokio::test]
    async fn refused_binds_stay_below_the_directory_lock_out() {
        let t = Throttle::in_memory(ThrottlePolicy::default());
        let names = ["alice", "Alice", "ALICE", "alice@media.test", "aLiCe"];
        let mut reached = Vec::new();
        let mut now = 1_000;
        for i in 0..400u32 {
            let addr = Some(IpAddr::from([10, 0, (i / 250) as u8, (i % 250) as u8]));
            let name = names[i as usize % names.len()];
            let Ok(a) = go(&t, name, addr, now).await else {
                now += 15;
                continue;
            };
            if t.directory_wait("uid=alice", now).await.unwrap().is_none() {
                a.failed_in_directory(now, Some("uid=alice")).await.unwrap();
                reached.push(now);
            }
            now += 15;
        }
        assert_eq!(&reached[..4], &[1_000, 1_015, 1_030, 1_045], "{reached:?}");
        for (i, at) in reached.iter().enumerate() {
            let in_window = reached[i..].iter().take_while(|t| **t < at + 600).count();
            assert!(
                in_window <= 4,
                "{in_window} refused binds within 10 minutes from {at}"
            );
        }
        assert!(
            reached.len() >= 6,
            "one every 15 minutes goes on: {reached:?}"
        );
        // An unknown name meets the same count (no entry, the name's own): 429 alike.
        for k in 0..DIRECTORY_FREE_FAILURES {
            let a = go(&t, "nobody", None, now + u64::from(k)).await.unwrap();
            a.failed_in_directory(now, None).await.unwrap();
        }
        assert!(
            go(&t, "NOBODY", None, now + 5).await.is_err(),
            "held like a real name"
        );
        // Ordinary wrong passwords (a local user) are not held to it.
        for _ in 0..5 {
            fail(&t, "bob", None, now).await.unwrap();
        }
        // The real user's success starts the entry's count over.
        let later = now + DIRECTORY_WAIT + 1;
        let a = go(&t, "alice", None, later).await.unwrap();
        a.succeeded_in_directory(later, "uid=alice").await.unwrap();
        assert_eq!(t.directory_wait("uid=alice", later).await.unwrap(), None);
    }

    async fn succeed(t: &Throttle, user: &str, addr: Option<IpAddr>, now: u64) {
        go(t, user, addr, now)
            .await
            .expect("not throttled")
            .succeeded(now)
            .await
            .unwrap();
    }

    fn throttle() -> Throttle {
        Throttle::in_memory(ThrottlePolicy::default())
    }

    #[tokio::test]
    async fn backs_off_growing_then_forgives() {
        let t = throttle();
        let ip = Some("10.0.0.1".parse().unwrap());
        for _ in 0..6 {
            assert_eq!(fail(&t, "bob", ip, 100).await, Ok(()));
        }
        assert_eq!(
            go(&t, "bob", ip, 100).await.err(),
            Some(1),
            "the sixth failure set a 1 s wait"
        );
        assert_eq!(fail(&t, "bob", ip, 101).await, Ok(()));
        assert_eq!(
            go(&t, "bob", ip, 101).await.err(),
            Some(2),
            "each further failure doubles it"
        );
        assert!(
            go(&t, "alice", None, 101).await.is_ok(),
            "other users are not affected"
        );
        succeed(&t, "bob", ip, 103).await;
        assert!(go(&t, "bob", None, 103).await.is_ok());
    }

    #[tokio::test]
    async fn an_address_is_charged_before_its_attempts_finish() {
        let t = throttle();
        let ip = Some("10.0.0.3".parse().unwrap());
        // Nothing finishes: the free attempts and the one that sets the wait get through.
        let mut in_flight = Vec::new();
        for i in 0..100 {
            if let Ok(a) = go(&t, &format!("user{i}"), ip, 50).await {
                in_flight.push(a);
            }
        }
        assert_eq!(in_flight.len(), 21);
        // Abandoned (the clients went away): the address gets its charges back.
        drop(in_flight);
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        assert!(go(&t, "later", ip, 50).await.is_ok());
    }

    #[tokio::test]
    async fn successes_cost_nothing() {
        let t = throttle();
        let ip = Some("10.0.0.4".parse().unwrap());
        for i in 0..100 {
            succeed(&t, "busy", ip, 50 + i).await;
        }
    }

    #[tokio::test]
    async fn address_is_throttled_across_users_and_refunded_on_success() {
        let t = throttle();
        let ip = Some("10.0.0.2".parse().unwrap());
        for i in 0..21 {
            assert!(fail(&t, &format!("user{i}"), ip, 50).await.is_ok());
        }
        assert!(go(&t, "fresh", ip, 50).await.is_err());
        assert!(go(&t, "fresh", None, 50).await.is_ok());
    }

    #[tokio::test]
    async fn a_guesser_elsewhere_does_not_lock_the_user_out() {
        let t = throttle();
        let attacker = Some("203.0.113.9".parse().unwrap());
        let user = Some("198.51.100.7".parse().unwrap());
        for _ in 0..6 {
            assert_eq!(fail(&t, "bob", attacker, 100).await, Ok(()));
        }
        assert!(go(&t, "bob", attacker, 100).await.is_err());
        succeed(&t, "bob", user, 100).await;
        assert!(
            go(&t, "bob", attacker, 100).await.is_err(),
            "bob's success does not clear the attacker's back-off"
        );
    }

    #[tokio::test]
    async fn guesses_spread_over_addresses_are_bounded_per_user() {
        let t = throttle();
        // Each address stays within its free failures; the user's total does not.
        let addr = |i: u32| Some(IpAddr::from([10, 1, (i / 250) as u8, (i % 250) as u8]));
        for i in 0..51 {
            assert_eq!(fail(&t, "carol", addr(i), 100).await, Ok(()), "guess {i}");
        }
        assert_eq!(go(&t, "carol", addr(1000), 100).await.err(), Some(1));
        // A success of the attacker's own account does not reset carol's total.
        succeed(&t, "mallory", addr(0), 100).await;
        assert!(go(&t, "carol", addr(1001), 100).await.is_err());
        assert!(
            go(&t, "carol", addr(1001), 101).await.is_ok(),
            "only a wait"
        );
    }

    #[tokio::test]
    async fn delay_is_capped() {
        let t = throttle();
        for i in 0..200 {
            let _ = fail(&t, "x", None, 1000 + i * 400).await;
        }
        assert_eq!(go(&t, "x", None, 1000 + 199 * 400).await.err(), Some(300));
    }
}
