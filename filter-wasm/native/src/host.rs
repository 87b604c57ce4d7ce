//! The one safe wrapper around Envoy's callbacks ([`crate::abi`]): every `unsafe` call of the
//! native filter is here, each with what makes it sound. Pointers from Envoy are valid for the
//! hook that gave them ([`Stream`] for one stream's hook, [`ConfigHandle`] from
//! `on_http_filter_config_new` to `on_http_filter_config_destroy`); what Envoy lends is copied
//! before the hook returns, and what it reads of ours lives through the call.

use crate::abi::{self, EnvoyBuffer, EnvoyHeader, ModuleBuffer, ModuleHeader};
use std::ffi::c_void;

fn buffer(bytes: &[u8]) -> ModuleBuffer {
    ModuleBuffer {
        ptr: bytes.as_ptr().cast(),
        length: bytes.len(),
    }
}

/// An array Envoy lends for the hook, empty when null.
///
/// # Safety
/// `ptr` must point at `len` initialized values valid for the hook, or be null.
pub unsafe fn slice<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if ptr.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller's promise.
        unsafe { std::slice::from_raw_parts(ptr, len) }
    }
}

/// The bytes of an Envoy buffer, empty when it is null.
///
/// # Safety
/// `buf` must be Envoy's, valid for the current hook (as every buffer a hook receives is).
pub unsafe fn envoy_bytes<'a>(ptr: *const std::ffi::c_char, length: usize) -> &'a [u8] {
    // SAFETY: Envoy's buffers point at `length` readable bytes for the hook's duration.
    unsafe { slice(ptr.cast::<u8>(), length) }
}

/// The bytes of an [`EnvoyBuffer`] (see [`envoy_bytes`]).
///
/// # Safety
/// As [`envoy_bytes`].
pub unsafe fn buffer_bytes<'a>(buf: &EnvoyBuffer) -> &'a [u8] {
    // SAFETY: the caller's promise.
    unsafe { envoy_bytes(buf.ptr, buf.length) }
}

/// Headers of ours for Envoy to read during one call: they point into `headers`, which must
/// outlive the call.
fn module_headers(headers: &[(&str, &str)]) -> Vec<ModuleHeader> {
    headers
        .iter()
        .map(|(k, v)| ModuleHeader {
            key_ptr: k.as_ptr().cast(),
            key_length: k.len(),
            value_ptr: v.as_ptr().cast(),
            value_length: v.len(),
        })
        .collect()
}

/// One stream's filter on Envoy's side, during one of its hooks (on the stream's worker thread).
pub struct Stream(abi::FilterEnvoyPtr);

impl Stream {
    /// Wraps the stream pointer a hook received.
    ///
    /// # Safety
    /// `ptr` must be the `filter_envoy_ptr` of the running hook, and the value must not outlive
    /// it.
    pub unsafe fn new(ptr: abi::FilterEnvoyPtr) -> Self {
        Self(ptr)
    }

    /// The request's headers as Envoy holds them, lent until the next call on this stream (the
    /// exclusive borrow keeps the map unchanged meanwhile): names as [`filter_core::request::name`]
    /// reads them, raw values.
    pub fn request_headers(&mut self) -> Vec<(&str, &[u8])> {
        // SAFETY: a valid stream pointer (`Stream::new`); the header type is Envoy's enum.
        let size = unsafe {
            abi::envoy_dynamic_module_callback_http_get_headers_size(self.0, abi::REQUEST_HEADER)
        };
        let empty = EnvoyHeader {
            key_ptr: std::ptr::null(),
            key_length: 0,
            value_ptr: std::ptr::null(),
            value_length: 0,
        };
        let mut raw = vec![empty; size];
        // SAFETY: `raw` holds the `size` entries Envoy fills.
        let ok = unsafe {
            abi::envoy_dynamic_module_callback_http_get_headers(
                self.0,
                abi::REQUEST_HEADER,
                raw.as_mut_ptr(),
            )
        };
        if !ok {
            return Vec::new();
        }
        raw.iter()
            .map(|h| {
                // SAFETY: Envoy's header buffers stay valid and unchanged for this hook as long as
                // the map is not changed, which `&mut self` rules out while they are lent.
                let (name, value) = unsafe {
                    (
                        envoy_bytes(h.key_ptr, h.key_length),
                        envoy_bytes(h.value_ptr, h.value_length),
                    )
                };
                (filter_core::request::name(name), value)
            })
            .collect()
    }

    /// Adds a request header the request does not have: cheaper than [`Self::set_request_header`],
    /// which looks for the name first. Envoy adds no empty value: that one is set instead.
    pub fn add_request_header(&self, name: &str, value: &[u8]) {
        // SAFETY: a valid stream pointer; both buffers live through the call.
        let added = unsafe {
            abi::envoy_dynamic_module_callback_http_add_header(
                self.0,
                abi::REQUEST_HEADER,
                buffer(name.as_bytes()),
                buffer(value),
            )
        };
        if !added {
            self.set_request_header(name, Some(value));
        }
    }

    /// Sets a request header, or removes it (`None`).
    pub fn set_request_header(&self, name: &str, value: Option<&[u8]>) {
        let value = value.map_or(
            ModuleBuffer {
                ptr: std::ptr::null(),
                length: 0,
            },
            buffer,
        );
        // SAFETY: a valid stream pointer; both buffers live through the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_set_header(
                self.0,
                abi::REQUEST_HEADER,
                buffer(name.as_bytes()),
                value,
            );
        }
    }

    /// Answers the request locally (the hook then returns `StopIteration`).
    pub fn send_response(&self, status: u32, headers: &[(&str, &str)], body: &[u8], details: &str) {
        let mut raw = module_headers(headers);
        // SAFETY: a valid stream pointer; headers, body and details live through the call.
        unsafe {
            abi::envoy_dynamic_module_callback_http_send_response(
                self.0,
                status,
                raw.as_mut_ptr(),
                raw.len(),
                buffer(body),
                buffer(details.as_bytes()),
            );
        }
    }

    /// The index of the worker thread running this stream.
    pub fn worker_index(&self) -> u32 {
        // SAFETY: a valid stream pointer.
        unsafe { abi::envoy_dynamic_module_callback_http_filter_get_worker_index(self.0) }
    }

    /// Adds `n` to the counter `id` (defined by [`ConfigHandle::define`]).
    pub fn increment(&self, id: usize, n: u64) {
        // SAFETY: a valid stream pointer; no labels.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_increment_counter(
                self.0,
                id,
                std::ptr::null_mut(),
                0,
                n,
            );
        }
    }
}

/// What kind of metric to define.
#[derive(Debug, Clone, Copy)]
pub enum Metric {
    Counter,
    Gauge,
}

/// A filter configuration on Envoy's side, from `on_http_filter_config_new` until its
/// `on_http_filter_config_destroy`. Used on Envoy's main thread only (that is where the config
/// hooks, the scheduled events and the callout answers run).
#[derive(Debug, Clone, Copy)]
pub struct ConfigHandle(usize);

impl ConfigHandle {
    /// Wraps the config pointer `on_http_filter_config_new` received.
    ///
    /// # Safety
    /// `ptr` must be that pointer, and the handle used only until the config is destroyed, on
    /// Envoy's main thread.
    pub unsafe fn new(ptr: abi::ConfigEnvoyPtr) -> Self {
        Self(ptr as usize)
    }

    fn ptr(self) -> abi::ConfigEnvoyPtr {
        self.0 as *mut c_void
    }

    /// Defines a metric without labels (only during `on_http_filter_config_new`); its id.
    pub fn define(self, kind: Metric, name: &str) -> Option<usize> {
        let define = match kind {
            Metric::Counter => abi::envoy_dynamic_module_callback_http_filter_config_define_counter,
            Metric::Gauge => abi::envoy_dynamic_module_callback_http_filter_config_define_gauge,
        };
        let mut id = 0usize;
        // SAFETY: a valid config pointer (`ConfigHandle::new`); the name lives through the call.
        let result = unsafe {
            define(
                self.ptr(),
                buffer(name.as_bytes()),
                std::ptr::null_mut(),
                0,
                &mut id,
            )
        };
        (result == abi::METRICS_SUCCESS).then_some(id)
    }

    /// Adds `n` to a counter, from the main thread.
    pub fn increment(self, id: usize, n: u64) {
        // SAFETY: a valid config pointer; no labels.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_increment_counter(
                self.ptr(),
                id,
                std::ptr::null_mut(),
                0,
                n,
            );
        }
    }

    /// Sets a gauge, from the main thread.
    pub fn set_gauge(self, id: usize, value: u64) {
        // SAFETY: a valid config pointer; no labels.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_set_gauge(
                self.ptr(),
                id,
                std::ptr::null_mut(),
                0,
                value,
            );
        }
    }

    /// Sends a request to `cluster` (main thread only); its id, or Envoy's refusal code. The
    /// answer comes to `on_http_filter_config_http_callout_done` with that id.
    pub fn callout(
        self,
        cluster: &str,
        headers: &[(&str, &str)],
        timeout_ms: u64,
    ) -> Result<u64, u32> {
        let mut raw = module_headers(headers);
        let mut id = 0u64;
        // SAFETY: a valid config pointer on the main thread; everything lent lives through the call.
        let result = unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_http_callout(
                self.ptr(),
                &mut id,
                buffer(cluster.as_bytes()),
                raw.as_mut_ptr(),
                raw.len(),
                buffer(&[]),
                timeout_ms,
            )
        };
        if result == abi::CALLOUT_INIT_SUCCESS {
            Ok(id)
        } else {
            Err(result)
        }
    }

    /// A scheduler of this config: [`Scheduler::commit`] from any thread makes Envoy run
    /// `on_http_filter_config_scheduled` on its main thread.
    pub fn scheduler(self) -> Option<Scheduler> {
        // SAFETY: a valid config pointer, during a config hook on the main thread.
        let ptr = unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_scheduler_new(self.ptr())
        };
        (!ptr.is_null()).then_some(Scheduler(ptr as usize))
    }
}

/// A config scheduler, deleted on drop (drop it before its config is destroyed, and only once
/// no thread commits to it any more).
#[derive(Debug)]
pub struct Scheduler(usize);

impl Scheduler {
    /// Asks Envoy to run `on_http_filter_config_scheduled` with `event` on its main thread.
    pub fn commit(&self, event: u64) {
        // SAFETY: the scheduler lives until dropped; commit may be called from any thread.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_scheduler_commit(
                self.0 as *mut c_void,
                event,
            );
        }
    }
}

impl Drop for Scheduler {
    fn drop(&mut self) {
        // SAFETY: created by `scheduler_new` and deleted once, here.
        unsafe {
            abi::envoy_dynamic_module_callback_http_filter_config_scheduler_delete(
                self.0 as *mut c_void,
            )
        }
    }
}

/// Log levels the filter uses.
#[derive(Debug, Clone, Copy)]
pub enum Level {
    Debug,
    Warn,
    Critical,
}

/// Logs to Envoy's `dynamic_modules` logger.
pub fn log(level: Level, message: &str) {
    let level = match level {
        Level::Debug => abi::LOG_DEBUG,
        Level::Warn => abi::LOG_WARN,
        Level::Critical => abi::LOG_CRITICAL,
    };
    // SAFETY: the message lives through the call; any thread may log.
    unsafe { abi::envoy_dynamic_module_callback_log(level, buffer(message.as_bytes())) }
}

/// True if Envoy logs at debug level (so a debug message is worth building).
pub fn debug_enabled() -> bool {
    // SAFETY: no arguments; any thread.
    unsafe { abi::envoy_dynamic_module_callback_log_enabled(abi::LOG_DEBUG) }
}

/// Envoy's worker threads (main thread only).
pub fn concurrency() -> u32 {
    // SAFETY: no arguments; called from `on_http_filter_config_new`, on the main thread.
    unsafe { abi::envoy_dynamic_module_callback_get_concurrency() }
}

/// True under `envoy --mode validate`, which loads the module and makes its configs, and runs
/// nothing (main thread only).
pub fn validation_mode() -> bool {
    // SAFETY: no arguments; called from `on_http_filter_config_new`, on the main thread.
    unsafe { abi::envoy_dynamic_module_callback_is_validation_mode() }
}
