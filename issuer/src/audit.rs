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
        if let Err(e) = self.queue.try_send(Job::Event(event)) {
            self.dropped.inc();
            let action = match &e {
                mpsc::error::TrySendError::Full(Job::Event(ev))
                | mpsc::error::TrySendError::Closed(Job::Event(ev)) => ev.action.as_str(),
                _ => String::new(),
            };
            tracing::error!(action, "audit queue full: event dropped");
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
                error = e.to_string(),
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
