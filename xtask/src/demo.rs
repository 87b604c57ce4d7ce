//! `cargo xtask demo [--postgres] [--native]`: the full stack on this machine (issuer, Envoy with
//! the filter and TLS, a media upstream) with a demo client and user, and a curl walk-through; with
//! `--postgres`, two issuers on a throwaway PostgreSQL; with `--native`, Envoy runs the native
//! filter (`envoy/native.yaml`) instead of the Wasm one. Ctrl-C stops it.

use crate::util::{cargo, root, run};
use crate::{install, native, wasm};
use anyhow::{bail, Result};
use std::process::{Command, Stdio};

pub fn demo(postgres: bool, native: bool) -> Result<()> {
    install::ensure_wasm_target()?;
    let wasm = wasm::build_envoy_module()?;
    let native = if native {
        Some(native::build_native_module()?)
    } else {
        None
    };
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
    if let Some(lib) = &native {
        stack
            .env("MMS_FILTER", "native")
            .env("MMS_NATIVE_MODULE", lib);
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
