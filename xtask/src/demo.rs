//! `cargo xtask demo [--postgres]`: the full stack on this machine (issuer, Envoy with the filter
//! and TLS, a media upstream) with a demo client and user, and a curl walk-through; with
//! `--postgres`, two issuers on a throwaway PostgreSQL. Ctrl-C stops it.

use crate::util::{cargo, root, run};
use crate::{install, wasm};
use anyhow::{bail, Result};
use std::process::{Command, Stdio};

pub fn demo(postgres: bool) -> Result<()> {
    install::ensure_wasm_target()?;
    let wasm = wasm::build_envoy_module()?;
    let envoy = install::ensure_envoy()?;
    let pg_bin = if postgres {
        Some(install::ensure_postgres()?)
    } else {
        None
    };
    run(cargo().args(["build", "-p", "issuer", "-p", "e2e"]))?;
    // Ctrl-C reaches every process of the terminal; xtask waits for the stack to stop its parts.
    ctrlc::set_handler(|| {})?;
    let mut stack = Command::new(root().join("target/debug/stack"));
    stack.arg("demo");
    if let Some(bin) = &pg_bin {
        stack.arg("--postgres").env("MMS_PG_BIN", bin);
    }
    let status = stack
        .env("MMS_ENVOY", &envoy)
        .env("MMS_FILTER_WASM", &wasm)
        .stdin(Stdio::null())
        .status()?;
    if !status.success() && status.code().is_some() {
        bail!("the demo failed ({status})");
    }
    Ok(())
}
