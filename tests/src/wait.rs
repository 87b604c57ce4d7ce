//! Waiting on a condition instead of sleeping: a test polls what it waits for until it holds, up
//! to a bounded deadline, and goes on the moment it does. The deadline is generous ([`LONG`]):
//! it only bounds a test whose condition never comes, and a loaded machine (the tests share two
//! cores with builds) never fails a test that would pass on an idle one. Tests assert what
//! happened, never how fast.

use std::ops::AsyncFnMut;
use std::time::{Duration, Instant};

/// The deadline of a condition that comes within seconds on an idle machine.
pub const LONG: Duration = Duration::from_secs(30);

/// How often a condition is checked again.
pub const EVERY: Duration = Duration::from_millis(50);

/// Checks `check` every [`EVERY`] until it returns `Some`, for at most `within`; its value, or
/// `None` once the deadline has passed (the caller fails the test, with what it knows).
pub async fn until_some<T>(within: Duration, check: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    until_some_every(EVERY, within, check).await
}

/// [`until_some`], checking every `every`: for a check that costs the system under test
/// something, such as a request it remembers.
pub async fn until_some_every<T>(
    every: Duration,
    within: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(t) = check().await {
            return Some(t);
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(every).await;
    }
}

/// Checks `check` every [`EVERY`] until it holds, for at most `within`; whether it came to hold:
/// `assert!(until(LONG, async || …).await, "what never came, and the logs")`.
pub async fn until(within: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    until_some(within, async || check().await.then_some(()))
        .await
        .is_some()
}

/// [`until_some`] for a test without a runtime, checking on this thread.
pub fn until_some_blocking<T>(within: Duration, mut check: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(t) = check() {
            return Some(t);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(EVERY);
    }
}

/// [`until`] for a test without a runtime, checking on this thread.
pub fn until_blocking(within: Duration, mut check: impl FnMut() -> bool) -> bool {
    until_some_blocking(within, || check().then_some(())).is_some()
}

/// Until this machine's clock, in whole seconds as the issuer and the filter read it
/// ([`crate::unix_now`]), reads at least `second`: for a test of what a second, a lifetime or a
/// window ending changes. It waits for the clock, not for a guessed duration.
pub async fn until_second(second: u64) {
    let reached = until(
        LONG + Duration::from_secs(second.saturating_sub(crate::unix_now())),
        async || crate::unix_now() >= second,
    );
    assert!(reached.await, "the clock never read {second}");
}

/// [`until_second`] on this thread.
pub fn until_second_blocking(second: u64) {
    let within = LONG + Duration::from_secs(second.saturating_sub(crate::unix_now()));
    let reached = until_blocking(within, || crate::unix_now() >= second);
    assert!(reached, "the clock never read {second}");
}

/// Until the clock has left the second it reads now: what happens next happens in a later second
/// than what happened before (tokens and records carry whole seconds).
pub async fn next_second() {
    until_second(crate::unix_now() + 1).await;
}

/// [`until_some`] for a check that may fail for good (a process exited, a query failed): its
/// error ends the wait at once.
pub async fn until_ok<T>(
    within: Duration,
    mut check: impl AsyncFnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<Option<T>> {
    let mut failed = None;
    let found = until_some(within, async || match check().await {
        Ok(found) => found.map(Ok),
        Err(e) => {
            failed = Some(e);
            Some(Err(()))
        }
    });
    match (found.await, failed) {
        (_, Some(e)) => Err(e),
        (Some(Ok(t)), None) => Ok(Some(t)),
        _ => Ok(None),
    }
}

/// [`until_ok`] on this thread.
pub fn until_ok_blocking<T>(
    within: Duration,
    mut check: impl FnMut() -> anyhow::Result<Option<T>>,
) -> anyhow::Result<Option<T>> {
    let mut failed = None;
    let found = until_some_blocking(within, || match check() {
        Ok(found) => found.map(Ok),
        Err(e) => {
            failed = Some(e);
            Some(Err(()))
        }
    });
    match (found, failed) {
        (_, Some(e)) => Err(e),
        (Some(Ok(t)), None) => Ok(Some(t)),
        _ => Ok(None),
    }
}
