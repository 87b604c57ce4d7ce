//! Bearer token validation for Envoy.
//!
//! The crate is a thin proxy-wasm adapter ([`envoy`], feature `envoy`, built for
//! `wasm32-unknown-unknown`) over logic that is plain Rust and tested natively:
//! [`config`] parses and validates the plugin configuration, [`edge`] checks and applies what the
//! issuer's edge feed says (keys and revocations), and [`decision::decide`] turns a request's path
//! and headers, the time, the configuration and that state into a [`decision::Decision`].
//! The configuration reference is `docs/filter.md`.
//!
//! Each module uses only the ones after its arrow, so the graph has no cycle:
//!
//! - [`envoy`] → `request`, `decision`, `edge`, `config` (the adapter: host calls only);
//! - [`request`] → `decision`, `edge`, `config`, `cache` (one request's headers in, what to tell
//!   Envoy out: what both adapters share);
//! - [`decision`] → `edge`, `config`, `cache`, `bearer` (what to do with one request);
//! - [`edge`] → `config`, `cache` (the feed's answers, the state they make, the poll schedule);
//! - [`config`] → `cache` (its default size only);
//! - [`cache`] and `bearer`: leaves.
//!
//! `native` → `request`, `decision`, `edge`, `config` (the dynamic-module adapter: host calls
//! only).
//!
//! `bench` (benchmark-only modules, never shipped) → `envoy`, `decision`.
//!
//! With feature `native` the crate is also the same filter as a native Envoy dynamic module
//! (`native`, built as `libmms_auth.so` by `cargo xtask dist`): another thin adapter over the
//! same `decision`, `edge` and `config`.
//!
//! With feature `js` the crate is instead the browser/Node module ([`js`]): token inspection for
//! JavaScript through wasm-bindgen, built by its own cargo invocation so it never reaches Envoy.
#![warn(missing_docs)]

mod bearer;
pub mod cache;
pub mod config;
pub mod decision;
pub mod edge;
pub mod request;

#[cfg(feature = "envoy")]
mod envoy;

#[cfg(feature = "js")]
pub mod js;

#[cfg(feature = "native")]
mod native;

#[cfg(any(
    feature = "passthrough",
    feature = "ablate-read",
    feature = "ablate-decide"
))]
mod bench;
