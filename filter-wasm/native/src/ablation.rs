//! The bench's ablations of the native filter's request path (features `native-empty`,
//! `native-read`, `native-decide`; never shipped): the shipped steps of
//! `NativeConfig::on_request`, stopped early to measure what each costs (`BENCHMARKS.md`).
//! `native-empty` takes the worker's state and returns, `native-read` also reads the header map,
//! `native-decide` also decides and counts, without changing the headers.

use crate::filter::{answer_fixed, replays, unix_now, NativeConfig};
use crate::host::Stream;
use filter_core::request;

/// The request hook of an ablation build, in place of the shipped `NativeConfig::on_request`.
pub fn on_request(cfg: &NativeConfig, stream: &mut Stream) -> bool {
    let now = unix_now();
    let handled = cfg.with_worker(stream, |state, stream| {
        if cfg!(feature = "native-empty") {
            return None;
        }
        let headers = stream.request_headers();
        if cfg!(feature = "native-read") {
            std::hint::black_box(&headers);
            return None;
        }
        let replays = replays(cfg.config());
        Some(request::handle(cfg.config(), state, replays, &headers, now))
    });
    let Some(handled) = handled else {
        return answer_fixed(stream, &request::UNAVAILABLE);
    };
    if let Some(handled) = handled {
        cfg.account(stream, &handled);
        if let request::Action::Answer { .. } = handled.action {
            return cfg.carry_out(stream, handled.action);
        }
    }
    true
}
