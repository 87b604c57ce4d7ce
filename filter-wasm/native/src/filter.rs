//! The native filter's state and what its hooks do, over the same pure core as the Wasm filter:
//! [`filter_core::request::handle`] for each request, [`filter_core::sync`]'s steps for edge sync,
//! over [`MainThread`], this filter's [`EdgeHost`].
//!
//! Where the Wasm filter has a VM per worker, each polling the feed, the native filter has one
//! configuration shared by every worker: its main-thread side ([`Master`]) polls the feed (Envoy
//! lets only the main thread make a config's HTTP calls) on a tick that a thread of ours asks
//! Envoy for each second; each worker decides with a copy of that state of its own
//! ([`EdgeState::follow`]), with its own token cache, brought up to date when the master's
//! changes. So one poll per second per Envoy, and no lock shared by workers on the request path.

use crate::host::{self, ConfigHandle, Level, Metric, Scheduler, Stream};
use filter_core::config::Config;
use filter_core::decision::Outcome;
use filter_core::edge::{EdgeIdentity, EdgeState, Poller};
use filter_core::request::{self, Action, Handled};
use filter_core::sync::{self, EdgeHost, SyncCounter};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

/// The time in seconds since the Unix epoch (0 before it).
pub(super) fn unix_now() -> u64 {
    shared::time::unix_seconds(SystemTime::now())
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one is caught at the hook; the state it guards stays consistent
    // (each change is made whole before the guard drops), so the poison is ignored.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The state edge sync polls into, on Envoy's main thread.
struct Master {
    state: EdgeState,
    poller: Poller,
}

/// A worker's copy of the state, with its own token cache.
struct Worker {
    /// The [`NativeConfig::version`] the copy follows.
    version: u64,
    state: EdgeState,
}

/// Metric ids.
#[derive(Default)]
struct Metrics {
    /// Indexed like [`Outcome::ALL`].
    outcomes: Vec<usize>,
    sync_ok: Option<usize>,
    sync_first_ok: Option<usize>,
    sync_failed: Option<usize>,
    sync_age: Option<usize>,
}

// Envoy shares one configuration between its main thread and its workers.
const _: () = {
    fn shared_between_threads<T: Send + Sync>() {}
    let _ = shared_between_threads::<NativeConfig>;
};

/// One filter configuration: what `on_http_filter_config_new` made of its JSON.
pub struct NativeConfig {
    envoy: ConfigHandle,
    config: Config,
    metrics: Metrics,
    master: Mutex<Master>,
    /// Bumped whenever the master state changes, for the workers to follow.
    version: AtomicU64,
    /// One copy per worker thread, by Envoy's worker index (uncontended).
    workers: Box<[Mutex<Option<Worker>>]>,
    /// Requests refused since the last tick for want of a first good answer.
    unsynced: AtomicU64,
    /// While a poll is being sent (main thread): Envoy may end a call before `send` returns (no
    /// healthy host, a full circuit breaker) and give its answer inline; such an answer is noted
    /// here and the poll taken as failed.
    sending: AtomicBool,
    answered_inline: AtomicBool,
    identity: EdgeIdentity,
    /// The tick thread and its scheduler, with edge sync outside `--mode validate`.
    ticker: Option<Ticker>,
}

/// A thread that asks Envoy for a tick on its main thread each second, until dropped.
struct Ticker {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    // Dropped after the thread has ended (fields drop in order, after `Drop::drop`).
    _scheduler: std::sync::Arc<Scheduler>,
}

impl Ticker {
    fn start(scheduler: Scheduler) -> Option<Self> {
        let scheduler = std::sync::Arc::new(scheduler);
        let (stop, stopped) = mpsc::channel::<()>();
        let commits = scheduler.clone();
        let thread = std::thread::Builder::new()
            .name("mms_auth-tick".into())
            .spawn(move || {
                // The first poll at once, then one tick a second.
                commits.commit(0);
                while let Err(mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(Duration::from_secs(1))
                {
                    commits.commit(0);
                }
            })
            .ok()?;
        Some(Self {
            stop: Some(stop),
            thread: Some(thread),
            _scheduler: scheduler,
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl NativeConfig {
    /// Makes a configuration of the plugin JSON (on Envoy's main thread, in
    /// `on_http_filter_config_new`: the only moment metrics can be defined). `None` with the
    /// reason logged, and Envoy refuses the configuration: never an open filter.
    pub fn new(envoy: ConfigHandle, json: &[u8]) -> Option<Self> {
        let config = match Config::parse(json) {
            Ok(c) => c,
            Err(e) => {
                host::log(Level::Critical, &format!("mms_auth: {e}"));
                return None;
            }
        };
        let metrics = Metrics {
            outcomes: Outcome::ALL
                .iter()
                .map(|o| envoy.define(Metric::Counter, &format!("mms_auth.{}", o.name())))
                .collect::<Option<_>>()?,
            sync_ok: envoy.define(Metric::Counter, "mms_auth.edge_sync_ok"),
            sync_first_ok: envoy.define(Metric::Counter, "mms_auth.edge_sync_first_ok"),
            sync_failed: envoy.define(Metric::Counter, "mms_auth.edge_sync_failed"),
            sync_age: envoy.define(Metric::Gauge, "mms_auth.edge_sync_age_seconds"),
        };
        replays(&config).grow(config.dpop.replay_entries);
        let now = unix_now();
        let started = shared::time::since_epoch(SystemTime::now()).map_or(0, |d| d.as_nanos());
        let workers = (0..host::concurrency().max(1))
            .map(|_| Mutex::new(None))
            .collect();
        let ticker = match (&config.edge_sync, host::validation_mode()) {
            (Some(_), false) => Some(Ticker::start(envoy.scheduler()?)?),
            _ => None,
        };
        let mut poller = Poller::default();
        poller.configured();
        Some(Self {
            envoy,
            master: Mutex::new(Master {
                state: EdgeState::new(&config, now),
                poller,
            }),
            config,
            metrics,
            version: AtomicU64::new(0),
            workers,
            unsynced: AtomicU64::new(0),
            sending: AtomicBool::new(false),
            answered_inline: AtomicBool::new(false),
            identity: EdgeIdentity::new(None, started, 0),
            ticker,
        })
    }

    /// The filter's configuration.
    #[cfg(feature = "native-ablation")]
    pub(super) fn config(&self) -> &Config {
        &self.config
    }

    /// Decides one request from its headers and carries the decision out (on a worker).
    /// The DPoP proofs it accepts go to the process's one memory ([`replays`]).
    /// Returns true to let the request go on, false when it was answered here. (An ablation build
    /// has `ablation::on_request` instead.)
    #[cfg(not(feature = "native-ablation"))]
    pub fn on_request(&self, stream: &mut Stream) -> bool {
        let now = unix_now();
        let handled = self.with_worker(stream, |state, stream| {
            let headers = stream.request_headers();
            filter_core::request::handle(&self.config, state, replays(&self.config), &headers, now)
        });
        let Some(handled) = handled else {
            return answer_fixed(stream, &request::UNAVAILABLE);
        };
        self.account(stream, &handled);
        self.carry_out(stream, handled.action)
    }

    /// Runs `f` with the state of the worker `stream` is on, brought up to date with the main
    /// thread's first (None if Envoy named a worker it did not announce).
    pub(super) fn with_worker<R>(
        &self,
        stream: &mut Stream,
        f: impl FnOnce(&EdgeState, &mut Stream) -> R,
    ) -> Option<R> {
        let index = (stream.worker_index() as usize).checked_rem(self.workers.len())?;
        let mut slot = lock(self.workers.get(index)?);
        let version = self.version.load(Ordering::Acquire);
        let worker = slot.get_or_insert_with(|| Worker {
            version: u64::MAX,
            state: EdgeState::new(&self.config, unix_now()),
        });
        if worker.version != version {
            worker.state.follow(&lock(&self.master).state);
            worker.version = version;
        }
        Some(f(&worker.state, stream))
    }

    /// Counts the request's outcome, and logs why a token was refused (at debug level).
    pub(super) fn account(&self, stream: &Stream, handled: &Handled) {
        if let Some(id) = self.metrics.outcomes.get(handled.outcome.index()) {
            stream.increment(*id, 1);
        }
        if handled.outcome == Outcome::Unsynced {
            self.unsynced.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(r) = handled.reason {
            if host::debug_enabled() {
                host::log(
                    Level::Debug,
                    &format!("mms_auth: token refused: {}", r.reason()),
                );
            }
        }
    }

    /// Answers the request, or changes its identity headers and lets it go on (true).
    pub(super) fn carry_out(&self, stream: &mut Stream, action: Action) -> bool {
        match action {
            Action::Answer {
                status,
                headers,
                body,
            } => {
                let headers: Vec<_> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                stream.send_response(status, &headers, body.as_bytes(), "mms_auth_refused");
                false
            }
            Action::Forward { remove, set } => {
                for name in &remove {
                    stream.set_request_header(name, None);
                }
                // Every name set is in the identity namespace, whose headers are gone by now.
                for (name, value) in set.iter().flat_map(|s| s.iter()) {
                    stream.add_request_header(name, value.as_bytes());
                }
                true
            }
        }
    }

    /// The once-a-second tick, on the main thread: the edge sync gauge, warnings, a poll.
    pub fn tick(&self) {
        let refused = self.unsynced.swap(0, Ordering::Relaxed);
        let sync = self.config.edge_sync.as_ref();
        sync::tick(&mut MainThread(self), sync, Some(&self.identity), refused);
    }

    /// The answer to a poll arrived (main thread): its status (0 without an answer) and body.
    pub fn answered(&self, callout: u64, status: u32, chunks: &[&[u8]]) {
        let Some(sync) = &self.config.edge_sync else {
            return;
        };
        if self.sending.load(Ordering::Relaxed) {
            self.answered_inline.store(true, Ordering::Relaxed);
            return;
        }
        let size = chunks.iter().map(|c| c.len()).sum();
        // The poller's call ids are 32 bits, as proxy-wasm's; Envoy counts from 1.
        sync::answered(
            &mut MainThread(self),
            sync,
            Some(&self.identity),
            callout as u32,
            size,
            || status,
            || chunks.concat(),
        );
    }

    /// Stops the tick thread (before Envoy destroys the config and its scheduler).
    pub fn stop(&mut self) {
        self.ticker = None;
    }
}

/// Edge sync's host: a configuration on Envoy's main thread, where its polls are sent and
/// answered. The master state's lock is held only in [`EdgeHost::with_edge`], never while a poll
/// is sent: Envoy may answer it inline, and the answer takes the lock.
struct MainThread<'a>(&'a NativeConfig);

impl EdgeHost for MainThread<'_> {
    fn now(&self) -> u64 {
        unix_now()
    }

    fn with_edge<R>(&mut self, f: impl FnOnce(&mut Poller, &mut EdgeState) -> R) -> Option<R> {
        let mut master = lock(&self.0.master);
        let Master { state, poller } = &mut *master;
        Some(f(poller, state))
    }

    fn count(&mut self, counter: SyncCounter) {
        let metrics = &self.0.metrics;
        let id = match counter {
            SyncCounter::Ok => metrics.sync_ok,
            SyncCounter::FirstOk => metrics.sync_first_ok,
            SyncCounter::Failed => metrics.sync_failed,
        };
        if let Some(id) = id {
            self.0.envoy.increment(id, 1);
        }
    }

    fn set_age(&mut self, seconds: u64) {
        if let Some(id) = self.0.metrics.sync_age {
            self.0.envoy.set_gauge(id, seconds);
        }
    }

    fn warn(&mut self, message: &str) {
        host::log(Level::Warn, message);
    }

    fn dispatch(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        timeout_ms: u64,
    ) -> Result<u32, String> {
        let cfg = self.0;
        cfg.answered_inline.store(false, Ordering::Relaxed);
        cfg.sending.store(true, Ordering::Relaxed);
        let sent = cfg.envoy.callout(cluster, headers, timeout_ms);
        cfg.sending.store(false, Ordering::Relaxed);
        let inline = cfg.answered_inline.swap(false, Ordering::Relaxed);
        match sent {
            // The poller's call ids are 32 bits, as proxy-wasm's; Envoy counts from 1.
            Ok(id) if !inline => Ok(id as u32),
            Ok(_) => Err("the call ended before it was sent (no healthy host?)".to_owned()),
            Err(code) => Err(format!(
                "cannot call cluster {cluster:?}: init result {code}"
            )),
        }
    }

    fn answer_handled(&mut self) {
        // The workers follow the master state at their next request.
        self.0.version.fetch_add(1, Ordering::Release);
    }
}

/// Sends one of the core's fixed answers ([`request::UNAVAILABLE`] when nothing can be verified:
/// no configuration, a worker Envoy did not announce; [`request::SERVER_ERROR`] when a hook
/// failed). False: the request goes no further.
pub fn answer_fixed(stream: &Stream, answer: &request::Fixed) -> bool {
    stream.send_response(
        answer.status,
        &answer.headers,
        answer.body.as_bytes(),
        "mms_auth_unavailable",
    );
    false
}

/// The memory of used DPoP proofs, one per Envoy process (this library is loaded once, and every
/// worker's filter shares it): as large as the largest `replay_entries` configured since Envoy
/// started (each configuration grows it when it is made).
pub(crate) fn replays(config: &Config) -> &'static filter_core::dpop::ShardedReplays {
    static REPLAYS: std::sync::OnceLock<filter_core::dpop::ShardedReplays> =
        std::sync::OnceLock::new();
    // Begun when the process first configured the filter: proofs dated before are refused,
    // so none accepted by an Envoy before a restart passes again.
    REPLAYS.get_or_init(|| {
        filter_core::dpop::ShardedReplays::new(config.dpop.replay_entries, unix_now())
    })
}
