//! The proxy-wasm adapter: reads the request headers once, asks [`request::handle`], applies the
//! answer (at most one more host call). The clock and the counters are the root context's, on a
//! tick; so is edge sync: with an `edge_sync` block, each VM's root context runs the core's steps
//! ([`filter_core::sync`]) over its [`Host`], which polls the issuer's edge feed with
//! `dispatch_http_call` when the [`Poller`] says so (`docs/filter.md`, "Edge sync"). What to poll,
//! count and log is all the core's; this module only makes the host calls.
//!
//! Nothing here may panic on request data. Headers are read as bytes
//! (`get_http_request_headers_bytes`): the SDK's `String` variant unwraps UTF-8 conversion of
//! values, which a client controls.

use filter_core::config::Config;
use filter_core::decision::Outcome;
use filter_core::dpop::Es256By;
use filter_core::edge::{EdgeIdentity, EdgeState, Poller};
use filter_core::request::{self, Handled};
use filter_core::sync::{EdgeHost, SyncCounter};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, BufferType, ContextType, LogLevel, MapType, MetricType};
use shared::time::{since_epoch, unix_seconds};
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

// The benchmark ablations (`crate::bench`) start the module with a root context of their own.
#[cfg(not(any(feature = "ablate-read", feature = "ablate-decide")))]
proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root::default()) });
}}

/// What every request of this VM reads or counts without a host call of its own. Each call
/// across the Wasm boundary costs microseconds, more than verifying the token, so the clock and the
/// outcome counters are brought up to date by the root context once a second ([`TICK`]) instead of
/// once per request.
#[derive(Default)]
struct Shared {
    /// Seconds since the Unix epoch, as of the last tick.
    now: Cell<u64>,
    /// Outcomes counted since the last tick, indexed like [`Outcome::ALL`].
    pending: [Cell<u64>; Outcome::ALL.len()],
    /// Keys, lifetime limit and revocations: the configuration's, then edge sync's. Borrowed
    /// by one request at a time and replaced by the root context between requests (one thread).
    state: RefCell<Option<EdgeState>>,
    /// The memory of used DPoP proofs, as the configuration sized it.
    replays: RefCell<Option<Rc<crate::replays::SharedReplays>>>,
}

impl Shared {
    fn count(&self, outcome: Outcome) {
        if let Some(cell) = self.pending.get(outcome.index()) {
            cell.set(cell.get().saturating_add(1));
        }
    }
}

/// How often the root context reads the clock and hands the counts to Envoy.
const TICK: Duration = Duration::from_secs(1);

/// Edge sync's metric ids.
#[derive(Default)]
struct SyncMetrics {
    ok: u32,
    /// Counts each VM's first good answer once: while it is below the number of VMs (Envoy's
    /// workers and its main thread), some VM still refuses requests with a token.
    first_ok: u32,
    failed: u32,
    age: u32,
}

/// The root context of a VM: its configuration, clock, counters and edge sync.
#[derive(Default)]
pub(crate) struct Root {
    config: Option<Rc<Config>>,
    /// Counter ids, indexed like [`Outcome::ALL`].
    counters: Vec<u32>,
    shared: Rc<Shared>,
    sync: SyncMetrics,
    /// When to poll the edge feed and what to log about it.
    poller: Poller,
    /// Gauge of this VM's linear memory: what its keys, revocations and buffers take.
    memory: u32,
    /// Who this VM is, as its polls say; set at the first configuration.
    identity: Option<EdgeIdentity>,
    /// Whether the host verifies ES256 as the module does: asked once, at the first
    /// configuration (`None` before it).
    host_es256: Option<bool>,
    /// Who verifies this VM's ES256 proofs, as last logged and counted.
    es256: Option<Es256By>,
    /// Counters of VMs by who verifies their ES256 proofs: the host, the module.
    es256_metrics: [u32; 2],
}

/// Bytes of this VM's linear memory (it grows and never shrinks).
fn vm_memory_bytes() -> u64 {
    #[cfg(target_arch = "wasm32")]
    let pages = core::arch::wasm32::memory_size(0) as u64;
    #[cfg(not(target_arch = "wasm32"))]
    let pages = 0;
    pages * 65_536
}

/// This VM's number among the VMs of its Envoy, counted in Envoy's shared data (one store for
/// every VM of the plugin, the main thread's and each worker's) by compare-and-swap: two workers'
/// VMs can start in the same tick of the clock, and their edge identities must still differ.
/// 0 if the store fails (the identity then rests on the clock alone).
fn vm_ordinal() -> u32 {
    const KEY: &str = "mms_auth.vm_count";
    for _ in 0..32 {
        let Ok((value, cas)) = hostcalls::get_shared_data(KEY) else {
            return 0;
        };
        let count = value
            .and_then(|v| <[u8; 4]>::try_from(v.as_slice()).ok())
            .map(u32::from_be_bytes);
        let (Some(count), Some(cas)) = (count, cas) else {
            // Create only if absent: the host ignores a CAS for a missing key but checks it for an
            // existing one, and its CAS counter starts at 1 and would need 2^32 writes to reach
            // `u32::MAX`; a VM that loses the race gets a mismatch and reads the winner's count.
            match hostcalls::set_shared_data(KEY, Some(&0u32.to_be_bytes()), Some(u32::MAX)) {
                Ok(()) | Err(proxy_wasm::types::Status::CasMismatch) => continue,
                Err(_) => return 0,
            }
        };
        let next = count.wrapping_add(1).to_be_bytes();
        match hostcalls::set_shared_data(KEY, Some(&next), Some(cas)) {
            Ok(()) => return count,
            Err(proxy_wasm::types::Status::CasMismatch) => continue,
            Err(_) => return 0,
        }
    }
    0
}

fn metric(kind: MetricType, name: &str) -> u32 {
    hostcalls::define_metric(kind, name).unwrap_or(u32::MAX)
}

impl Root {
    /// Who verifies ES256 proofs under a configuration that allows the host (`allowed`): the
    /// host if it passed the known answer. Logged and counted when it changes (at the first
    /// configuration, then only if a new one changes `dpop.es256_verifier`).
    fn es256_by(&mut self, allowed: bool) -> Es256By {
        let host = self.host_es256 == Some(true);
        let by = if allowed && host {
            Es256By::host(&crate::host_crypto::HOST)
        } else {
            Es256By::MODULE
        };
        if self.es256.map(Es256By::name) != Some(by.name()) {
            self.es256 = Some(by);
            let why = match (allowed, host) {
                (true, true) => "the host's verify_signature (BoringSSL)",
                (false, _) => "the module's own code (dpop.es256_verifier is \"module\")",
                (true, false) => {
                    "the module's own code (the host offers no verify_signature that \
                     verifies the known answer rightly)"
                }
            };
            let _ = hostcalls::log(
                LogLevel::Info,
                &format!("mms_auth: ES256 DPoP proofs are verified by {why}"),
            );
            let id = self.es256_metrics[usize::from(!host || !allowed)];
            let _ = hostcalls::increment_metric(id, 1);
        }
        by
    }

    /// The HTTP context of a new request.
    pub(crate) fn filter(&self) -> Filter {
        Filter {
            config: self.config.clone(),
            shared: self.shared.clone(),
        }
    }

    fn tick(&mut self) {
        // Without a clock `now` stays 0 and every token is refused as not yet valid.
        let now = hostcalls::get_current_time().map_or(0, unix_seconds);
        self.shared.now.set(now);
        let refused = self
            .shared
            .pending
            .get(Outcome::Unsynced.index())
            .map_or(0, Cell::get);
        for (pending, id) in self.shared.pending.iter().zip(&self.counters) {
            let n = pending.take();
            if n > 0 {
                let _ = hostcalls::increment_metric(*id, i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        let _ = hostcalls::record_metric(self.memory, vm_memory_bytes());
        let cfg = self.config.clone();
        let sync = cfg.as_ref().and_then(|c| c.edge_sync.as_ref());
        let mut host = Host {
            poller: &mut self.poller,
            shared: &self.shared,
            metrics: &self.sync,
        };
        filter_core::sync::tick(&mut host, sync, self.identity.as_ref(), refused);
    }

    /// The answer to a poll, `call`, has arrived, `body_size` bytes.
    fn answered(&mut self, call: u32, body_size: usize) {
        let Some(cfg) = self.config.clone() else {
            return;
        };
        let Some(sync) = &cfg.edge_sync else {
            return;
        };
        let mut host = Host {
            poller: &mut self.poller,
            shared: &self.shared,
            metrics: &self.sync,
        };
        let status = || {
            hostcalls::get_map_value_bytes(MapType::HttpCallResponseHeaders, ":status")
                .ok()
                .flatten()
                .and_then(|v| std::str::from_utf8(&v).ok()?.parse::<u32>().ok())
                // No status: the call failed or timed out in Envoy.
                .unwrap_or(0)
        };
        let body = || {
            hostcalls::get_buffer(BufferType::HttpCallResponseBody, 0, body_size)
                .ok()
                .flatten()
                .unwrap_or_default()
        };
        let identity = self.identity.as_ref();
        filter_core::sync::answered(&mut host, sync, identity, call, body_size, status, body);
    }
}

/// Edge sync's host: the root context's poller, its VM's state, metrics and host calls.
struct Host<'a> {
    poller: &'a mut Poller,
    shared: &'a Shared,
    metrics: &'a SyncMetrics,
}

impl EdgeHost for Host<'_> {
    fn now(&self) -> u64 {
        // The time of the last tick: a host call per use would cost more than it tells.
        self.shared.now.get()
    }

    fn with_edge<R>(&mut self, f: impl FnOnce(&mut Poller, &mut EdgeState) -> R) -> Option<R> {
        let mut state = self.shared.state.borrow_mut();
        Some(f(self.poller, state.as_mut()?))
    }

    fn count(&mut self, counter: SyncCounter) {
        let id = match counter {
            SyncCounter::Ok => self.metrics.ok,
            SyncCounter::FirstOk => self.metrics.first_ok,
            SyncCounter::Failed => self.metrics.failed,
        };
        let _ = hostcalls::increment_metric(id, 1);
    }

    fn set_age(&mut self, seconds: u64) {
        let _ = hostcalls::record_metric(self.metrics.age, seconds);
    }

    fn warn(&mut self, message: &str) {
        let _ = hostcalls::log(LogLevel::Warn, message);
    }

    fn dispatch(
        &mut self,
        cluster: &str,
        headers: &[(&str, &str)],
        timeout_ms: u64,
    ) -> Result<u32, String> {
        let timeout = Duration::from_millis(timeout_ms);
        hostcalls::dispatch_http_call(cluster, headers.to_vec(), None, vec![], timeout)
            .map_err(|status| format!("cannot call cluster {cluster:?}: {status:?}"))
    }
}

impl Context for Root {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        _num_headers: usize,
        body_size: usize,
        _num_trailers: usize,
    ) {
        self.answered(token_id, body_size);
    }
}

impl RootContext for Root {
    fn on_configure(&mut self, _size: usize) -> bool {
        if self.counters.is_empty() {
            self.counters = Outcome::ALL
                .iter()
                .filter_map(|o| {
                    hostcalls::define_metric(MetricType::Counter, &format!("mms_auth.{}", o.name()))
                        .ok()
                })
                .collect();
            self.sync.ok = metric(MetricType::Counter, "mms_auth.edge_sync_ok");
            self.sync.first_ok = metric(MetricType::Counter, "mms_auth.edge_sync_first_ok");
            self.sync.failed = metric(MetricType::Counter, "mms_auth.edge_sync_failed");
            self.sync.age = metric(MetricType::Gauge, "mms_auth.edge_sync_age_seconds");
            // Per plugin (root id), so plugins in one Envoy with VMs of their own tell apart.
            let root_id = self
                .get_property(vec!["plugin_root_id"])
                .and_then(|id| String::from_utf8(id).ok())
                .unwrap_or_else(|| "mms_auth".into());
            self.memory = metric(MetricType::Gauge, &format!("{root_id}.vm_memory_bytes"));
            let started = hostcalls::get_current_time()
                .ok()
                .and_then(since_epoch)
                .map_or(0, |d| d.as_nanos());
            // Envoy's attribute `xds.node.id`: `--service-node` or the bootstrap's `node.id`.
            let node = self.get_property(vec!["xds", "node", "id"]);
            self.identity = Some(EdgeIdentity::new(node.as_deref(), started, vm_ordinal()));
            self.es256_metrics = [
                metric(MetricType::Counter, "mms_auth.dpop_es256_host"),
                metric(MetricType::Counter, "mms_auth.dpop_es256_module"),
            ];
            self.host_es256 = Some(crate::host_crypto::host_verifies());
        }
        let _ = hostcalls::set_tick_period(TICK);
        let Some(bytes) = self.get_plugin_configuration() else {
            let _ = hostcalls::log(LogLevel::Critical, "mms_auth: no plugin configuration");
            self.config = None;
            return false;
        };
        match Config::parse(&bytes) {
            Ok(cfg) => {
                let now = hostcalls::get_current_time().map_or(0, unix_seconds);
                let mut state = EdgeState::new(&cfg, now);
                state.set_es256(self.es256_by(cfg.dpop.host_es256));
                *self.shared.state.borrow_mut() = Some(state);
                *self.shared.replays.borrow_mut() = Some(Rc::new(
                    crate::replays::SharedReplays::open(cfg.dpop.replay_entries, now),
                ));
                self.config = Some(Rc::new(cfg));
                self.poller.configured();
                self.tick();
                true
            }
            Err(e) => {
                let _ = hostcalls::log(LogLevel::Critical, &format!("mms_auth: {e}"));
                self.config = None;
                *self.shared.state.borrow_mut() = None;
                false
            }
        }
    }

    fn on_tick(&mut self) {
        self.tick();
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        // The SDK panics on `None`; without a configuration every request is refused instead.
        Some(Box::new(self.filter()))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

/// The HTTP context of one request: decides it with the VM's configuration and state.
pub(crate) struct Filter {
    config: Option<Rc<Config>>,
    shared: Rc<Shared>,
}

impl Context for Filter {}

impl Filter {
    /// True if the plugin has a configuration (it always has with `FAIL_CLOSED`).
    pub(crate) fn configured(&self) -> bool {
        self.config.is_some()
    }

    /// The answer without a configuration or a state: nothing can be verified
    /// ([`request::UNAVAILABLE`]).
    pub(crate) fn unavailable(&self) -> Action {
        let answer = request::UNAVAILABLE;
        self.send_http_response(
            answer.status,
            answer.headers.to_vec(),
            Some(answer.body.as_bytes()),
        );
        Action::Pause
    }

    /// Decides a request with these headers ([`request::handle`]), and remembers its token if it
    /// verified. `None` without a configuration or a state.
    pub(crate) fn decide(&self, headers: &[(String, Vec<u8>)]) -> Option<Handled> {
        let cfg = self.config.as_ref()?;
        let state = self.shared.state.borrow();
        let view: Vec<(&str, &[u8])> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_slice()))
            .collect();
        let replays = self.shared.replays.borrow().clone()?;
        Some(request::handle(
            cfg,
            state.as_ref()?,
            replays.as_ref(),
            &view,
            self.shared.now.get(),
        ))
    }

    /// Counts a decided request and carries its decision out: a local answer, or the request
    /// forwarded with the identity headers set (`headers` are the request's).
    pub(crate) fn apply(&self, headers: &[(String, Vec<u8>)], handled: Handled) -> Action {
        self.shared.count(handled.outcome);
        if let Some(r) = handled.reason {
            let _ = hostcalls::log(
                LogLevel::Debug,
                &format!("mms_auth: token refused: {}", r.reason()),
            );
        }
        match handled.action {
            request::Action::Answer {
                status,
                headers,
                body,
            } => {
                let headers = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
                self.send_http_response(status, headers, Some(body.as_bytes()));
                Action::Pause
            }
            // An exempt path: usually nothing to remove, and then no host call at all.
            request::Action::Forward { remove, set: None } => {
                for name in remove {
                    self.set_http_request_header(&name, None);
                }
                Action::Continue
            }
            request::Action::Forward {
                remove,
                set: Some(set),
            } => {
                // One host call writes the whole map: the request's headers without any header of
                // the identity namespace it came with, plus the verified ones. A host call per
                // header measured no better (docs/filter.md).
                let mut map: Vec<(&str, &[u8])> = Vec::with_capacity(headers.len() + set.len());
                map.extend(
                    headers
                        .iter()
                        .filter(|(n, _)| !remove.contains(n))
                        .map(|(n, v)| (n.as_str(), v.as_slice())),
                );
                map.extend(set.iter().map(|(n, v)| (*n, v.as_bytes())));
                self.set_http_request_headers_bytes(map);
                Action::Continue
            }
        }
    }
}

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if !self.configured() {
            return self.unavailable();
        }
        let headers = self.get_http_request_headers_bytes();
        // Refusals still get their answer: a paused request without one would hang until Envoy's
        // stream timeout.
        match self.decide(&headers) {
            Some(decided) => self.apply(&headers, decided),
            None => self.unavailable(),
        }
    }
}
