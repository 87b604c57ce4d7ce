//! `cargo xtask test`: every check and test (what `.ci/run` runs), installing what it needs:
//! fmt, tidy, clippy (native, wasm32, each module), the Envoy module's checks, every package's
//! tests against real tools (the directory servers included), every end-to-end test that runs
//! Envoy again with the native filter, the shipped Prometheus rules (`promtool check rules` and
//! `promtool test rules`, [`rules`]), the demo walked through (embedded store and PostgreSQL),
//! the release artifacts of `cargo xtask dist` built and checked (`xtask/src/dist/check.rs`: the
//! image run with podman, the package installed, run and purged, the checksums,
//! reproducibility), and a bounded run of every fuzz target (`FUZZ_SECONDS`, default 10 each;
//! `cargo xtask fuzz` runs longer).
//!
//! What waits runs beside what computes: the tools that only download (Envoy, Chromium,
//! PostgreSQL, the directory servers, PgBouncer, Prometheus, podman) install on a thread of their
//! own while the compiler builds the modules and the test binaries; the tests with the Wasm
//! filter and those with the native filter run side by side, and the compiling no test needs
//! (clippy, the release issuer, the fuzz targets) runs beside them at the lowest CPU priority
//! ([`crate::beside`]); the fuzz targets run beside `dist`'s checks. Each artifact is built once.
//! The phases and their wall times are printed at the end ([`Phases`]).

use crate::beside::{Beside, Job};
use crate::phases::Phases;
use crate::util::{cargo, root, run};
use crate::{dist, fuzz, install, native, rules, tidy, wasm};
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// Packages checked natively (the filter's adapters, `filter-envoy`, `filter-native` and
/// `filter-js`, are checked as each is built: `crate::wasm`, `crate::native`).
const PACKAGES: [&str; 5] = ["mms-token", "issuer", "filter-core", "e2e", "xtask"];

/// The target dir of the host lints and of the token crate's tests with `ring`: they run beside
/// the tests ([`crate::beside`]), and a cargo holding `target/debug`'s lock would make the tests'
/// own cargo wait.
pub const LINT_TARGET_DIR: &str = "target/lint";

/// Clippy: natively, on wasm32, on each wasm module and on the native module.
fn lint() -> Result<()> {
    // One check of every package, their features unified once.
    let mut all = cargo();
    all.args(["clippy", "--target-dir", LINT_TARGET_DIR]);
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
        "--target-dir",
        LINT_TARGET_DIR,
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
const RING_TESTS: [&str; 9] = [
    "test",
    "-p",
    "mms-token",
    "--features",
    "ring,sign",
    "--target-dir",
    LINT_TARGET_DIR,
    "--lib",
    "dpop",
];

/// The compiling no test waits for, in two lanes beside the tests ([`crate::beside`]), each in
/// target dirs the other does not lock: the lints and the token crate's tests with `ring` in
/// [`LINT_TARGET_DIR`], the fuzz targets and the release issuer in their own.
const BESIDE_THE_TESTS: [&[Job]; 2] = [
    &[
        Job {
            name: "lints (beside the tests)",
            run: lint,
        },
        Job {
            name: "token crate's DPoP tests with ring (beside the tests)",
            run: ring_tests,
        },
    ],
    &[
        Job {
            name: "fuzz targets built (beside the tests)",
            run: fuzz::build_all,
        },
        Job {
            name: "static release issuer for dist (beside the tests)",
            run: static_issuer,
        },
    ],
];

fn static_issuer() -> Result<()> {
    dist::release::build_static_issuer().map(drop)
}

fn ring_tests() -> Result<()> {
    run(cargo().args(RING_TESTS))
}

/// The tools the tests run, installed beside the compiler ([`install_tools`]).
struct Tools {
    envoy: PathBuf,
    chromium: PathBuf,
    pg_bin: PathBuf,
    pgbouncer: PathBuf,
    prometheus: PathBuf,
}

/// Installs what only downloads and unpacks (PyPI, Debian, rustup), so it runs on a thread of
/// its own while the compiler uses the cores.
fn install_tools() -> Result<Tools> {
    // First what the modules phase needs, so that it never waits on this thread's apt.
    install::ensure_wasm_opt()?;
    install::check_node()?;
    let envoy = install::ensure_envoy()?;
    let chromium = install::ensure_chromium()?;
    install::ensure_console_tests()?;
    let pg_bin = install::ensure_postgres()?;
    install::ensure_directories()?;
    let pgbouncer = install::ensure_pgbouncer()?;
    let prometheus = install::ensure_prometheus()?;
    // What the release build beside the tests and `dist`'s checks need.
    install::ensure_musl_target()?;
    install::ensure_musl_gcc()?;
    install::ensure_podman()?;
    install::ensure_file()?;
    install::ensure_openssl()?;
    install::ensure_curl()?;
    Ok(Tools {
        envoy,
        chromium,
        pg_bin,
        pgbouncer,
        prometheus,
    })
}

/// The modules the tests load.
struct Modules {
    wasm: PathBuf,
    js: PathBuf,
    native: PathBuf,
}

/// The modules, and every test binary with the debug builds the tests and demos run: one build
/// of the host packages, their features unified once.
fn build_modules() -> Result<Modules> {
    let wasm = wasm::build_envoy_module()?;
    wasm::check_envoy_module(&wasm)?;
    let js = root().join("target/js-pkg");
    wasm::build_js_packages(&js)?;
    crate::console::check(&js.join("web"))?;
    let native = native::build_native_module()?;
    run(test_command().arg("--no-run"))?;
    Ok(Modules { wasm, js, native })
}

/// `cargo test` of every host package (it builds their binaries too: `issuer`, `stack`).
fn test_command() -> Command {
    let mut c = cargo();
    c.arg("test");
    for pkg in PACKAGES {
        c.args(["-p", pkg]);
    }
    c
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
    let m = p.run("modules and test builds", build_modules)?;
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
    // The compiling that no test needs runs beside the tests, which mostly wait on sockets.
    let beside = Beside::start(&BESIDE_THE_TESTS);
    let tested = p.run("tests, with each filter side by side", || {
        tests(&with_tools)
    });
    let demos = tested.and_then(|()| p.run("demos", || demos(&with_tools)));
    let built = beside.join(p);
    demos?;
    built?;
    p.run("dist, and fuzzing beside it", dist_and_fuzz)?;
    eprintln!("\nall checks and tests passed");
    Ok(())
}

/// The tests: every host package's with the Wasm filter in Envoy, and beside them the tests
/// through Envoy again with the native filter (their output kept in
/// `target/test-native-filter.log` and printed when they end).
fn tests(with_tools: &dyn Fn(&mut Command)) -> Result<()> {
    let mut validate = Command::new(root().join("target/debug/stack"));
    validate.arg("validate");
    with_tools(&mut validate);
    run(&mut validate)?;
    let mut native = cargo();
    native.args(["test", "-p", "e2e", "--test", "through_envoy"]);
    // The tests that need a tool are `#[ignore]`d for a plain `cargo test`; here they run.
    native.args(["--", "--include-ignored"]);
    native.env("MMS_FILTER", "native");
    with_tools(&mut native);
    let native = std::thread::spawn(move || run_to_log(native, "target/test-native-filter.log"));
    let mut all = test_command();
    with_tools(&mut all);
    let wasm = run(all.args(["--", "--include-ignored"]));
    let native = native
        .join()
        .map_err(|_| anyhow::anyhow!("the native filter's test thread panicked"))?;
    wasm?;
    native
}

/// Runs `c` with its output in the file `log` (under the root), then prints that file.
fn run_to_log(mut c: Command, log: &str) -> Result<()> {
    let path = root().join(log);
    let file = std::fs::File::create(&path)?;
    eprintln!("\n$ {c:?} > {log}");
    let status = c
        .stdout(file.try_clone()?)
        .stderr(file)
        .status()
        .with_context(|| format!("running {c:?}"))?;
    eprintln!("\n--- {log} ---\n{}", std::fs::read_to_string(&path)?);
    anyhow::ensure!(
        status.success(),
        "{c:?} failed ({status}); its output: {log}"
    );
    Ok(())
}

/// The release artifacts, built as `cargo xtask dist` builds them and checked with podman, dpkg,
/// systemd-analyze and sha256sum; beside them, a bounded run of each fuzz target
/// (`FUZZ_SECONDS`, default 10 each), one at a time, on the core the checks leave idle.
fn dist_and_fuzz() -> Result<()> {
    let seconds = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    let fuzzing = std::thread::spawn(move || fuzz::run_all(seconds));
    let dist = dist::check::build_and_check_all(false, None);
    let fuzzed = fuzzing
        .join()
        .map_err(|_| anyhow::anyhow!("the fuzzing thread panicked"))?;
    dist?;
    fuzzed
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
