//! Ablations of the shipped filter (features `ablate-read` and `ablate-decide`): its root context
//! as shipped ([`Root`]: configuration, clock, counters, edge sync), with an HTTP context that
//! stops early, so the benchmark shows what each step of a request costs.
//!
//! - `ablate-read`: read the request's headers (one host call), then forward it untouched;
//! - `ablate-decide`: read them and decide (the token cache included), then forward without
//!   counting or writing the identity headers; a refusal still gets its answer, as a paused
//!   request without one would hang until Envoy's stream timeout.
//!
//! With both features, `ablate-read`.

use crate::adapter::{Filter, Root};
use proxy_wasm::traits::{Context, HttpContext, RootContext};
use proxy_wasm::types::{Action, ContextType, LogLevel};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Info);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Ablated(Root::default())) });
}}

/// The shipped root context, whose requests get an ablated HTTP context. Every method the
/// shipped [`Root`] implements is passed on to it.
struct Ablated(Root);

impl Context for Ablated {
    fn on_http_call_response(
        &mut self,
        token_id: u32,
        num_headers: usize,
        body_size: usize,
        num_trailers: usize,
    ) {
        self.0
            .on_http_call_response(token_id, num_headers, body_size, num_trailers);
    }
}

impl RootContext for Ablated {
    fn on_configure(&mut self, plugin_configuration_size: usize) -> bool {
        self.0.on_configure(plugin_configuration_size)
    }

    fn on_tick(&mut self) {
        self.0.on_tick();
    }

    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Cut(self.0.filter())))
    }

    fn get_type(&self) -> Option<ContextType> {
        self.0.get_type()
    }
}

/// The shipped filter, stopped early.
struct Cut(Filter);

impl Context for Cut {}

impl HttpContext for Cut {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if !self.0.configured() {
            return self.0.unavailable();
        }
        let headers = self.0.get_http_request_headers_bytes();
        if cfg!(feature = "ablate-read") {
            return Action::Continue;
        }
        match self.0.decide(&headers) {
            Some(handled)
                if matches!(handled.action, filter_core::request::Action::Answer { .. }) =>
            {
                self.0.apply(&headers, handled)
            }
            Some(_) => Action::Continue,
            None => self.0.unavailable(),
        }
    }
}
