//! The part of Envoy's dynamic-module C ABI (`envoy.filters.http.dynamic_modules`, ABI `v0.2.0`
//! of Envoy 1.40) that the filter uses, declared here from Envoy's public `abi.h`: the types, the
//! status enums as the integers C gives them, and the callbacks Envoy exports. The hooks Envoy
//! calls are the `extern "C"` functions of [`crate::hooks`].
//!
//! Only callbacks the Envoy binary exports may be declared: Rust links a `cdylib` with immediate
//! binding, so one unknown name makes `dlopen` fail for the whole module (the e2e test that loads
//! it says so loudly). Nothing here is called outside [`crate::host`], the one safe wrapper.

use std::ffi::{c_char, c_void};

/// The ABI version this module is written against, returned by `on_program_init`. Envoy 1.40
/// compares it with its own and only warns on a mismatch.
pub const ABI_VERSION: &[u8] = b"v0.2.0\0";

/// Envoy's side of a filter configuration.
pub type ConfigEnvoyPtr = *mut c_void;
/// Envoy's side of one stream's filter.
pub type FilterEnvoyPtr = *mut c_void;
/// A config scheduler, owned by the module once created.
pub type SchedulerPtr = *mut c_void;

/// Bytes owned by Envoy, valid during the hook that gave them.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyBuffer {
    pub ptr: *const c_char,
    pub length: usize,
}

/// Bytes owned by the module, read by Envoy during the call.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleBuffer {
    pub ptr: *const c_char,
    pub length: usize,
}

/// A header owned by Envoy.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct EnvoyHeader {
    pub key_ptr: *const c_char,
    pub key_length: usize,
    pub value_ptr: *const c_char,
    pub value_length: usize,
}

/// A header owned by the module.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct ModuleHeader {
    pub key_ptr: *const c_char,
    pub key_length: usize,
    pub value_ptr: *const c_char,
    pub value_length: usize,
}

/// `envoy_dynamic_module_type_http_header_type`: the request's headers.
pub const REQUEST_HEADER: u32 = 0;

/// `..._on_http_filter_request_headers_status` (and the response's): go on.
pub const HEADERS_CONTINUE: u32 = 0;
/// Stop here: the filter answered locally.
pub const HEADERS_STOP_ITERATION: u32 = 1;
/// `..._on_http_filter_request_body_status` (and trailers, and the response's): go on.
pub const CONTINUE: u32 = 0;

/// `envoy_dynamic_module_type_log_level`.
pub const LOG_DEBUG: u32 = 1;
pub const LOG_WARN: u32 = 3;
pub const LOG_CRITICAL: u32 = 5;

/// `envoy_dynamic_module_type_metrics_result`: success.
pub const METRICS_SUCCESS: u32 = 0;
/// `envoy_dynamic_module_type_http_callout_init_result`: success.
pub const CALLOUT_INIT_SUCCESS: u32 = 0;
/// `envoy_dynamic_module_type_http_callout_result`: an answer arrived.
pub const CALLOUT_SUCCESS: u32 = 0;

extern "C" {
    pub fn envoy_dynamic_module_callback_http_get_headers_size(
        filter: FilterEnvoyPtr,
        header_type: u32,
    ) -> usize;
    pub fn envoy_dynamic_module_callback_http_get_headers(
        filter: FilterEnvoyPtr,
        header_type: u32,
        result: *mut EnvoyHeader,
    ) -> bool;
    /// Adds a value, beside any the header has; false (nothing added) for an empty value.
    pub fn envoy_dynamic_module_callback_http_add_header(
        filter: FilterEnvoyPtr,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    /// A null `value.ptr` removes the header.
    pub fn envoy_dynamic_module_callback_http_set_header(
        filter: FilterEnvoyPtr,
        header_type: u32,
        key: ModuleBuffer,
        value: ModuleBuffer,
    ) -> bool;
    pub fn envoy_dynamic_module_callback_http_send_response(
        filter: FilterEnvoyPtr,
        status: u32,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        details: ModuleBuffer,
    );
    pub fn envoy_dynamic_module_callback_http_filter_get_worker_index(
        filter: FilterEnvoyPtr,
    ) -> u32;

    /// Only during `on_http_filter_config_new`.
    pub fn envoy_dynamic_module_callback_http_filter_config_define_counter(
        config: ConfigEnvoyPtr,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_length: usize,
        id: *mut usize,
    ) -> u32;
    /// Only during `on_http_filter_config_new`.
    pub fn envoy_dynamic_module_callback_http_filter_config_define_gauge(
        config: ConfigEnvoyPtr,
        name: ModuleBuffer,
        label_names: *mut ModuleBuffer,
        label_names_length: usize,
        id: *mut usize,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_increment_counter(
        filter: FilterEnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_increment_counter(
        config: ConfigEnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> u32;
    pub fn envoy_dynamic_module_callback_http_filter_config_set_gauge(
        config: ConfigEnvoyPtr,
        id: usize,
        label_values: *mut ModuleBuffer,
        label_values_length: usize,
        value: u64,
    ) -> u32;

    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_new(
        config: ConfigEnvoyPtr,
    ) -> SchedulerPtr;
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_delete(
        scheduler: SchedulerPtr,
    );
    /// From any thread: Envoy runs `on_http_filter_config_scheduled` on its main thread.
    pub fn envoy_dynamic_module_callback_http_filter_config_scheduler_commit(
        scheduler: SchedulerPtr,
        event_id: u64,
    );
    /// Main thread only; `:method`, `:path` and `:authority` are required (Envoy files a `host`
    /// header under `:authority`, its legacy name).
    pub fn envoy_dynamic_module_callback_http_filter_config_http_callout(
        config: ConfigEnvoyPtr,
        callout_id: *mut u64,
        cluster: ModuleBuffer,
        headers: *mut ModuleHeader,
        headers_size: usize,
        body: ModuleBuffer,
        timeout_ms: u64,
    ) -> u32;

    pub fn envoy_dynamic_module_callback_log(level: u32, message: ModuleBuffer);
    pub fn envoy_dynamic_module_callback_log_enabled(level: u32) -> bool;
    /// Main thread only.
    pub fn envoy_dynamic_module_callback_get_concurrency() -> u32;
    /// Main thread only: true under `envoy --mode validate`.
    pub fn envoy_dynamic_module_callback_is_validation_mode() -> bool;
}
