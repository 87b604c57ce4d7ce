//! Edge sync's steps, written once for both adapters: at a tick, ask the [`Poller`] what to do;
//! count how a poll ended, log the warning, send the poll the poller asks for; and when its answer
//! arrives, check it ([`parse_answer`]) and apply it. What differs between the proxy-wasm module
//! and the native dynamic module (how a counter is bumped, how an HTTP call is sent, where the
//! poller and the state live and how they are locked) is behind [`EdgeHost`], which each adapter
//! implements with its host calls.
//!
//! The feed requests name their host in `:authority`: Envoy builds both a proxy-wasm
//! `dispatch_http_call` and a dynamic module's HTTP callout into the same request header map, which
//! requires `:method`, `:path` and `:authority`, and files a `host` header under `:authority` too
//! (its legacy name), so both adapters send the same request (`docs/filter.md`, "Edge sync").

use crate::config::EdgeSync;
use crate::edge::{
    parse_answer, EdgeIdentity, EdgeState, FeedError, PollEnd, Poller, Todo, MAX_ANSWER_BYTES,
};
use shared::edge_feed::{NODE_HEADER, VM_HEADER};

/// The edge sync counters an adapter defines (`mms_auth.edge_sync_*`, `docs/filter.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncCounter {
    /// `edge_sync_ok`: an answer was accepted and applied.
    Ok,
    /// `edge_sync_first_ok`: an answer completed the first full snapshot of this state.
    FirstOk,
    /// `edge_sync_failed`: a poll could not be sent, Envoy ended it, or its answer was refused.
    Failed,
}

/// What edge sync needs of the host, as each adapter provides it.
pub trait EdgeHost {
    /// The time edge sync goes by, in seconds since the Unix epoch.
    fn now(&self) -> u64;
    /// Runs `f` on the poller and the state it polls into (locked or borrowed for the call only:
    /// never while a poll is sent). `None`, and `f` is not run, without a state.
    fn with_edge<R>(&mut self, f: impl FnOnce(&mut Poller, &mut EdgeState) -> R) -> Option<R>;
    /// Adds one to an edge sync counter.
    fn count(&mut self, counter: SyncCounter);
    /// Sets the gauge `edge_sync_age_seconds`.
    fn set_age(&mut self, seconds: u64);
    /// Logs a warning.
    fn warn(&mut self, message: &str);
    /// Sends a poll: a GET with `headers` to `cluster`, ended by Envoy after `timeout_ms`. Its
    /// call id, or why it was not sent (the message of the warning).
    fn dispatch(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        timeout_ms: u64,
    ) -> Result<u32, String>;
    /// An answer was handled, accepted or not: the state may have changed.
    fn answer_handled(&mut self) {}
}

/// The once-a-second tick: the age gauge, then what the poller says (`refused`: requests refused
/// since the last tick for want of a first good answer).
pub fn tick<H: EdgeHost>(
    host: &mut H,
    sync: Option<&EdgeSync>,
    identity: Option<&EdgeIdentity>,
    refused: u64,
) {
    let now = host.now();
    let Some((age, todo)) = host.with_edge(|poller, state| {
        let age = sync.map(|_| state.age(now));
        (age, poller.tick(now, refused, sync, Some(state)))
    }) else {
        return;
    };
    if let Some(age) = age {
        host.set_age(age);
    }
    run(host, todo, sync, identity, now);
}

/// The answer to the poll `call` arrived, with `size` bytes of body: `status` reads its status
/// (0 without an answer: the call failed or timed out in Envoy), `body` its body, read only if it
/// is the poll under way and the body is within [`MAX_ANSWER_BYTES`]. The answer holds the keys:
/// it is wiped once read.
pub fn answered<H: EdgeHost>(
    host: &mut H,
    sync: &EdgeSync,
    identity: Option<&EdgeIdentity>,
    call: u32,
    size: usize,
    status: impl FnOnce() -> u32,
    body: impl FnOnce() -> Vec<u8>,
) {
    if host.with_edge(|poller, _| poller.answer_to(call)) != Some(true) {
        return;
    }
    let now = host.now();
    let status = status();
    let body = (size <= MAX_ANSWER_BYTES).then(|| zeroize::Zeroizing::new(body()));
    let Some(todo) = host.with_edge(|poller, state| {
        let checked = match &body {
            Some(body) => parse_answer(status, body, state),
            None => Err(FeedError::TooLarge(size)),
        };
        poller.answered(now, sync, state, checked)
    }) else {
        return;
    };
    host.answer_handled();
    run(host, todo, Some(sync), identity, now);
}

/// Does what the poller said: count, log, poll.
fn run<H: EdgeHost>(
    host: &mut H,
    todo: Todo,
    sync: Option<&EdgeSync>,
    identity: Option<&EdgeIdentity>,
    now: u64,
) {
    match todo.count {
        Some(PollEnd::Ok { first_whole }) => {
            if first_whole {
                host.count(SyncCounter::FirstOk);
            }
            host.count(SyncCounter::Ok);
            host.set_age(0);
        }
        Some(PollEnd::Failed) => host.count(SyncCounter::Failed),
        None => {}
    }
    if let Some(warning) = &todo.warn {
        host.warn(warning);
    }
    if let (Some(path), Some(sync)) = (&todo.poll, sync) {
        poll(host, sync, path, todo.wait, identity, now);
    }
}

/// Asks the issuer's edge feed for what changed since `path`'s cursor, allowing for the `wait`
/// seconds the path asks the issuer to hold it.
fn poll<H: EdgeHost>(
    host: &mut H,
    sync: &EdgeSync,
    path: &str,
    wait: u64,
    identity: Option<&EdgeIdentity>,
    now: u64,
) {
    let mut headers = Vec::with_capacity(7);
    headers.extend([
        (":method", "GET"),
        (":path", path),
        (":authority", sync.authority.as_str()),
        ("authorization", sync.authorization()),
        ("accept", "application/json"),
    ]);
    if let Some(id) = identity {
        headers.push((NODE_HEADER, id.node_or(sync.node.as_deref())));
        headers.push((VM_HEADER, id.vm.as_str()));
    }
    let timeout_ms = sync.timeout_ms.saturating_add(wait.saturating_mul(1_000));
    match host.dispatch(&sync.cluster, &headers, timeout_ms) {
        Ok(call) => {
            host.with_edge(|poller, _| poller.dispatched(call, now));
        }
        Err(why) => {
            let todo = host.with_edge(|poller, state| poller.failed(now, sync, state, &why));
            // A failure asks for no poll: this ends here.
            if let Some(todo) = todo {
                run(host, todo, Some(sync), identity, now);
            }
        }
    }
}

#[cfg(test)]
mod tests;
