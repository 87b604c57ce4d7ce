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
use super::refresh::{FamilyDone, FamilyOp};
use super::RedbFile;
use crate::display::Causes;
use crate::store::family::Family;
use crate::store::{DiskFault, FamilyRevocation, RefreshPolicy, RotateOutcome, StoreError};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::oneshot;
use zeroize::Zeroizing;

/// Most operations committed together.
pub const MAX_BATCH: usize = 1024;

/// Where the answer to a [`FamilyOp`] goes, typed as the operation it was built with.
enum Reply {
    Start(oneshot::Sender<Result<Zeroizing<String>, StoreError>>),
    Rotate(oneshot::Sender<Result<RotateOutcome, StoreError>>),
    Revoke(oneshot::Sender<Result<FamilyRevocation, StoreError>>),
    RevokeId(oneshot::Sender<Result<Option<Family>, StoreError>>),
}

impl Reply {
    fn send(self, done: Result<FamilyDone, StoreError>) {
        // Each operation is applied into the variant of its own kind; a mismatch cannot happen,
        // and would be answered as an internal failure rather than a wrong answer.
        let mismatch = || StoreError::Stopped("refresh writer (mismatched answer)");
        // A receiver that gave up waiting (its request was dropped) is no error.
        match (self, done) {
            (Self::Start(r), Ok(FamilyDone::Started(t))) => drop(r.send(Ok(t))),
            (Self::Rotate(r), Ok(FamilyDone::Rotated(o))) => drop(r.send(Ok(o))),
            (Self::Revoke(r), Ok(FamilyDone::Revoked(o))) => drop(r.send(Ok(o))),
            (Self::RevokeId(r), Ok(FamilyDone::RevokedId(o))) => drop(r.send(Ok(o))),
            (Self::Start(r), other) => drop(r.send(Err(other.err().unwrap_or_else(mismatch)))),
            (Self::Rotate(r), other) => drop(r.send(Err(other.err().unwrap_or_else(mismatch)))),
            (Self::Revoke(r), other) => drop(r.send(Err(other.err().unwrap_or_else(mismatch)))),
            (Self::RevokeId(r), other) => drop(r.send(Err(other.err().unwrap_or_else(mismatch)))),
        }
    }
}

enum Job {
    Family {
        op: FamilyOp,
        now: u64,
        reply: Reply,
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
    pub fn spawn(store: Arc<RedbFile>, policy: RefreshPolicy) -> std::io::Result<Self> {
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

    /// Queues `op` with its `reply` and waits for the answer. A failed batch is logged by the
    /// writer once and is [`StoreError::Batch`] (or [`StoreError::Disk`]) to each of its callers;
    /// a damaged record fails only the operation that read it.
    async fn submit<T>(
        &self,
        op: FamilyOp,
        now: u64,
        reply: Reply,
        answer: oneshot::Receiver<Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.send(Job::Family { op, now, reply })?;
        answer
            .await
            .map_err(|_| StoreError::Stopped("refresh writer"))?
    }

    /// Starts a family (see [`crate::store::Families::start_family`]).
    pub async fn start(
        &self,
        client: &str,
        user: &str,
        now: u64,
        jkt: Option<[u8; 32]>,
    ) -> Result<Zeroizing<String>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let op = FamilyOp::Start {
            client: client.into(),
            user: user.into(),
            jkt,
        };
        self.submit(op, now, Reply::Start(reply), answer).await
    }

    /// Rotates a token (see [`crate::store::Families::rotate_family`]).
    pub async fn rotate(
        &self,
        presented: &str,
        client: &str,
        now: u64,
        proof: Option<[u8; 32]>,
    ) -> Result<RotateOutcome, StoreError> {
        let (reply, answer) = oneshot::channel();
        let op = FamilyOp::Rotate {
            presented: Zeroizing::new(presented.into()),
            client: client.into(),
            proof,
        };
        self.submit(op, now, Reply::Rotate(reply), answer).await
    }

    /// Revokes a family (see [`crate::store::Families::revoke_family`]).
    pub async fn revoke(
        &self,
        token: &str,
        client: &str,
        now: u64,
    ) -> Result<FamilyRevocation, StoreError> {
        let (reply, answer) = oneshot::channel();
        let op = FamilyOp::Revoke {
            token: Zeroizing::new(token.into()),
            client: client.into(),
        };
        self.submit(op, now, Reply::Revoke(reply), answer).await
    }

    /// Revokes a family by id (see [`crate::store::Families::revoke_family_id`]).
    pub async fn revoke_id(&self, id: [u8; 16], now: u64) -> Result<Option<Family>, StoreError> {
        let (reply, answer) = oneshot::channel();
        let op = FamilyOp::RevokeId { id };
        self.submit(op, now, Reply::RevokeId(reply), answer).await
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
            error = Causes(&e).to_string(),
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
                Job::Family { op, now, reply } => batch.push(((op, now), reply)),
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
                    error = Causes(&e).to_string(),
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

type Pending = ((FamilyOp, u64), Reply);

fn commit(store: &RedbFile, policy: &RefreshPolicy, batch: Vec<Pending>) {
    let (ops, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
    match store.apply_refresh_ops(&ops, policy) {
        Ok(outcomes) => {
            for (reply, outcome) in replies.into_iter().zip(outcomes) {
                reply.send(outcome);
            }
        }
        Err(e) => {
            tracing::error!(
                error = Causes(&e).to_string(),
                batch = replies.len(),
                "refresh batch failed; nothing of it was committed"
            );
            // One failure, shared by every operation of the batch.
            let shared: Box<dyn Fn() -> StoreError> = match e {
                StoreError::Disk(fault) => {
                    store.mark_failed();
                    let fault = Arc::new(fault);
                    Box::new(move || StoreError::Disk(DiskFault::Batch(fault.clone())))
                }
                other => {
                    let other = Arc::new(other);
                    Box::new(move || StoreError::Batch(other.clone()))
                }
            };
            for reply in replies {
                reply.send(Err(shared()));
            }
        }
    }
}
