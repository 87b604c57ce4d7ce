//! End-to-end tests of the whole product, one binary with a module per topic: each test starts its
//! own stack (real issuer, real Envoy loading the real `filter.wasm`, the media upstream) on free
//! loopback ports in a temp dir, through the harness in `tests/src/`.

mod envoy;
mod hostile;
mod js;
mod probe;
