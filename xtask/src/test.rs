//! `cargo xtask test`: every check and test (what `.ci/run` runs), installing what it needs:
//! fmt, tidy, clippy (native, wasm32, and each wasm module as it is built), the Envoy module's
//! checks, every package's tests against real tools (the directory servers included), every
//! end-to-end test that runs Envoy again with the native filter, the shipped Prometheus rules
//! (`promtool check rules` and `promtool test rules`, [`rules`]), the demo walked through
//! (embedded store and PostgreSQL), the release artifacts of `cargo xtask dist` built and checked
//! (`xtask/src/dist/check.rs`: the image run with podman, the package installed, run and purged,
//! the checksums, reproducibility), and a bounded run of every fuzz target (`FUZZ_SECONDS`,
//! default 30 each).

use crate::util::{cargo, root, run};
use crate::{dist, fuzz, install, native, rules, tidy, wasm};
use anyhow::Result;
use std::process::Command;

/// Packages checked natively (the filter's adapters, `filter-envoy`, `filter-native` and
/// `filter-js`, are checked as each is built: `crate::wasm`, `crate::native`).
const PACKAGES: [&str; 5] = ["mms-token", "issuer", "filter-core", "e2e", "xtask"];

/// Tidy and clippy: natively, on wasm32, on each wasm module and on the native module.
fn lint() -> Result<()> {
    tidy::tidy()?;
    for p in PACKAGES {
        run(cargo().args(["clippy", "-p", p, "--all-targets", "--", "-D", "warnings"]))?;
    }
    // The token crate stays wasm-friendly: the Envoy module and the JS module are built on it.
    run(cargo().args([
        "clippy",
        "-p",
        "mms-token",
        "--target",
        "wasm32-unknown-unknown",
        "--",
        "-D",
        "warnings",
    ]))?;
    // And with `ring`, the native filter's ES256 verifier.
    run(cargo().args([
        "clippy",
        "-p",
        "mms-token",
        "--features",
        "ring",
        "--",
        "-D",
        "warnings",
    ]))?;
    wasm::clippy_envoy_module()?;
    wasm::clippy_js_module()?;
    native::clippy_native_module()?;
    Ok(())
}

/// The token crate's DPoP tests with `ring`, the native filter's ES256 verifier.
const RING_TESTS: [&str; 7] = [
    "test",
    "-p",
    "mms-token",
    "--features",
    "ring,sign",
    "--lib",
    "dpop",
];

pub fn test() -> Result<()> {
    install::ensure_wasm_target()?;
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(cargo().args(["fmt", "--manifest-path", "fuzz/Cargo.toml", "--", "--check"]))?;
    lint()?;
    let wasm = wasm::build_envoy_module()?;
    wasm::check_envoy_module(&wasm)?;
    let envoy = install::ensure_envoy()?;
    let js = root().join("target/js-pkg");
    wasm::build_js_packages(&js)?;
    install::check_node()?;
    let chromium = install::ensure_chromium()?;
    let pg_bin = install::ensure_postgres()?;
    install::ensure_directories()?;
    let pgbouncer = install::ensure_pgbouncer()?;
    let native = native::build_native_module()?;
    let prometheus = install::ensure_prometheus()?;
    rules::check_rules(&prometheus)?;
    run(cargo().args(["build", "-p", "issuer", "-p", "e2e"]))?;
    let with_tools = |c: &mut Command| {
        c.env("MMS_ENVOY", &envoy)
            .env("MMS_FILTER_WASM", &wasm)
            .env("MMS_JS_NODE", js.join("node"))
            .env("MMS_JS_WEB", js.join("web"))
            .env("MMS_CHROMIUM", &chromium)
            .env("MMS_PG_BIN", &pg_bin)
            .env("MMS_PGBOUNCER", &pgbouncer)
            .env("MMS_NATIVE_MODULE", &native)
            .env("MMS_PROMETHEUS", &prometheus);
    };
    let mut validate = Command::new(root().join("target/debug/stack"));
    validate.arg("validate");
    with_tools(&mut validate);
    run(&mut validate)?;
    for p in PACKAGES {
        let mut c = cargo();
        c.args(["test", "-p", p]);
        with_tools(&mut c);
        run(&mut c)?;
    }
    // The token crate's DPoP checks again with `ring` verifying ES256, as in the native filter
    // (`-p mms-token` alone above builds it without).
    run(cargo().args(RING_TESTS))?;
    // The tests through Envoy again, with the native filter in Envoy instead of the Wasm one.
    let mut again = cargo();
    again.args(["test", "-p", "e2e", "--test", "through_envoy"]);
    again.env("MMS_FILTER", "native");
    with_tools(&mut again);
    run(&mut again)?;
    // The demo as a new user runs it, on free ports, walked through automatically; and as
    // `cargo xtask demo --postgres` (two issuers on a throwaway PostgreSQL) and `--native` run it.
    for (postgres, native) in [(false, false), (true, false), (false, true)] {
        let smoke_dir = root().join("target/demo-smoke");
        if smoke_dir.exists() {
            std::fs::remove_dir_all(&smoke_dir)?;
        }
        let mut smoke = Command::new(root().join("target/debug/stack"));
        smoke.arg("smoke").arg("--dir").arg(&smoke_dir);
        if postgres {
            smoke.arg("--postgres");
        }
        with_tools(&mut smoke);
        if native {
            smoke.env("MMS_FILTER", "native");
        }
        run(&mut smoke)?;
    }
    // The release artifacts, built as `cargo xtask dist` builds them and checked with podman,
    // dpkg, systemd-analyze and sha256sum.
    dist::check::build_and_check_all(false)?;
    let seconds = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    fuzz::fuzz_all(seconds)?;
    eprintln!("\nall checks and tests passed");
    Ok(())
}
