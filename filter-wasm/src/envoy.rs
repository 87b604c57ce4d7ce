//! The proxy-wasm adapter: reads the request headers once, asks [`decide`], applies the answer
//! (at most one more host call). The clock and the counters are the root context's, on a tick.
//!
//! Nothing here may panic on request data. Headers are read as bytes
//! (`get_http_request_headers_bytes`): the SDK's `String` variant unwraps UTF-8 conversion of
//! values, which a client controls.

use crate::config::{is_identity_header, Config};
use crate::decision::{decide, Decision, Outcome};
use proxy_wasm::hostcalls;
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel, MetricType};
use std::cell::Cell;
use std::rc::Rc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

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
}

impl Shared {
    fn count(&self, outcome: Outcome) {
        let index = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        let cell = &self.pending[index];
        cell.set(cell.get().saturating_add(1));
    }
}

/// How often the root context reads the clock and hands the counts to Envoy.
const TICK: Duration = Duration::from_secs(1);

fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[derive(Default)]
struct Root {
    config: Option<Rc<Config>>,
    /// Counter ids, indexed like [`Outcome::ALL`].
    counters: Vec<u32>,
    shared: Rc<Shared>,
}

impl Root {
    fn tick(&self) {
        // Without a clock `now` stays 0 and every token is refused as not yet valid.
        self.shared
            .now
            .set(hostcalls::get_current_time().map_or(0, unix_seconds));
        for (pending, id) in self.shared.pending.iter().zip(&self.counters) {
            let n = pending.take();
            if n > 0 {
                let _ = hostcalls::increment_metric(*id, i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
    }
}

impl Context for Root {}

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
        }
        self.tick();
        let _ = hostcalls::set_tick_period(TICK);
        let Some(bytes) = self.get_plugin_configuration() else {
            let _ = hostcalls::log(LogLevel::Critical, "mms_auth: no plugin configuration");
            self.config = None;
            return false;
        };
        match Config::parse(&bytes) {
            Ok(cfg) => {
                self.config = Some(Rc::new(cfg));
                true
            }
            Err(e) => {
                let _ = hostcalls::log(LogLevel::Critical, &format!("mms_auth: {e}"));
                self.config = None;
                false
            }
        }
    }

    fn on_tick(&mut self) {
        self.tick();
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        // The SDK panics on `None`; without a configuration every request is refused instead.
        Some(Box::new(Filter {
            config: self.config.clone(),
            shared: self.shared.clone(),
        }))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Filter {
    config: Option<Rc<Config>>,
    shared: Rc<Shared>,
}

impl Context for Filter {}

impl HttpContext for Filter {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        let Some(cfg) = self.config.clone() else {
            self.send_http_response(
                503,
                vec![("content-type", "application/json")],
                Some(b"{\"error\":\"unavailable\"}"),
            );
            return Action::Pause;
        };
        let headers = self.get_http_request_headers_bytes();
        if cfg!(feature = "ablate-read") {
            return Action::Continue;
        }
        let path = headers
            .iter()
            .find(|(n, _)| n == ":path")
            .map_or(&[][..], |(_, v)| v.as_slice());
        let now = self.shared.now.get();
        let (decision, outcome, reason) = decide(
            &cfg,
            path,
            headers.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
            now,
        );
        // Refusals still get their answer: a paused request without one would hang until Envoy's
        // stream timeout.
        if cfg!(feature = "ablate-decide") && !matches!(decision, Decision::Deny(_)) {
            return Action::Continue;
        }
        self.shared.count(outcome);
        if let Some(r) = reason {
            let _ = hostcalls::log(
                LogLevel::Debug,
                &format!("mms_auth: token refused: {}", r.reason()),
            );
        }
        match decision {
            Decision::Deny(d) => {
                self.send_http_response(
                    d.status,
                    vec![
                        ("www-authenticate", d.www_authenticate.as_str()),
                        ("content-type", "application/json"),
                        ("cache-control", "no-store"),
                    ],
                    Some(d.body.as_bytes()),
                );
                Action::Pause
            }
            Decision::Exempt => {
                // Usually there is nothing to remove, and then no host call at all.
                for (name, _) in headers.iter().filter(|(n, _)| is_identity_header(n)) {
                    self.set_http_request_header(name, None);
                }
                Action::Continue
            }
            Decision::Allow(set) => {
                // One host call writes the whole map: the request's headers without any header of
                // the identity namespace it came with, plus the verified ones (instead of a call
                // per header).
                let mut map: Vec<(&str, &[u8])> = headers
                    .iter()
                    .filter(|(n, _)| !is_identity_header(n))
                    .map(|(n, v)| (n.as_str(), v.as_slice()))
                    .collect();
                map.extend(set.iter().map(|(n, v)| (*n, v.as_bytes())));
                self.set_http_request_headers_bytes(map);
                Action::Continue
            }
        }
    }
}
