//! Recording the audit trail ([`crate::store::audit`]) and naming its actors.
//!
//! Administrative changes are recorded by [`crate::admin::execute_as`] before the command
//! returns. The security events a running issuer decides (refresh token reuse, impersonation,
//! RFC 7009 revocations, back-off, token exchanges) go through an [`AuditLog`]: a bounded queue
//! that a task writes to the store in one transaction per batch, so a token request never waits
//! for a durable write of its own. A batch is written once it holds [`BATCH`] events or its first
//! has waited [`FLUSH_EVERY`], whichever comes first: under load the writes are many and small
//! (each a short stop for the core that makes it, and the queue drains faster than it fills),
//! when idle one write gathers what came in a tenth of a second. An event is encoded where it
//! is decided ([`EncodedEvent`]), and the writer is woken when a batch starts and when it fills,
//! not for each event: a busy token endpoint pays little more than a lock to queue one. What is
//! queued but not yet written is lost if the process dies (at most [`FLUSH_EVERY`] of events; a
//! graceful stop flushes); an event that finds the queue full, or whose batch fails to write, is
//! dropped, logged and counted in `/metrics` (`issuer_audit_events_dropped_total`). The record
//! of a token being issued (an exchange, an impersonation) is never dropped: the request waits
//! for room in the queue ([`AuditLog::record_issue`]), and is refused with 503 if none comes, so
//! no token leaves without its record queued.

use crate::store::{Audit, AuditEvent, EncodedEvent};
use prometheus_client::metrics::counter::Counter;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

/// How long security events gather before they are written together.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Events written together at most.
pub const BATCH: usize = 512;
/// Events queued at most; more are dropped (and counted) until the writer catches up.
pub const QUEUE: usize = 8 * BATCH;

/// How long a token waits for room in the queue for its record before it is refused.
pub const ISSUE_WAIT: Duration = Duration::from_secs(2);

/// A token's record could not be queued: the token is not issued.
#[derive(Debug, thiserror::Error)]
#[error("the audit trail cannot record the token now")]
pub struct Unrecordable;

/// What the writer has to do: events in the order they came, and graceful stops waiting for
/// them to be written.
#[derive(Default)]
struct Pending {
    events: Vec<EncodedEvent>,
    /// Events ever queued, and ever taken by the writer to write.
    queued: u64,
    taken: u64,
    /// Each waits until the events queued before it asked (the count then) are written.
    flushes: Vec<(u64, oneshot::Sender<()>)>,
    /// Every [`AuditLog`] is gone: the writer writes what is left and stops.
    closed: bool,
    /// The writer has stopped (closed, or its task ended): nothing is queued any more.
    stopped: bool,
}

impl Pending {
    /// Whether the writer should write now rather than gather more.
    fn due(&self) -> bool {
        self.events.len() >= BATCH || !self.flushes.is_empty() || self.closed
    }
}

/// Why an event was not queued.
enum Refused {
    /// No room for it: given back.
    Full(EncodedEvent),
    /// The writer has stopped.
    Stopped,
}

/// The queue shared by the loggers and the writer. The writer is woken when a batch starts
/// and when it fills (not for every event); a token's record waiting for room is woken when
/// the writer takes a batch.
#[derive(Default)]
struct Queue {
    pending: Mutex<Pending>,
    news: Notify,
    room: Notify,
}

impl Queue {
    fn pending(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `event` unless the queue holds `room` events already or the writer has stopped.
    fn push(&self, event: EncodedEvent, room: usize) -> Result<(), Refused> {
        let mut p = self.pending();
        if p.stopped {
            return Err(Refused::Stopped);
        }
        if p.events.len() >= room {
            return Err(Refused::Full(event));
        }
        p.events.push(event);
        p.queued += 1;
        let wake = p.events.len() == 1 || p.events.len() == BATCH;
        drop(p);
        if wake {
            self.news.notify_one();
        }
        Ok(())
    }
}

/// The last [`AuditLog`] dropped closes the queue, so the writer stops and lets the store go.
struct Closer(Arc<Queue>);

impl Drop for Closer {
    fn drop(&mut self) {
        self.0.pending().closed = true;
        self.0.news.notify_one();
    }
}

/// Held by the writer's task: when the task ends (its work done, or a store that panicked), the
/// queue is marked stopped, its graceful stops answered and its waiting records refused.
struct Stopped(Arc<Queue>);

impl Drop for Stopped {
    fn drop(&mut self) {
        let mut p = self.0.pending();
        p.stopped = true;
        p.flushes.clear();
        drop(p);
        self.0.room.notify_waiters();
    }
}

/// The queue of security events to the store. Cloning it shares the queue.
#[derive(Clone)]
pub struct AuditLog {
    queue: Arc<Queue>,
    _closer: Arc<Closer>,
    dropped: Counter,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog").finish_non_exhaustive()
    }
}

impl AuditLog {
    /// Starts the task that writes queued events to `store`; `dropped` counts the events lost.
    /// Must be called inside a Tokio runtime.
    pub fn spawn(store: Arc<dyn Audit>, dropped: Counter) -> Self {
        let queue = Arc::new(Queue::default());
        tokio::spawn(write_forever(store, queue.clone(), dropped.clone()));
        Self {
            _closer: Arc::new(Closer(queue.clone())),
            queue,
            dropped,
        }
    }

    /// Queues `event`; if the queue is full it is dropped, logged and counted. The last
    /// [`BATCH`] places are kept for the records of tokens ([`AuditLog::record_issue`]).
    pub fn record(&self, event: AuditEvent) {
        let action = event.action;
        let why = match self.queue.push(event.encode(), QUEUE - BATCH) {
            Ok(()) => return,
            Err(Refused::Full(_)) => "the audit queue is full",
            Err(Refused::Stopped) => "the audit writer has stopped",
        };
        self.dropped.inc();
        tracing::error!(action = action.as_str(), "{why}: event dropped");
    }

    /// Queues `event`, the record of a token about to be issued, waiting up to [`ISSUE_WAIT`]
    /// for room in the queue: under load the token path slows to the pace the trail is written
    /// at instead of issuing tokens it does not record. Err: still no room (the writer has
    /// fallen behind, or stopped); the caller issues nothing.
    pub async fn record_issue(&self, event: EncodedEvent) -> Result<(), Unrecordable> {
        let deadline = Instant::now() + ISSUE_WAIT;
        let mut event = event;
        loop {
            let room = self.queue.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            event = match self.queue.push(event, QUEUE) {
                Ok(()) => return Ok(()),
                Err(Refused::Full(back)) => back,
                Err(Refused::Stopped) => {
                    tracing::error!("the audit writer has stopped: token not issued");
                    return Err(Unrecordable);
                }
            };
            if tokio::time::timeout_at(deadline, room).await.is_err() {
                tracing::error!("the audit queue stayed full: token not issued");
                return Err(Unrecordable);
            }
        }
    }

    /// Writes everything queued so far before it returns (a graceful stop); at once if the
    /// writer has stopped.
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        {
            let mut p = self.queue.pending();
            if p.stopped {
                return;
            }
            let until = p.queued;
            p.flushes.push((until, done));
        }
        self.queue.news.notify_one();
        let _ = wait.await;
    }
}

async fn write_forever(store: Arc<dyn Audit>, queue: Arc<Queue>, dropped: Counter) {
    let _stopped = Stopped(queue.clone());
    loop {
        let idle = {
            let p = queue.pending();
            p.events.is_empty() && !p.due()
        };
        if idle {
            queue.news.notified().await;
        }
        let until = Instant::now() + FLUSH_EVERY;
        while !queue.pending().due() {
            if tokio::time::timeout_at(until, queue.news.notified())
                .await
                .is_err()
            {
                break;
            }
        }
        let (batch, flushes, closed) = {
            let mut p = queue.pending();
            let n = p.events.len().min(BATCH);
            let batch: Vec<EncodedEvent> = p.events.drain(..n).collect();
            p.taken += n as u64;
            let taken = p.taken;
            let (answered, waiting) = std::mem::take(&mut p.flushes)
                .into_iter()
                .partition(|(until, _)| *until <= taken);
            p.flushes = waiting;
            let answered: Vec<(u64, oneshot::Sender<()>)> = answered;
            (batch, answered, p.closed && p.events.is_empty())
        };
        queue.room.notify_waiters();
        write(store.as_ref(), batch, &dropped).await;
        for (_, done) in flushes {
            let _ = done.send(());
        }
        if closed {
            return;
        }
    }
}

async fn write(store: &dyn Audit, batch: Vec<EncodedEvent>, dropped: &Counter) {
    if batch.is_empty() {
        return;
    }
    let events = batch.len();
    if let Err(e) = store.record_audit(batch).await {
        dropped.inc_by(events as u64);
        tracing::error!(
            error = crate::display::Causes(&e).to_string(),
            events,
            "audit events not recorded"
        );
    }
}

/// The name of the operating-system user `uid`, or `uid:N` if it has none.
pub fn user_name(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(u)) => u.name,
        _ => format!("uid:{uid}"),
    }
}

/// The operating-system user of this process: the actor of an admin command run on the store
/// directly.
pub fn process_user() -> String {
    user_name(nix::unistd::getuid().as_raw())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{AuditAction, StoreError};
    use std::sync::Mutex;

    /// A store that keeps what it is given, or fails every write, or panics at it (the
    /// writer's task ends); with a gate, each write first waits for a permit of it.
    #[derive(Default)]
    struct Kept {
        batches: Mutex<Vec<Vec<EncodedEvent>>>,
        fail: bool,
        panics: bool,
        gate: Option<tokio::sync::Semaphore>,
    }

    #[async_trait::async_trait]
    impl Audit for Kept {
        async fn record_audit(&self, events: Vec<EncodedEvent>) -> Result<(), StoreError> {
            if let Some(gate) = &self.gate {
                gate.acquire().await.map(|p| p.forget()).ok();
            }
            assert!(!self.panics, "a store that panics");
            if self.fail {
                return Err(StoreError::Disk(crate::store::DiskFault::Io(
                    std::io::Error::other("full"),
                )));
            }
            self.batches.lock().unwrap().push(events);
            Ok(())
        }
        async fn audit_since(&self, _: u64, _: usize) -> Result<Vec<AuditEvent>, StoreError> {
            Ok(vec![])
        }
        async fn audit_page(
            &self,
            _: &crate::store::AuditPage<'_>,
        ) -> Result<crate::store::AuditRead, StoreError> {
            Ok(crate::store::AuditRead::default())
        }
        async fn sweep_audit(&self, _: u64) -> Result<u64, StoreError> {
            Ok(0)
        }
    }

    fn event(at: u64) -> AuditEvent {
        let null = serde_json::Value::Null;
        AuditEvent::new(
            at,
            "app",
            AuditAction::Impersonate,
            "carol",
            null.clone(),
            null,
        )
    }

    #[tokio::test]
    async fn events_are_written_together_and_flushed() {
        let store = Arc::new(Kept::default());
        let dropped = Counter::default();
        let log = AuditLog::spawn(store.clone(), dropped.clone());
        for at in 0..50 {
            log.record(event(at));
        }
        log.flush().await;
        let batches = store.batches.lock().unwrap().clone();
        let all: Vec<u64> = batches.iter().flatten().map(EncodedEvent::at).collect();
        assert_eq!(all, (0..50).collect::<Vec<_>>());
        assert!(batches.len() < 5, "one write per 100 ms, not per event");
        assert_eq!(dropped.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_batch_is_written_at_once_without_waiting_for_the_interval() {
        let store = Arc::new(Kept::default());
        let dropped = Counter::default();
        let log = AuditLog::spawn(store.clone(), dropped.clone());
        let start = tokio::time::Instant::now();
        let n = 3 * BATCH + 7;
        for at in 0..n as u64 {
            log.record(event(at));
        }
        // The clock is paused and this task stays ready, so it stands still: only batches
        // written without waiting for it are seen.
        for _ in 0..10_000 {
            if store.batches.lock().unwrap().len() >= 3 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(store.batches.lock().unwrap().len(), 3);
        assert_eq!(start.elapsed(), std::time::Duration::ZERO);
        log.flush().await;
        let batches = store.batches.lock().unwrap().clone();
        assert!(batches.iter().all(|b| b.len() <= BATCH));
        let sizes: Vec<usize> = batches.iter().map(Vec::len).collect();
        assert_eq!(sizes[..3], [BATCH; 3]);
        let all: Vec<u64> = batches.iter().flatten().map(EncodedEvent::at).collect();
        assert_eq!(all, (0..n as u64).collect::<Vec<_>>());
        assert_eq!(dropped.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tokens_record_waits_for_room_and_is_refused_when_none_comes() {
        let store = Arc::new(Kept {
            gate: Some(tokio::sync::Semaphore::new(0)),
            ..Kept::default()
        });
        let dropped = Counter::default();
        let log = AuditLog::spawn(store.clone(), dropped.clone());
        for at in 0..QUEUE as u64 {
            log.record(event(at));
        }
        // Other events leave the last places to the records of tokens.
        let queued = log.queue.pending().events.len();
        assert_eq!((queued, dropped.get()), (QUEUE - BATCH, BATCH as u64));
        while log.queue.pending().events.len() < QUEUE {
            log.record_issue(event(1).encode()).await.unwrap();
        }
        // The queue is full: the record waits until the writer takes a batch (and gets stuck
        // writing it).
        log.record_issue(event(1).encode()).await.unwrap();
        while log.queue.pending().events.len() < QUEUE {
            log.record_issue(event(2).encode()).await.unwrap();
        }
        let start = tokio::time::Instant::now();
        assert!(log.record_issue(event(3).encode()).await.is_err());
        assert_eq!(start.elapsed(), ISSUE_WAIT, "refused once the wait is over");
        store.gate.as_ref().unwrap().add_permits(1_000);
        log.record_issue(event(4).encode()).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_flush_returns_once_what_came_before_it_is_written_however_much_comes_after() {
        let store = Arc::new(Kept {
            gate: Some(tokio::sync::Semaphore::new(0)),
            ..Kept::default()
        });
        let log = AuditLog::spawn(store.clone(), Counter::default());
        let before = (BATCH + 5) as u64;
        for at in 0..before {
            log.record(event(at));
        }
        let settle = || async {
            for _ in 0..100 {
                tokio::task::yield_now().await;
            }
        };
        // The writer has taken the first batch and waits to write it.
        settle().await;
        let flusher = log.clone();
        let flushed = tokio::spawn(async move { flusher.flush().await });
        settle().await;
        for at in 0..before {
            log.record(event(10_000 + at));
        }
        // Two writes, not three: the queue is not empty after the second.
        store.gate.as_ref().unwrap().add_permits(2);
        let answered = tokio::time::timeout(Duration::from_secs(60), flushed).await;
        assert!(
            answered.is_ok(),
            "answered once the events before it were written"
        );
        let batches = store.batches.lock().unwrap().clone();
        let written: Vec<u64> = batches.iter().flatten().map(EncodedEvent::at).collect();
        assert_eq!(written[..before as usize], (0..before).collect::<Vec<_>>());
    }

    #[tokio::test(start_paused = true)]
    async fn once_the_writer_is_gone_flushes_return_and_tokens_are_refused_at_once() {
        let dropped = Counter::default();
        let panics = Kept {
            panics: true,
            ..Kept::default()
        };
        let log = AuditLog::spawn(Arc::new(panics), dropped.clone());
        log.record(event(1));
        let flushed = tokio::time::timeout(Duration::from_secs(60), log.flush()).await;
        assert!(flushed.is_ok(), "the flush was answered");
        let start = tokio::time::Instant::now();
        assert!(log.record_issue(event(2).encode()).await.is_err());
        assert_eq!(start.elapsed(), Duration::ZERO, "refused without waiting");
        log.record(event(3));
        assert_eq!(dropped.get(), 1, "counted as dropped");
        log.flush().await;
    }

    #[tokio::test]
    async fn the_store_is_let_go_once_every_log_is_gone() {
        let store = Arc::new(Kept::default());
        let log = AuditLog::spawn(store.clone(), Counter::default());
        let other = log.clone();
        log.record(event(1));
        drop(log);
        other.record(event(2));
        drop(other);
        for _ in 0..10_000 {
            if Arc::strong_count(&store) == 1 {
                break;
            }
            tokio::task::yield_now().await;
        }
        assert_eq!(Arc::strong_count(&store), 1, "the writer stopped");
        let batches = store.batches.lock().unwrap().clone();
        let all: Vec<u64> = batches.iter().flatten().map(EncodedEvent::at).collect();
        assert_eq!(all, [1, 2], "what was queued is written first");
    }

    #[tokio::test]
    async fn events_that_cannot_be_written_are_counted() {
        let store = Arc::new(Kept {
            fail: true,
            ..Kept::default()
        });
        let dropped = Counter::default();
        let log = AuditLog::spawn(store, dropped.clone());
        for at in 0..3 {
            log.record(event(at));
        }
        log.flush().await;
        assert_eq!(dropped.get(), 3);
    }
}
