//! Running the cargo-fuzz targets (`fuzz/fuzz_targets/`), each for a bounded time.

use crate::install::ensure_cargo_fuzz;
use crate::util::{root, run};
use anyhow::Result;
use std::process::Command;

/// The cargo-fuzz targets (`fuzz/fuzz_targets/`).
pub const FUZZ_TARGETS: [&str; 13] = [
    "edge_feed",
    "token_decode",
    "token_roundtrip",
    "form",
    "basic",
    "claims",
    "filter_decide",
    "filter_request",
    "dpop_proof",
    "software_statement",
    "dpop_der",
    "token_chain",
    "admin_body",
];

/// Builds every fuzz target (libFuzzer with AddressSanitizer, nightly) in one cargo build, as
/// `cargo fuzz run` builds them, so a run after it starts at once.
pub fn build_all() -> Result<()> {
    run(cargo_fuzz()?.arg("build"))
}

/// Runs every fuzz target for `seconds`, one after the other (building what is not built).
pub fn run_all(seconds: u64) -> Result<()> {
    let limit = format!("-max_total_time={seconds}");
    for target in FUZZ_TARGETS {
        run(cargo_fuzz()?.args(["run", target, "--", &limit]))?;
    }
    Ok(())
}

/// `cargo fuzz` on the nightly toolchain, cargo-fuzz installed if missing (its check, a
/// `stat` and a `rustc --version`, is cheap beside a fuzz run).
fn cargo_fuzz() -> Result<Command> {
    let bin = ensure_cargo_fuzz()?;
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))?;
    let mut c = Command::new("rustup");
    c.args(["run", "nightly", "cargo", "fuzz"])
        .env("PATH", &path)
        .current_dir(root());
    Ok(c)
}
