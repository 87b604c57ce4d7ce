//! Running the cargo-fuzz targets (`fuzz/fuzz_targets/`), each for a bounded time.

use crate::install::ensure_cargo_fuzz;
use crate::util::{root, run};
use anyhow::Result;
use std::process::Command;

/// The cargo-fuzz targets (`fuzz/fuzz_targets/`).
pub const FUZZ_TARGETS: [&str; 10] = [
    "edge_feed",
    "token_decode",
    "token_roundtrip",
    "form",
    "basic",
    "claims",
    "filter_decide",
    "filter_request",
    "dpop_proof",
    "dpop_der",
];

/// Runs every fuzz target for `seconds` (libFuzzer with AddressSanitizer, nightly).
pub fn fuzz_all(seconds: u64) -> Result<()> {
    let bin = ensure_cargo_fuzz()?;
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))?;
    for target in FUZZ_TARGETS {
        run(Command::new("rustup")
            .args([
                "run",
                "nightly",
                "cargo",
                "fuzz",
                "run",
                target,
                "--",
                &format!("-max_total_time={seconds}"),
            ])
            .env("PATH", &path)
            .current_dir(root()))?;
    }
    Ok(())
}
