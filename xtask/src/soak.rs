//! `cargo xtask soak [--minutes N]`: a bounded soak of the full stack (not part of `test`),
//! written to docs/soak.md.

use crate::util::{cargo, root, run, utc_now, write_section};
use crate::{install, wasm};
use anyhow::{bail, Result};
use std::process::{Command, Stdio};

/// A bounded soak of the full stack (not part of `test`); writes docs/soak.md.
pub fn soak(minutes: u64) -> Result<()> {
    install::ensure_wasm_target()?;
    let wasm = wasm::build_envoy_module()?;
    let envoy = install::ensure_envoy()?;
    run(cargo().args(["build", "--release", "-p", "issuer", "-p", "e2e"]))?;
    let dir = root().join("target/soak");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let command = format!("cargo xtask soak --minutes {minutes}");
    let out = Command::new(root().join("target/release/stack"))
        .args(["soak", "--minutes", &minutes.to_string(), "--dir"])
        .arg(&dir)
        .env("MMS_ENVOY", &envoy)
        .env("MMS_FILTER_WASM", &wasm)
        .env("MMS_ISSUER", root().join("target/release/issuer"))
        .stderr(Stdio::inherit())
        .output()?;
    let report = String::from_utf8_lossy(&out.stdout);
    if report.trim().is_empty() {
        bail!("the soak ended without a report");
    }
    let section = format!("Command: `{command}`, run on {}.\n\n{report}", utc_now());
    write_section("docs/soak.md", "soak", &section)?;
    eprintln!("results written to docs/soak.md");
    if !out.status.success() {
        bail!("the soak failed:\n{report}");
    }
    Ok(())
}
