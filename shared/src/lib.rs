//! Token format, key ring and token-endpoint request parsing shared by the issuer, the Envoy filter
//! and the browser/Node module.
//!
//! The crate is pure: no I/O, no clock and no random number generator of its own. Time and
//! randomness are passed in, so it builds for `wasm32-unknown-unknown` and every decision in it is
//! a function of its arguments. The token format is specified in `docs/token-format.md`.
//!
//! Untrusted input becomes a trusted value only through [`token::verify`]: the only way to obtain a
//! [`token::VerifiedToken`] is a successful HMAC check under a key of the [`key::KeyRing`].
//!
//! Nothing in it panics on purpose: `unwrap`, `expect` and `panic!` are denied outside tests.
#![forbid(unsafe_code)]
#![deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![warn(missing_docs)]

pub mod basic;
pub mod claims;
pub mod dpop;
pub mod edge_feed;
pub mod error;
pub mod grant;
pub mod key;
pub mod revocation;
pub mod rules;
pub mod time;
pub mod token;

pub use error::{ErrorCode, VerifyError};
pub use key::{Key, KeyRing};
pub use token::{Identity, TokenBody, VerifiedToken};
