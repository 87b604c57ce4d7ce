//! Orchestration of the project, run as `cargo xtask <command>`:
//!
//! - `test`: every check and test (what `.ci/run` runs), installing what it needs, ending with a
//!   bounded run of every fuzz target (`FUZZ_SECONDS`, default 30 each).
//! - `demo`: the full stack on this machine (issuer, Envoy with the filter and TLS, a media
//!   upstream) with a demo client and user, and a curl walk-through; Ctrl-C stops it.
//! - `soak [--minutes N]`: a bounded soak of the full stack, written to docs/soak.md.
//! - `bench`: the benchmarks, side by side, written to BENCHMARKS.md (`--quick` for a short run,
//!   `--stores` for the store runs alone).
//! - `dist`: release artifacts in `dist/`: the issuer, the Envoy module and configurations, and the
//!   npm packages of the browser/Node module.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod bench;
mod tools;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    std::env::set_current_dir(root())?;
    match args.first().map(String::as_str) {
        Some("test") => test(),
        Some("demo") => demo(args.iter().any(|a| a == "--postgres")),
        Some("dist") => dist(),
        Some("bench") => {
            let has = |flag: &str| args.iter().any(|a| a == flag);
            let sections = if has("--traffic") {
                bench::Sections::Traffic
            } else if has("--edge") {
                bench::Sections::Edge
            } else if has("--stores") {
                bench::Sections::Stores
            } else {
                bench::Sections::All
            };
            bench::bench(has("--quick"), sections)
        }
        Some("soak") => soak(
            args.iter()
                .position(|a| a == "--minutes")
                .and_then(|i| args.get(i + 1))
                .map_or("10", String::as_str),
        ),
        _ => {
            eprintln!(
                "usage: cargo xtask <test | demo [--postgres] | dist | bench [--quick] [--traffic | --edge | --stores] | soak [--minutes N]>"
            );
            std::process::exit(2);
        }
    }
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

/// True when running under CI: a missing tool is then a failure, never a skip.
pub fn ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// Runs a command, echoing it, and fails if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("\n$ {}", show(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("starting {}", show(cmd)))?;
    if !status.success() {
        bail!("`{}` failed with {status}", show(cmd));
    }
    Ok(())
}

fn show(cmd: &Command) -> String {
    let envs: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_string_lossy(), v?.to_string_lossy())))
        .collect();
    envs.into_iter()
        .chain(std::iter::once(
            cmd.get_program().to_string_lossy().into_owned(),
        ))
        .chain(cmd.get_args().map(|s| s.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `cargo`, as the one running xtask.
pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Packages checked natively (the filter's Envoy and JS builds are checked on their own).
const PACKAGES: [&str; 5] = ["mms-token", "issuer", "filter-wasm", "e2e", "xtask"];

fn test() -> Result<()> {
    tools::ensure_wasm_target()?;
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    run(cargo().args(["fmt", "--manifest-path", "fuzz/Cargo.toml", "--", "--check"]))?;
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
    tools::clippy_envoy_module()?;
    tools::clippy_js_module()?;
    let wasm = tools::build_envoy_module()?;
    tools::check_envoy_module(&wasm)?;
    let envoy = tools::ensure_envoy()?;
    let js = root().join("target/js-pkg");
    tools::build_js_packages(&js)?;
    tools::check_node()?;
    let chromium = tools::ensure_chromium()?;
    let pg_bin = tools::ensure_postgres()?;
    run(cargo().args(["build", "-p", "issuer", "-p", "e2e"]))?;
    let with_tools = |c: &mut Command| {
        c.env("MMS_ENVOY", &envoy)
            .env("MMS_FILTER_WASM", &wasm)
            .env("MMS_JS_NODE", js.join("node"))
            .env("MMS_JS_WEB", js.join("web"))
            .env("MMS_CHROMIUM", &chromium)
            .env("MMS_PG_BIN", &pg_bin);
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
    // The demo as a new user runs it, on free ports, walked through automatically.
    let smoke_dir = root().join("target/demo-smoke");
    if smoke_dir.exists() {
        std::fs::remove_dir_all(&smoke_dir)?;
    }
    let mut smoke = Command::new(root().join("target/debug/stack"));
    smoke.arg("smoke").arg("--dir").arg(&smoke_dir);
    with_tools(&mut smoke);
    run(&mut smoke)?;
    // And `cargo xtask demo --postgres`: two issuers on a throwaway PostgreSQL behind Envoy.
    std::fs::remove_dir_all(&smoke_dir)?;
    let mut smoke = Command::new(root().join("target/debug/stack"));
    smoke.args(["smoke", "--postgres", "--dir"]).arg(&smoke_dir);
    with_tools(&mut smoke);
    run(&mut smoke)?;
    let seconds = std::env::var("FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    tools::fuzz_all(seconds)?;
    eprintln!("\nall checks and tests passed");
    Ok(())
}

fn demo(postgres: bool) -> Result<()> {
    tools::ensure_wasm_target()?;
    let wasm = tools::build_envoy_module()?;
    let envoy = tools::ensure_envoy()?;
    let pg_bin = if postgres {
        Some(tools::ensure_postgres()?)
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

/// A bounded soak of the full stack (not part of `test`); writes docs/soak.md.
fn soak(minutes: &str) -> Result<()> {
    tools::ensure_wasm_target()?;
    let wasm = tools::build_envoy_module()?;
    let envoy = tools::ensure_envoy()?;
    run(cargo().args(["build", "--release", "-p", "issuer", "-p", "e2e"]))?;
    let dir = root().join("target/soak");
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    let command = format!("cargo xtask soak --minutes {minutes}");
    let out = Command::new(root().join("target/release/stack"))
        .args(["soak", "--minutes", minutes, "--dir"])
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

/// The time now in UTC, to the minute, for reports.
pub fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Replaces the section between the `<!-- NAME:results:begin ... -->` and `<!-- NAME:results:end -->`
/// markers of `file` (relative to the repository root) with `text`, keeping the hand-written
/// text around it.
pub fn write_section(file: &str, name: &str, text: &str) -> Result<()> {
    write_section_by(file, name, &format!("cargo xtask {name}"), text)
}

/// [`write_section`] for a section named apart from the command `by` that writes it.
pub fn write_section_by(file: &str, name: &str, by: &str, text: &str) -> Result<()> {
    let path = root().join(file);
    let begin = format!("<!-- {name}:results:begin (written by {by}) -->");
    let end = format!("<!-- {name}:results:end -->");
    let existing = std::fs::read_to_string(&path).unwrap_or_else(|_| format!("{begin}\n{end}\n"));
    let (head, rest) = existing
        .split_once(&begin)
        .with_context(|| format!("{file} lost its results marker"))?;
    let (_, tail) = rest
        .split_once(&end)
        .with_context(|| format!("{file} lost its end marker"))?;
    std::fs::write(&path, format!("{head}{begin}\n{text}{end}{tail}"))?;
    Ok(())
}

fn dist() -> Result<()> {
    tools::ensure_wasm_target()?;
    let wasm = tools::build_envoy_module()?;
    tools::check_envoy_module(&wasm)?;
    run(cargo().args(["build", "--release", "-p", "issuer"]))?;
    let dist = root().join("dist");
    tools::build_js_packages(&dist.join("js"))?;
    let example = dist.join("js/example");
    std::fs::create_dir_all(&example)?;
    std::fs::copy(
        root().join("filter-wasm/js/example/index.html"),
        example.join("index.html"),
    )?;
    std::fs::create_dir_all(dist.join("envoy"))?;
    std::fs::copy(root().join("target/release/issuer"), dist.join("issuer"))?;
    std::fs::copy(&wasm, dist.join("filter.wasm"))?;
    for entry in std::fs::read_dir(root().join("envoy"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            std::fs::copy(
                &path,
                dist.join("envoy")
                    .join(path.file_name().context("file name")?),
            )?;
        }
    }
    eprintln!(
        "\ndist/: issuer, filter.wasm ({} bytes), envoy/*.yaml",
        std::fs::metadata(dist.join("filter.wasm"))?.len()
    );
    Ok(())
}
