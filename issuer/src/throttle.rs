//! Temporary, growing back-off against password guessing, counted three ways:
//!
//! - per account **and** source address (5 free failures): the guesser from one address meets
//!   the back-off, while the user signing in from elsewhere does not (OWASP's answer to lock-out
//!   by a third party);
//! - per account across all addresses (50 free failures): guesses spread over many addresses
//!   are still bounded, at the price that such an attacker can make the user wait too;
//! - per source address across all users (20 free failures): credential stuffing.
//!
//! An account is a local user by its exact name, or a name for the directory folded as the
//! directory matches it ([`Account`]); an IPv6 address counts by its prefix (/64 by default).
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

mod keys;

pub use crate::store::throttle::{Entry, MemoryBook, ThrottleBook, FORGET_AFTER};
use crate::store::StoreError;
pub use keys::{counted_address, fold_name, Account};
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
    /// Leading bits of an IPv6 address counted as one address.
    pub ipv6_prefix: u8,
}

impl Default for ThrottlePolicy {
    fn default() -> Self {
        Self {
            user_free_failures: 5,
            user_total_free_failures: 50,
            addr_free_failures: 20,
            base_delay: 1,
            max_delay: 300,
            ipv6_prefix: 64,
        }
    }
}

#[derive(Debug, Hash, PartialEq, Eq, Clone, Serialize)]
enum Subject {
    /// One account from one address (or from wherever, when the address is unknown).
    UserAt(Account, Option<IpAddr>),
    /// One account from every address.
    User(Account),
    /// One address, every account.
    Addr(IpAddr),
    /// Sign-ins the directory refused, for one folded name or binds of one directory entry (its
    /// key, whichever spelling found it): kept below the directory's own lock-out threshold
    /// ([`DIRECTORY_FREE_FAILURES`], [`DIRECTORY_WAIT`]).
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

    /// What the audit trail says of it.
    fn describe(&self) -> serde_json::Value {
        use serde_json::json;
        match self {
            Self::UserAt(user, addr) => json!({ "user": user.name(), "address": addr }),
            Self::User(user) => json!({ "user": user.name() }),
            Self::Addr(addr) => json!({ "address": addr }),
            Self::Directory(key) => json!({ "directory": key }),
        }
    }
}

/// A back-off engaged by a failure: the subject it blocks (a user name from an address, a user
/// name, an address or a directory entry), its failures and until when it is blocked.
#[derive(Debug, Clone, PartialEq)]
pub struct Blocked {
    /// The subject, as the audit trail records it.
    pub subject: serde_json::Value,
    /// Its failures so far.
    pub failures: u32,
    /// Blocked until (seconds since the epoch).
    pub until: u64,
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

    /// Counts one failure of `subject` in its entry; the back-off it engaged, if this failure
    /// blocked a subject that was free.
    fn charge(
        &self,
        entries: &mut HashMap<String, Entry>,
        subject: &Subject,
        now: u64,
    ) -> Option<Blocked> {
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
        let was_free = e.blocked_until <= now;
        if directory && e.failures >= free {
            e.blocked_until = now + DIRECTORY_WAIT;
        } else if e.failures > free {
            let exp = (e.failures - free - 1).min(20);
            e.blocked_until = now + (self.policy.base_delay << exp).min(self.policy.max_delay);
        }
        (was_free && e.blocked_until > now).then(|| Blocked {
            subject: subject.describe(),
            failures: e.failures,
            until: e.blocked_until,
        })
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
    /// it. Per account, the caller serialises attempts (see `App`) and settles each one.
    pub async fn attempt(
        &self,
        account: &Account,
        addr: Option<IpAddr>,
        now: u64,
    ) -> Result<Turn<'_>, StoreError> {
        let addr = addr.map(|a| counted_address(a, self.policy.ipv6_prefix));
        let mut subjects = vec![
            Subject::UserAt(account.clone(), addr),
            Subject::User(account.clone()),
        ];
        subjects.extend(name_key(account).map(Subject::Directory));
        let by_addr = addr.map(Subject::Addr);
        subjects.extend(by_addr.clone());
        let keys: Vec<String> = subjects.iter().map(Subject::key).collect();
        let mut wait = None;
        let mut addr_blocked = None;
        self.book
            .update(&keys, now, &mut |entries| {
                addr_blocked = None;
                wait = keys
                    .iter()
                    .filter_map(|k| entries.get(k))
                    .filter(|e| e.blocked_until > now)
                    .map(|e| e.blocked_until - now)
                    .max();
                if wait.is_none() {
                    if let Some(a) = &by_addr {
                        addr_blocked = self.charge(entries, a, now);
                    }
                }
            })
            .await?;
        Ok(match wait {
            Some(w) => Turn::Wait(w),
            None => Turn::Go(Attempt {
                throttle: self,
                account: account.clone(),
                addr,
                addr_blocked,
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
    account: Account,
    addr: Option<IpAddr>,
    /// The back-off this attempt's charge engaged on its address (kept if it fails).
    addr_blocked: Option<Blocked>,
    settled: bool,
}

impl Attempt<'_> {
    /// Wrong credentials, an unknown or a disabled user: the user's failures grow, from this
    /// address and in total (the address keeps its charge). Returns the back-offs this attempt
    /// engaged (the audit trail records them).
    pub async fn failed(self, now: u64) -> Result<Vec<Blocked>, StoreError> {
        self.failed_with(now).await
    }

    async fn failed_with(mut self, now: u64) -> Result<Vec<Blocked>, StoreError> {
        self.settled = true;
        let t = self.throttle;
        let mut subjects = vec![
            Subject::UserAt(self.account.clone(), self.addr),
            Subject::User(self.account.clone()),
        ];
        // A directory name's own count; an entry's binds were counted before they were sent.
        subjects.extend(name_key(&self.account).map(Subject::Directory));
        let keys: Vec<String> = subjects.iter().map(Subject::key).collect();
        let mut blocked = Vec::new();
        t.book
            .update(&keys, now, &mut |entries| {
                // Decided afresh each call: a book may run this again after a conflict.
                blocked = subjects
                    .iter()
                    .filter_map(|s| t.charge(entries, s, now))
                    .collect();
            })
            .await?;
        blocked.extend(self.addr_blocked.take());
        Ok(blocked)
    }

    /// Right credentials of an active user: the user's count from this address starts over and
    /// the address gets its charge back.
    pub async fn succeeded(self, now: u64) -> Result<(), StoreError> {
        self.succeeded_with(now, None).await
    }

    /// The directory vouched for the entry whose key is `entry`: [`Attempt::succeeded`], and
    /// its directory counts start over (as the directory's own count does at a good bind).
    pub async fn succeeded_in_directory(self, now: u64, entry: &str) -> Result<(), StoreError> {
        self.succeeded_with(now, Some(entry)).await
    }

    async fn succeeded_with(mut self, now: u64, entry: Option<&str>) -> Result<(), StoreError> {
        self.settled = true;
        let t = self.throttle;
        let mut gone = vec![Subject::UserAt(self.account.clone(), self.addr)];
        gone.extend(name_key(&self.account).map(Subject::Directory));
        gone.extend(entry.map(|e| Subject::Directory(entry_key(e))));
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

/// The directory count of a name (folded already), for a directory account.
fn name_key(account: &Account) -> Option<String> {
    match account {
        Account::Directory(folded) => Some(format!("name:{folded}")),
        Account::Local(_) => None,
    }
}

/// The directory count of an entry, by its key.
fn entry_key(entry: &str) -> String {
    format!("entry:{entry}")
}

impl Throttle {
    /// Counts a bind of the directory entry whose key is `entry` before it is sent, in one step
    /// with the check: `Ok(false)` while the entry is held (nothing counted), else `Ok(true)`,
    /// the bind counted as refused until [`Attempt::succeeded_in_directory`] clears it. However many sign-ins of one entry arrive at once, under whatever spelling,
    /// at most [`DIRECTORY_FREE_FAILURES`] binds go before the wait.
    pub async fn take_directory_bind(&self, entry: &str, now: u64) -> Result<bool, StoreError> {
        let subject = Subject::Directory(entry_key(entry));
        let key = subject.key();
        let mut taken = true;
        self.book
            .update(std::slice::from_ref(&key), now, &mut |entries| {
                // Decided afresh each call: a book may run this again after a conflict.
                taken = entries.get(&key).is_none_or(|e| e.blocked_until <= now);
                if taken {
                    self.charge(entries, &subject, now);
                }
            })
            .await?;
        Ok(taken)
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
mod tests;
