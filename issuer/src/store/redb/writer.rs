//! Group commit of refresh token operations.
//!
//! One thread owns the refresh writes. Requests queue their operation and wait; the thread takes
//! everything queued (up to [`MAX_BATCH`]), applies it in one redb write transaction, commits it
//! once with immediate durability, and only then answers each request. Under load one fsync
//! serves many rotations; a lone request is committed at once. Operations in a batch apply in
//! arrival order and see each other, so concurrent refreshes of one token still yield exactly one
//! successor.

use super::RedbFile;
use crate::store::{RefreshOp, RefreshOutcome, RefreshPolicy, StoreError};
use std::sync::mpsc;
use std::sync::Arc;
use tokio::sync::oneshot;

/// Most operations committed together.
pub const MAX_BATCH: usize = 1024;

struct Job {
    op: RefreshOp,
    now: u64,
    reply: oneshot::Sender<Result<RefreshOutcome, StoreError>>,
}

/// Handle of the writer thread. Dropping it stops the thread and waits for it, so the database
/// file is closed when the handle is gone.
#[derive(Debug)]
pub struct RefreshWriter {
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for RefreshWriter {
    fn drop(&mut self) {
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl RefreshWriter {
    /// Starts the writer thread for `store`.
    pub fn start(store: Arc<RedbFile>, policy: RefreshPolicy) -> std::io::Result<Self> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let thread = std::thread::Builder::new()
            .name("refresh-writer".into())
            .spawn(move || run(&store, &policy, &queue))?;
        Ok(Self {
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Applies `op` durably and returns its outcome. A failed batch is logged by the writer once
    /// and is [`StoreError::Batch`] to each of its callers; a damaged record fails only the
    /// operation that read it.
    pub async fn submit(&self, op: RefreshOp, now: u64) -> Result<RefreshOutcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .as_ref()
            .ok_or(StoreError::Stopped("refresh writer"))?
            .send(Job { op, now, reply })
            .map_err(|_| StoreError::Stopped("refresh writer"))?;
        answer
            .await
            .map_err(|_| StoreError::Stopped("refresh writer"))?
    }
}

fn run(store: &RedbFile, policy: &RefreshPolicy, queue: &mpsc::Receiver<Job>) {
    while let Ok(first) = queue.recv() {
        let mut jobs = vec![first];
        while jobs.len() < MAX_BATCH {
            match queue.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let (ops, replies): (Vec<_>, Vec<_>) =
            jobs.into_iter().map(|j| ((j.op, j.now), j.reply)).unzip();
        match store.apply_refresh_ops(&ops, policy) {
            Ok(outcomes) => {
                for (reply, outcome) in replies.into_iter().zip(outcomes) {
                    let _ = reply.send(outcome);
                }
            }
            Err(e) => {
                tracing::error!(
                    error = e.to_string(),
                    batch = replies.len(),
                    "refresh batch failed; nothing of it was committed"
                );
                let message = e.to_string();
                let disk = matches!(e, StoreError::Disk(_));
                if disk {
                    store.mark_failed();
                }
                for reply in replies {
                    let _ = reply.send(Err(if disk {
                        StoreError::Disk(message.clone())
                    } else {
                        StoreError::Batch(message.clone())
                    }));
                }
            }
        }
    }
}
