//! The functions Envoy calls (`envoy_dynamic_module_on_*`): every one the HTTP filter loader of
//! Envoy 1.40 requires, and the optional ones edge sync needs. Each catches a panic: unwinding
//! into Envoy's C++ is undefined behaviour, and a native module that crashes takes all of Envoy
//! with it. A request whose hook panicked is answered 500; any other hook does nothing.
//!
//! The stream's module pointer is the configuration itself: the filter keeps no per-stream state.

use crate::abi::{self, EnvoyBuffer, EnvoyHeader};
use crate::filter::{answer_fixed, NativeConfig};
use crate::host::{self, ConfigHandle, Level, Stream};
use filter_core::request;
use std::ffi::{c_char, c_void};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Runs `f`, turning a panic into `fallback` (logged once per panic).
fn guarded<T>(what: &str, fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        host::log(Level::Critical, &format!("mms_auth: {what} panicked"));
        fallback
    })
}

/// The configuration behind a module pointer.
///
/// # Safety
/// `ptr` must come from [`envoy_dynamic_module_on_http_filter_config_new`] and not be destroyed.
unsafe fn config<'a>(ptr: *const c_void) -> Option<&'a NativeConfig> {
    // SAFETY: the caller's promise; Envoy hands back what config_new returned.
    unsafe { ptr.cast::<NativeConfig>().as_ref() }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_program_init() -> *const c_char {
    abi::ABI_VERSION.as_ptr().cast()
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_new(
    envoy: abi::ConfigEnvoyPtr,
    _name: EnvoyBuffer,
    config: EnvoyBuffer,
) -> *const c_void {
    guarded("config_new", std::ptr::null(), || {
        // SAFETY: Envoy's config pointer and buffer, valid during this hook.
        let (handle, json) = unsafe { (ConfigHandle::new(envoy), host::buffer_bytes(&config)) };
        match NativeConfig::new(handle, json) {
            Some(cfg) => Box::into_raw(Box::new(cfg)).cast_const().cast(),
            None => std::ptr::null(),
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_destroy(config: *const c_void) {
    guarded("config_destroy", (), || {
        if !config.is_null() {
            // SAFETY: made by config_new with Box::into_raw; Envoy destroys it once.
            let mut cfg = unsafe { Box::from_raw(config.cast_mut().cast::<NativeConfig>()) };
            cfg.stop();
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_scheduled(
    _envoy: abi::ConfigEnvoyPtr,
    config: *const c_void,
    _event: u64,
) {
    guarded("tick", (), || {
        // SAFETY: the live configuration Envoy hands back.
        if let Some(cfg) = unsafe { self::config(config) } {
            cfg.tick();
        }
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_config_http_callout_done(
    _envoy: abi::ConfigEnvoyPtr,
    config: *const c_void,
    callout: u64,
    result: u32,
    headers: *const EnvoyHeader,
    headers_size: usize,
    chunks: *const EnvoyBuffer,
    chunks_size: usize,
) {
    guarded("callout_done", (), || {
        // SAFETY: the live configuration; headers and chunks are Envoy's arrays of the given
        // sizes (or null), valid during this hook.
        let (cfg, headers, chunks) = unsafe {
            (
                self::config(config),
                host::slice(headers, headers_size),
                host::slice(chunks, chunks_size),
            )
        };
        let Some(cfg) = cfg else { return };
        // No status without an answer: the call failed or timed out in Envoy.
        let status = if result == abi::CALLOUT_SUCCESS {
            headers
                .iter()
                .find_map(|h| {
                    // SAFETY: Envoy's header buffers, valid during this hook.
                    let (k, v) = unsafe {
                        (
                            host::envoy_bytes(h.key_ptr, h.key_length),
                            host::envoy_bytes(h.value_ptr, h.value_length),
                        )
                    };
                    (k == b":status").then(|| std::str::from_utf8(v).ok()?.parse().ok())?
                })
                .unwrap_or(0)
        } else {
            0
        };
        // SAFETY: Envoy's body buffers, valid during this hook.
        let bodies: Vec<&[u8]> = chunks
            .iter()
            .map(|c| unsafe { host::buffer_bytes(c) })
            .collect();
        cfg.answered(callout, status, &bodies);
    })
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_new(
    config: *const c_void,
    _envoy: abi::FilterEnvoyPtr,
) -> *const c_void {
    config
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_headers(
    envoy: abi::FilterEnvoyPtr,
    module: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    // SAFETY: the stream pointer of this hook, used only in it.
    let mut stream = unsafe { Stream::new(envoy) };
    let go_on = guarded("request_headers", None, || {
        // SAFETY: the module pointer is the live configuration (filter_new).
        Some(match unsafe { config(module) } {
            #[cfg(not(feature = "native-ablation"))]
            Some(cfg) => cfg.on_request(&mut stream),
            #[cfg(feature = "native-ablation")]
            Some(cfg) => crate::ablation::on_request(cfg, &mut stream),
            None => answer_fixed(&stream, &request::UNAVAILABLE),
        })
    });
    match go_on {
        Some(true) => abi::HEADERS_CONTINUE,
        Some(false) => abi::HEADERS_STOP_ITERATION,
        None => {
            answer_fixed(&stream, &request::SERVER_ERROR);
            abi::HEADERS_STOP_ITERATION
        }
    }
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_body(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    abi::CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_request_trailers(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
) -> u32 {
    abi::CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_headers(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    abi::HEADERS_CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_body(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
    _end_of_stream: bool,
) -> u32 {
    abi::CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_response_trailers(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
) -> u32 {
    abi::CONTINUE
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_stream_complete(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_destroy(_module: *const c_void) {}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_callout_done(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
    _callout: u64,
    _result: u32,
    _headers: *const EnvoyHeader,
    _headers_size: usize,
    _chunks: *const EnvoyBuffer,
    _chunks_size: usize,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_headers(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
    _stream: u64,
    _headers: *const EnvoyHeader,
    _headers_size: usize,
    _end_stream: bool,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_data(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
    _stream: u64,
    _data: *const EnvoyBuffer,
    _data_count: usize,
    _end_stream: bool,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_trailers(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
    _stream: u64,
    _trailers: *const EnvoyHeader,
    _trailers_size: usize,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_complete(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
    _stream: u64,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_http_stream_reset(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
    _stream: u64,
    _reason: u32,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_scheduled(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
    _event: u64,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_above_write_buffer_high_watermark(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
) {
}

#[no_mangle]
pub extern "C" fn envoy_dynamic_module_on_http_filter_downstream_below_write_buffer_low_watermark(
    _envoy: abi::FilterEnvoyPtr,
    _module: *const c_void,
) {
}
