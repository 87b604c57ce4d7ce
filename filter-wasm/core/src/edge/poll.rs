//! The poll schedule of edge sync, as pure logic: when each VM asks the issuer's feed, with which
//! `:path`, and which warnings it logs while the feed fails or before its first good answer.
//!
//! Edge sync's steps ([`crate::sync`], run by each adapter over its host) tell a [`Poller`] what
//! happened (a tick, a poll dispatched, a poll's answer, a call that failed) and do what the
//! returned [`Todo`] says: count, log one warning, dispatch one poll. No host call here, so the
//! schedule is tested natively (below), like [`crate::decision::decide`].
//!
//! The schedule: the first poll at the first tick after the configuration is applied; at most one
//! poll under way; the next one a poll interval after the last one ended, or at once after an
//! answer that says more revocations are waiting (`"more"`) and brought some. A poll that takes
//! longer than `timeout_ms` is ended by Envoy, and counts as failed. Should Envoy never end one
//! (no answer, no timeout), the poller gives it up [`LOST_AFTER`] seconds past its timeout, so one
//! lost call cannot stop a VM's polls for good.
//!
//! Waiting: once an answer offers it (`wait_max_seconds`), and unless `wait_seconds` is 0, each
//! poll asks the issuer to hold it until there is news (`wait=S`, the smaller of the two), its
//! timeout that much longer, and the next poll goes out as soon as the answer is in: one poll
//! under way per VM at all times. A `"busy"` answer (the issuer holds as many as it allows), a
//! failure, or more than [`MAX_AT_ONCE`] polls within one second after answers that brought no
//! revocation fall back to the poll interval. A failure also forgets the offer until an answer
//! makes it again, so an issuer that never offered it (or a downgraded one) is polled as before.

use super::{EdgeState, FeedError, FeedUpdate};
use crate::config::EdgeSync;

/// How often a failing edge sync, and requests refused before the first good answer, repeat
/// their warning, in seconds.
pub const WARN_EVERY: u64 = 60;

/// Seconds past its timeout after which a poll Envoy neither answered nor ended is given up (and
/// counted as failed).
pub const LOST_AFTER: u64 = 5;

/// Polls sent at once, within one second, after answers that brought no revocation, beyond which
/// the next waits for the poll interval: two issuers behind one cluster that disagree (say, on
/// the token lifetime) would otherwise answer each other's keys at once, forever. An answer that
/// brought revocations moved the cursor on, and the next poll always goes out at once.
pub const MAX_AT_ONCE: u32 = 10;

/// How a poll ended, for the counters `edge_sync_ok`, `edge_sync_first_ok` and
/// `edge_sync_failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollEnd {
    /// An answer was accepted and applied. `first_whole`: it completed the VM's first full
    /// snapshot (its last page), so the VM now accepts tokens (`edge_sync_first_ok`).
    Ok {
        /// True once per VM, at the answer that made it caught up.
        first_whole: bool,
    },
    /// The call could not be made, Envoy ended it, or its answer was refused.
    Failed,
}

/// What edge sync's steps do after an event: count how the poll ended, log the warning, then
/// dispatch the poll (and tell [`Poller::dispatched`] or [`Poller::failed`] how that went).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Todo {
    /// A poll that ended, to count.
    pub count: Option<PollEnd>,
    /// A warning to log (at level warn, so whoever sees a failure sees its end).
    pub warn: Option<String>,
    /// The `:path` of a poll to dispatch now.
    pub poll: Option<String>,
    /// The seconds it asks the issuer to wait (`wait=S` in the path; 0: none): its timeout is
    /// that much longer than `timeout_ms`.
    pub wait: u64,
}

/// Where the polling of one VM stands.
#[derive(Debug, Default)]
pub struct Poller {
    /// The call id of the poll under way, if any, when it was sent and the wait it asked for.
    in_flight: Option<(u32, u64, u64)>,
    /// The wait the poll being dispatched asks for.
    asking: u64,
    /// The longest wait the issuer's last accepted answer offered.
    offered: Option<u64>,
    /// The second of the last poll sent at once after an answer, and how many were in it.
    at_once: (u64, u32),
    /// When to poll next (seconds since the epoch).
    next_at: u64,
    /// Since when polls have failed, and when that was last logged.
    failing: Option<(u64, u64)>,
    /// Requests refused for want of a first good answer (`unsynced`) not logged yet, and when
    /// that was last logged.
    unsynced: (u64, Option<u64>),
}

impl Poller {
    /// A new configuration was applied (with a new [`EdgeState`]): poll at the next tick.
    pub fn configured(&mut self) {
        self.next_at = 0;
    }

    /// The once-a-second tick at `now`. `refused` requests were refused since the last tick
    /// because edge sync has had no good answer yet (outcome `unsynced`): they are logged at the
    /// first such refusal and at most once every [`WARN_EVERY`] seconds after, with their
    /// number. A poll is due if none is under way and the interval since the last has passed;
    /// there is none without edge sync or without a state. A poll under way past its timeout
    /// and [`LOST_AFTER`] is given up as failed (the refusals are then told at the next tick).
    pub fn tick(
        &mut self,
        now: u64,
        refused: u64,
        sync: Option<&EdgeSync>,
        state: Option<&EdgeState>,
    ) -> Todo {
        if let (Some(sync), Some(state), Some((_, sent, wait))) = (sync, state, self.in_flight) {
            let lost_at = sent
                .saturating_add(sync.timeout_ms.div_ceil(1_000))
                .saturating_add(wait)
                .saturating_add(LOST_AFTER);
            if now >= lost_at {
                self.in_flight = None;
                self.unsynced.0 = self.unsynced.0.saturating_add(refused);
                let why = format!(
                    "the poll sent {} s ago was neither answered nor ended by Envoy",
                    now.saturating_sub(sent)
                );
                return self.failed(now, sync, state, &why);
            }
        }
        let warn = self.unsynced_warning(now, refused, state);
        let poll = match (sync, state) {
            (Some(sync), Some(state)) if self.in_flight.is_none() && now >= self.next_at => {
                Some(self.path(sync, state))
            }
            _ => None,
        };
        Todo {
            count: None,
            warn,
            wait: if poll.is_some() { self.asking } else { 0 },
            poll,
        }
    }

    /// The path of the next poll, asking for the wait the issuer offered (and noting it for
    /// [`Poller::dispatched`]).
    fn path(&mut self, sync: &EdgeSync, state: &EdgeState) -> String {
        self.asking = match self.offered {
            Some(offered) if !state.wants_snapshot() => offered.min(sync.wait_seconds),
            _ => 0,
        };
        state.request_path(sync, self.asking)
    }

    /// Whether another poll may go out at once at `now` ([`MAX_AT_ONCE`] a second).
    fn at_once(&mut self, now: u64) -> bool {
        let (second, sent) = &mut self.at_once;
        if *second != now {
            *second = now;
            *sent = 0;
        }
        *sent += 1;
        *sent <= MAX_AT_ONCE
    }

    fn unsynced_warning(
        &mut self,
        now: u64,
        refused: u64,
        state: Option<&EdgeState>,
    ) -> Option<String> {
        let (count, logged) = &mut self.unsynced;
        *count = count.saturating_add(refused);
        if *count == 0 || logged.is_some_and(|at| now < at.saturating_add(WARN_EVERY)) {
            return None;
        }
        let age = state.map_or(0, |s| s.running_for(now));
        let warning = format!(
            "mms_auth: no good answer from edge sync yet, {age} s after the start: {count} \
             requests with a token refused with 503 (no revocation is known until the issuer \
             answers)"
        );
        *count = 0;
        *logged = Some(now);
        Some(warning)
    }

    /// The poll of [`Todo::poll`] was dispatched at `now` as call `call`.
    pub fn dispatched(&mut self, call: u32, now: u64) {
        self.in_flight = Some((call, now, self.asking));
    }

    /// True if `call` is the poll under way, which then is no longer: its answer is for
    /// [`Poller::answered`]. False for any other call (its answer is ignored), such as one given
    /// up as lost.
    pub fn answer_to(&mut self, call: u32) -> bool {
        let ours = self.in_flight.is_some_and(|(id, _, _)| id == call);
        if ours {
            self.in_flight = None;
        }
        ours
    }

    /// The poll under way ended at `now` with `answer` ([`super::parse_answer`]'s verdict on
    /// it): an accepted answer is applied to `state`, and ends a failure (a warning says for how
    /// long it lasted); a refused one is a failure. The next poll is due a poll interval later,
    /// or at once if the answer says more are waiting.
    pub fn answered(
        &mut self,
        now: u64,
        sync: &EdgeSync,
        state: &mut EdgeState,
        answer: Result<FeedUpdate, FeedError>,
    ) -> Todo {
        let update = match answer {
            Ok(update) => update,
            Err(e) => return self.failed(now, sync, state, &e.to_string()),
        };
        let more = update.more;
        let busy = update.busy;
        let progress = !update.entries.is_empty();
        self.offered = update.wait_max;
        let before = state.caught_up();
        state.apply(update, now);
        let warn = self.failing.take().map(|(since, _)| {
            format!(
                "mms_auth: edge sync resumed after {} s",
                now.saturating_sub(since)
            )
        });
        self.next_at = now.saturating_add(sync.poll_interval);
        let waits = self.offered.is_some() && sync.wait_seconds > 0 && !busy;
        let poll =
            (more || (waits && (progress || self.at_once(now)))).then(|| self.path(sync, state));
        Todo {
            count: Some(PollEnd::Ok {
                first_whole: !before && state.caught_up(),
            }),
            warn,
            wait: if poll.is_some() { self.asking } else { 0 },
            poll,
        }
    }

    /// A poll failed at `now` for the reason `why` (no answer, a refused answer, or a call that
    /// could not be dispatched): the next one is due a poll interval later. The warning says
    /// what the filter verifies with meanwhile; it is given at the first failure and at most
    /// once every [`WARN_EVERY`] seconds while the failures last.
    pub fn failed(&mut self, now: u64, sync: &EdgeSync, state: &EdgeState, why: &str) -> Todo {
        self.next_at = now.saturating_add(sync.poll_interval);
        self.offered = None;
        let (since, logged) = self.failing.unwrap_or((now, 0));
        let warn =
            (self.failing.is_none() || now >= logged.saturating_add(WARN_EVERY)).then(|| {
                self.failing = Some((since, now));
                let held = if state.caught_up() {
                    format!("verifying with the state of {} s ago", state.age(now))
                } else {
                    format!(
                        "no good answer since the start {} s ago",
                        state.running_for(now)
                    )
                };
                format!("mms_auth: edge sync failed: {why}; {held}")
            });
        Todo {
            count: Some(PollEnd::Failed),
            warn,
            poll: None,
            wait: 0,
        }
    }
}

#[cfg(test)]
mod tests;
