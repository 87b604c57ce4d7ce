//! Bearer token validation for Envoy.
//!
//! The crate is a thin proxy-wasm adapter ([`envoy`], feature `envoy`, built for
//! `wasm32-unknown-unknown`) over logic that is plain Rust and tested natively:
//! [`config`] parses and validates the plugin configuration, [`edge`] checks and applies what the
//! issuer's edge feed says (keys and revocations), and [`decision::decide`] turns a request's path
//! and headers, the time, the configuration and that state into a [`decision::Decision`].
//! The configuration reference is `docs/filter.md`.
//!
//! With feature `js` the crate is instead the browser/Node module ([`js`]): token inspection for
//! JavaScript through wasm-bindgen, built by its own cargo invocation so it never reaches Envoy.
#![warn(missing_docs)]

mod bearer;
pub mod cache;
pub mod config;
pub mod decision;
pub mod edge;

#[cfg(feature = "envoy")]
mod envoy;

#[cfg(feature = "js")]
pub mod js;

#[cfg(feature = "passthrough")]
mod passthrough;
