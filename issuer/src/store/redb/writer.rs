//! Group commit of refresh token operations, and the thread that owns every write of refresh
//! state.
//!
//! One thread owns the refresh writes. Requests queue their operation and wait; the thread takes
//! everything queued (up to [`MAX_BATCH`]), applies it in one redb write transaction, commits it
//! once with immediate durability, and only then answers each request. Under load one fsync
//! serves many rotations; a lone request is committed at once. Operations in a batch apply in
//! arrival order and see each other, so concurrent refreshes of one token still yield exactly one
//! successor. The same thread merges the journal ([`super::journal`]) when it is due or has
//! waited [`MERGE_EVERY`], runs the sweep, and merges once more when it stops.

use super::journal::MERGE_EVERY;
use super::RedbFile;
use crate::store::{RefreshOp, RefreshOutcome, RefreshPolicy, StoreError};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;

/// Most operations committed together.
pub const MAX_BATCH: usize = 1024;

enum Job {
    Refresh {
        op: RefreshOp,
        now: u64,
        reply: oneshot::Sender<Result<RefreshOutcome, StoreError>>,
    },
    Sweep {
        now: u64,
        reply: oneshot::Sender<Result<u64, StoreError>>,
    },
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

    fn send(&self, job: Job) -> Result<(), StoreError> {
        self.jobs
            .as_ref()
            .ok_or(StoreError::Stopped("refresh writer"))?
            .send(job)
            .map_err(|_| StoreError::Stopped("refresh writer"))
    }

    /// Applies `op` durably and returns its outcome. A failed batch is logged by the writer once
    /// and is [`StoreError::Batch`] (or [`StoreError::Disk`]) to each of its callers; a damaged
    /// record fails only the operation that read it.
    pub async fn submit(&self, op: RefreshOp, now: u64) -> Result<RefreshOutcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Refresh { op, now, reply })?;
        answer
            .await
            .map_err(|_| StoreError::Stopped("refresh writer"))?
    }

    /// Runs one sweep pass on the writer thread (see [`RedbFile::sweep`]).
    pub async fn sweep(&self, now: u64) -> Result<u64, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.send(Job::Sweep { now, reply })?;
        answer
            .await
            .map_err(|_| StoreError::Stopped("refresh writer"))?
    }
}

fn merge(store: &RedbFile) {
    if let Err(e) = store.merge() {
        if matches!(e, StoreError::Disk(_)) {
            store.mark_failed();
        }
        tracing::error!(
            error = e.to_string(),
            "merging the refresh journal failed; it stays in the journal and is tried again"
        );
    }
}

fn run(store: &RedbFile, policy: &RefreshPolicy, queue: &mpsc::Receiver<Job>) {
    let mut last_merge = Instant::now();
    loop {
        let first = match queue.recv_timeout(MERGE_EVERY) {
            Ok(job) => job,
            Err(RecvTimeoutError::Timeout) => {
                merge(store);
                last_merge = Instant::now();
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let mut batch = Vec::new();
        let mut sweeps = Vec::new();
        let mut next = Some(first);
        while let Some(job) = next.take() {
            match job {
                Job::Refresh { op, now, reply } => batch.push(((op, now), reply)),
                Job::Sweep { now, reply } => sweeps.push((now, reply)),
            }
            if batch.len() < MAX_BATCH {
                next = queue.try_recv().ok();
            }
        }
        // After a failed write: reopen now (not inside the batch), and read the journal back, so
        // the batch decides on what the disk holds.
        if store.database().is_ok() && store.journal_stale() {
            if let Err(e) = store.load_journal() {
                tracing::error!(
                    error = e.to_string(),
                    "reading the refresh journal back failed"
                );
            }
        }
        if !batch.is_empty() {
            commit(store, policy, batch);
        }
        if store.merge_due() || last_merge.elapsed() >= MERGE_EVERY {
            merge(store);
            last_merge = Instant::now();
        }
        for (now, reply) in sweeps {
            let swept = store.sweep(now);
            if let Err(StoreError::Disk(_)) = &swept {
                store.mark_failed();
            }
            let _ = reply.send(swept);
        }
    }
    merge(store);
}

type Pending = (
    (RefreshOp, u64),
    oneshot::Sender<Result<RefreshOutcome, StoreError>>,
);

fn commit(store: &RedbFile, policy: &RefreshPolicy, batch: Vec<Pending>) {
    let (ops, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
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
