//! Benchmark-only Envoy modules, never shipped: `cargo xtask bench` builds each with its feature
//! and measures it beside the shipped module (`BENCHMARKS.md`). None of this is compiled into
//! the shipped module (no feature), whose request path holds no benchmark code.
//!
//! - [`passthrough`] (features `passthrough` and `reference`): the floor of the V8 runtime, and
//!   the least work of any header-based filter;
//! - [`ablation`] (features `ablate-read` and `ablate-decide`): the shipped filter with its
//!   request path cut short after reading the headers, or after deciding, to measure what each
//!   step costs.

#[cfg(any(feature = "ablate-read", feature = "ablate-decide"))]
mod ablation;
#[cfg(feature = "passthrough")]
mod passthrough;
