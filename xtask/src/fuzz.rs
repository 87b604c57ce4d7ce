//! Running the cargo-fuzz targets (`fuzz/fuzz_targets/`), each for a bounded time.

use crate::install::ensure_cargo_fuzz;
use crate::util::{root, run};
use anyhow::Result;
use std::process::Command;

/// The cargo-fuzz targets (`fuzz/fuzz_targets/`).
pub const FUZZ_TARGETS: [&str; 11] = [
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
];

/// Builds every fuzz target (libFuzzer with AddressSanitizer, nightly) in one cargo build, as
/// `cargo fuzz run` builds them, so a run after it starts at once.
pub fn build_all() -> Result<()> {
    run(&mut cargo_fuzz(&["build"])?)
}

/// Runs every fuzz target for `seconds`, one after the other (building what is not built).
pub fn run_all(seconds: u64) -> Result<()> {
    for target in FUZZ_TARGETS {
        run(&mut cargo_fuzz(&[
            "run",
            target,
            "--",
            &format!("-max_total_time={seconds}"),
        ])?)?;
    }
    Ok(())
}

/// `cargo fuzz ARGS` on the nightly toolchain, cargo-fuzz installed if missing.
fn cargo_fuzz(args: &[&str]) -> Result<Command> {
    let bin = ensure_cargo_fuzz()?;
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))?;
    let mut c = Command::new("rustup");
    c.args(["run", "nightly", "cargo", "fuzz"])
        .args(args)
        .env("PATH", &path)
        .current_dir(root());
    Ok(c)
}
