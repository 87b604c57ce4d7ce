//! Benchmark baselines, never shipped. Feature `passthrough`: a proxy-wasm HTTP filter that lets
//! every request through untouched, so `cargo xtask bench` can measure what being a Wasm filter
//! costs at all. Feature `reference` adds the least work any header-based auth filter does: read
//! one header and add one (three crossings of the Wasm boundary: the read, the allocation of its
//! result in Wasm memory, the write).

use proxy_wasm::traits::{Context, HttpContext, RootContext};
#[cfg(feature = "reference")]
use proxy_wasm::types::Action;
use proxy_wasm::types::{ContextType, LogLevel};

proxy_wasm::main! {{
    proxy_wasm::set_log_level(LogLevel::Warn);
    proxy_wasm::set_root_context(|_| -> Box<dyn RootContext> { Box::new(Root) });
}}

struct Root;

impl Context for Root {}

impl RootContext for Root {
    fn create_http_context(&self, _context_id: u32) -> Option<Box<dyn HttpContext>> {
        Some(Box::new(Pass))
    }

    fn get_type(&self) -> Option<ContextType> {
        Some(ContextType::HttpContext)
    }
}

struct Pass;

impl Context for Pass {}

#[cfg(not(feature = "reference"))]
impl HttpContext for Pass {}

#[cfg(feature = "reference")]
impl HttpContext for Pass {
    fn on_http_request_headers(&mut self, _num_headers: usize, _end_of_stream: bool) -> Action {
        if let Some(value) = self.get_http_request_header_bytes("authorization") {
            self.add_http_request_header_bytes("x-auth-seen", &value[..value.len().min(8)]);
        }
        Action::Continue
    }
}
