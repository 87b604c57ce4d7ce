//! The filter as an Envoy dynamic module (`envoy.filters.http.dynamic_modules`): a native shared
//! library, `libmms_auth.so`, that Envoy loads by the module name `mms_auth`. Same configuration
//! JSON, same decisions, token cache and edge sync (all of them the pure core's, `filter-core`),
//! same counter names as the Wasm filter (`filter-wasm/envoy/`); only the adapter differs.
//!
//! - [`abi`]: the few types and callbacks of Envoy's C ABI the filter uses, declared here;
//! - [`host`]: the one safe wrapper around every `unsafe` callback;
//! - [`filter`]: the configuration, its state, and what a request and a tick do;
//! - [`hooks`]: the functions Envoy calls, each catching a panic;
//! - `ablation`: the bench's ablations of the request path (features `native-*`, never shipped).
//!
//! `docs/deploy-envoy.md` ("Wasm or native") says when to choose it and which Envoy it runs on.

mod abi;
#[cfg(feature = "native-ablation")]
mod ablation;
mod filter;
mod hooks;
mod host;
