//! Recording the audit trail ([`crate::store::audit`]) and naming its actors.
//!
//! Administrative changes are recorded by [`crate::admin::execute_as`] before the command
//! returns. The security events a running issuer decides (refresh token reuse, impersonation,
//! RFC 7009 revocations, back-off) go through an [`AuditLog`]: a bounded queue that a task
//! writes to the store in one transaction every [`FLUSH_EVERY`], so a token request never waits
//! for a durable write of its own. What is queued but not yet written is lost if the process
//! dies (at most [`FLUSH_EVERY`] of events; a graceful stop flushes); an event that finds the
//! queue full, or whose batch fails to write, is dropped, logged and counted in `/metrics`
//! (`issuer_audit_events_dropped_total`).

use crate::store::{Audit, AuditEvent};
use prometheus_client::metrics::counter::Counter;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// How long security events gather before they are written together.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Events queued at most; more are dropped (and counted) until the writer catches up.
pub const QUEUE: usize = 4096;

enum Job {
    Event(AuditEvent),
    Flush(oneshot::Sender<()>),
}

/// The queue of security events to the store. Cloning it shares the queue.
#[derive(Clone, Debug)]
pub struct AuditLog {
    queue: mpsc::Sender<Job>,
    dropped: Counter,
}

impl AuditLog {
    /// Starts the task that writes queued events to `store`; `dropped` counts the events lost.
    /// Must be called inside a Tokio runtime.
    pub fn spawn(store: Arc<dyn Audit>, dropped: Counter) -> Self {
        let (queue, jobs) = mpsc::channel(QUEUE);
        tokio::spawn(write_forever(store, jobs, dropped.clone()));
        Self { queue, dropped }
    }

    /// Queues `event`; if the queue is full it is dropped, logged and counted.
    pub fn record(&self, event: AuditEvent) {
        let action = event.action;
        if let Err(e) = self.queue.try_send(Job::Event(event)) {
            self.dropped.inc();
            let why = match e {
                mpsc::error::TrySendError::Full(_) => "the audit queue is full",
                mpsc::error::TrySendError::Closed(_) => "the audit writer has stopped",
            };
            tracing::error!(action = action.as_str(), "{why}: event dropped");
        }
    }

    /// Writes everything queued so far before it returns (a graceful stop).
    pub async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.queue.send(Job::Flush(done)).await.is_ok() {
            let _ = wait.await;
        }
    }
}

async fn write_forever(store: Arc<dyn Audit>, mut jobs: mpsc::Receiver<Job>, dropped: Counter) {
    let mut batch = Vec::new();
    let mut waiting = Vec::new();
    while let Some(first) = jobs.recv().await {
        take(first, &mut batch, &mut waiting);
        if waiting.is_empty() {
            tokio::time::sleep(FLUSH_EVERY).await;
        }
        while let Ok(job) = jobs.try_recv() {
            take(job, &mut batch, &mut waiting);
        }
        if let Err(e) = store.record_audit(&batch).await {
            dropped.inc_by(batch.len() as u64);
            tracing::error!(
                error = crate::display::Causes(&e).to_string(),
                events = batch.len(),
                "audit events not recorded"
            );
        }
        batch.clear();
        for done in waiting.drain(..) {
            let _ = done.send(());
        }
    }
}

fn take(job: Job, batch: &mut Vec<AuditEvent>, waiting: &mut Vec<oneshot::Sender<()>>) {
    match job {
        Job::Event(e) => batch.push(e),
        Job::Flush(done) => waiting.push(done),
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

    /// A store that keeps what it is given, or fails every write.
    #[derive(Default)]
    struct Kept {
        batches: Mutex<Vec<Vec<AuditEvent>>>,
        fail: bool,
    }

    #[async_trait::async_trait]
    impl Audit for Kept {
        async fn record_audit(&self, events: &[AuditEvent]) -> Result<(), StoreError> {
            if self.fail {
                return Err(StoreError::Disk(crate::store::DiskFault::Io(
                    std::io::Error::other("full"),
                )));
            }
            self.batches.lock().unwrap().push(events.to_vec());
            Ok(())
        }
        async fn audit_since(&self, _: u64, _: usize) -> Result<Vec<AuditEvent>, StoreError> {
            Ok(vec![])
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
        let all: Vec<u64> = batches.iter().flatten().map(|e| e.at).collect();
        assert_eq!(all, (0..50).collect::<Vec<_>>());
        assert!(batches.len() < 5, "one write per 100 ms, not per event");
        assert_eq!(dropped.get(), 0);
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
