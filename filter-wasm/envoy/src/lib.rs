//! The filter as a proxy-wasm module for Envoy (`filter.wasm`, built for `wasm32-unknown-unknown`
//! by `cargo xtask dist`): a thin adapter ([`adapter`]) over the pure core, `filter-core`, which
//! decides every request and runs edge sync. This crate only makes the host calls.
//!
//! With a benchmark feature it is instead one of the benchmark-only modules of `bench` (never
//! shipped): `passthrough` and `reference` replace the filter, `ablate-read` and `ablate-decide`
//! cut its request path short.

#[cfg(not(feature = "passthrough"))]
mod adapter;
#[cfg(not(feature = "passthrough"))]
mod host_crypto;
#[cfg(not(feature = "passthrough"))]
mod replays;

#[cfg(any(
    feature = "passthrough",
    feature = "ablate-read",
    feature = "ablate-decide"
))]
mod bench;
