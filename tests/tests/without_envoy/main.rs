//! End-to-end tests that start no Envoy: the issuer's own connections, the issuer through
//! PgBouncer, the OpenLDAP `[directory]` table of the docs, and the JS module in Node and a
//! headless Chromium. Each starts its own real parts on free loopback ports in a temp dir,
//! through the harness in `tests/src/`. The harness refuses to start Envoy from this binary, so
//! that no test here escapes the run with the native filter.

mod connections;
mod directory_doc;
mod js;
mod js_dpop;
mod pgbouncer;
