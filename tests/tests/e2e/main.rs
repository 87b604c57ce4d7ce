//! End-to-end tests of the whole product, one binary with a module per topic: each test starts its
//! own stack (real issuer, real Envoy loading the real `filter.wasm`, the media upstream) on free
//! loopback ports in a temp dir, through the harness in `tests/src/`.

mod connections;
mod directory;
mod directory_ad;
mod directory_harness;
mod directory_probe;
mod edge;
mod edge_outage;
mod edges_report;
mod envoy;
mod failover;
mod hostile;
mod hot_restart;
mod js;
mod multi_issuer;
mod pg;
mod pgbouncer;
mod probe;
mod probe2;
mod probe3;
mod revoked_and_restored;
mod store_move;

use e2e::{Options, Stack, Tools};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Whether something accepts connections on 127.0.0.1:`port`.
pub(crate) fn port_open(port: u16) -> bool {
    let addr: SocketAddr = ([127, 0, 0, 1], port).into();
    TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

/// Whether the process runs (a zombie left for a reaper counts as ended).
pub(crate) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("State:"))
            .is_some_and(|state| !state.trim_start().starts_with('Z'))
    })
}

/// A stack of its own for one test, in a temp dir (kept until the returned guard drops), the
/// issuer run with these extra arguments. `None` skips the test outside CI when a tool is missing.
async fn stack(issuer_args: &[&str]) -> Option<(tempfile::TempDir, Stack)> {
    let tools = Tools::for_test()?;
    let tmp = tempfile::tempdir().unwrap();
    let opts = Options {
        issuer_args: issuer_args.iter().map(|s| s.to_string()).collect(),
        ..Options::default()
    };
    let stack = Stack::start(tmp.path(), &tools, &opts).await.unwrap();
    Some((tmp, stack))
}
