//! The native filter (the crate `filter-native`, `filter-wasm/native/`): built as a shared library
//! for the machine's Envoy, `libmms_auth.so`, and checked with clippy as it is built.

use crate::util::{cargo, root, run};
use anyhow::Result;
use std::path::PathBuf;
use std::process::Command;

/// The crate of the native filter.
const PACKAGE: &str = "filter-native";

/// Its own target dir, so the shipped library is never built with another build's features.
const TARGET_DIR: &str = "target/native";

/// The benchmark ablations' target dir.
const BENCH_TARGET_DIR: &str = "target/native-bench";

/// `cargo CMD -p PACKAGE [--features FEATURES] --target-dir TARGET_DIR`, for the host (the Wasm
/// builds add their target, `crate::wasm`); no features for `""`.
pub fn crate_command(cmd: &str, package: &str, features: &str, target_dir: &str) -> Command {
    let mut c = cargo();
    c.args([cmd, "-p", package, "--target-dir", target_dir]);
    if !features.is_empty() {
        c.args(["--features", features]);
    }
    c
}

/// Clippy on the native adapter, with its tests.
pub fn clippy_native_module() -> Result<()> {
    // In the host packages' lint target dir: clippy only checks, and the dependencies are
    // checked there already.
    run(
        crate_command("clippy", PACKAGE, "", crate::test::LINT_TARGET_DIR).args([
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    run(crate_command(
        "clippy",
        PACKAGE,
        "native-decide",
        crate::test::LINT_TARGET_DIR,
    )
    .args(["--", "-D", "warnings"]))
}

/// Builds the native filter (release profile) and returns the path of `libmms_auth.so`, the
/// name Envoy loads the module `mms_auth` by.
pub fn build_native_module() -> Result<PathBuf> {
    build_as("", TARGET_DIR, "mms_auth")
}

/// Builds a benchmark ablation of the native filter (feature `native-empty`, `native-read` or
/// `native-decide`) and returns its library, named for the module `mms_auth_` + the ablation
/// (`libmms_auth_empty.so` for `native-empty`), so it loads beside the shipped one.
pub fn build_native_variant(feature: &str) -> Result<PathBuf> {
    let module = feature.replacen("native-", "mms_auth_", 1);
    build_as(feature, BENCH_TARGET_DIR, &module)
}

/// Builds the crate with `features` (release profile) in `target_dir` and copies the library to
/// `lib{module}.so` there, the file Envoy loads the dynamic module `module` from.
fn build_as(features: &str, target_dir: &str, module: &str) -> Result<PathBuf> {
    run(crate_command("build", PACKAGE, features, target_dir).arg("--release"))?;
    let dir = root().join(target_dir);
    let out = dir.join(format!("lib{module}.so"));
    std::fs::copy(dir.join("release/libfilter_native.so"), &out)?;
    Ok(out)
}
