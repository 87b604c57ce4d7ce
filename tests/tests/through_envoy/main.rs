//! End-to-end tests through a real Envoy: each test starts its own stack (real issuer, real Envoy
//! loading the filter, the media upstream) on free loopback ports in a temp dir, through the
//! harness in `tests/src/`. `cargo xtask test` runs this binary twice, once with each filter
//! (`MMS_FILTER`); the tests that start no Envoy are in `tests/without_envoy/`.

mod console;
mod directory;
mod directory_ad;
mod directory_failover;
mod directory_probe;
mod dpop;
mod dpop_browser;
mod dpop_issuer;
mod dpop_origin;
mod dpop_replay;
mod edge;
mod edge_outage;
mod edges_report;
mod envoy;
mod failover;
mod feed_wait;
mod hostile;
mod hot_restart;
mod issuer_socket;
mod multi_issuer;
mod prometheus;
mod revocation;
mod secrets;
mod sign_in;
mod store_move;
mod token_exchange;
mod vendor_clients;

use e2e::{Options, Stack, Tools};

/// A stack of its own for one test, in a temp dir (kept until the returned guard drops), the
/// issuer run with these extra arguments. `None` skips the test outside CI when a tool is missing.
async fn stack(issuer_args: &[&str]) -> (tempfile::TempDir, Stack) {
    let tools = Tools::for_test();
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        issuer_args: issuer_args.iter().map(|s| s.to_string()).collect(),
        ..Options::default()
    };
    let stack = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    (tmp, stack)
}
