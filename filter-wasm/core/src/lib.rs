//! The Envoy filter's pure core: everything the filter decides, with no host type in it. The
//! adapters beside this crate (`filter-wasm/envoy/`, the proxy-wasm module; `filter-wasm/native/`,
//! the Envoy dynamic module) read what Envoy gives them, hand it here, and carry out what comes
//! back; the core is plain Rust, tested and fuzzed natively.
//!
//! [`config`] parses and validates the plugin configuration, [`edge`] checks and applies what the
//! issuer's edge feed says (keys and revocations), [`decision::decide`] turns a request's path and
//! headers, the time, the configuration and that state into a [`decision::Decision`], and
//! [`sync`] runs edge sync's steps over an adapter's [`sync::EdgeHost`]. The configuration
//! reference is `docs/filter.md`.
//!
//! Each module uses only the ones after its arrow, so the graph has no cycle:
//!
//! - [`sync`] → `edge`, `config` (edge sync's steps: count, log, poll, answer, over a host trait);
//! - [`request`] → `decision`, `dpop`, `edge`, `config`, `cache` (one request's headers in, what
//!   to tell Envoy out: what both adapters share);
//! - [`decision`] → `dpop`, `edge`, `config`, `cache`, `bearer`, `delegation`, `encode` (what to
//!   do with one request);
//! - [`dpop`]: a leaf (its settings, the proof a bound token needs, the memory of used proofs);
//! - [`edge`] → `config`, `cache` (the feed's answers, the state they make, the poll schedule);
//! - [`config`] → `cache` (its default size only), `dpop` and `delegation` (their blocks'
//!   validation);
//! - [`delegation`]: a leaf (the rules for delegated tokens by path);
//! - [`cache`], `bearer` and `encode` (how identity header values are written): leaves.
//!
//! `cargo xtask tidy` checks the graph has no cycle, and that this crate has no `unsafe` and names
//! no proxy-wasm or Envoy ABI type. Nothing in it panics on purpose (a panic in the Wasm filter
//! would stop its VM): `unwrap`, `expect` and `panic!` are denied outside tests.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![warn(missing_docs)]

mod bearer;
pub mod cache;
pub mod config;
pub mod decision;
pub mod delegation;
pub mod dpop;
pub mod edge;
mod encode;
pub mod request;
pub mod sync;
