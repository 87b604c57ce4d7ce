//! Orchestration of the project, run as `cargo xtask <command>`:
//!
//! - `test`: every check and test (what `.ci/run` runs); installs what it needs.
//! - `demo`: runs the product on this machine with a demo client and user and prints a curl
//!   walk-through; `demo --smoke` runs the walk-through itself and exits (used by `test`).

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod demo;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let root = root();
    std::env::set_current_dir(&root)?;
    match args.first().map(String::as_str) {
        Some("test") => test(&root),
        Some("demo") => demo::run_demo(&root, args.iter().any(|a| a == "--smoke")),
        _ => {
            eprintln!("usage: cargo xtask <test | demo [--smoke]>");
            std::process::exit(2);
        }
    }
}

fn root() -> PathBuf {
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
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// Installs the wasm32 target if rustup does not list it yet.
fn ensure_wasm_target() -> Result<()> {
    let out = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .stderr(Stdio::inherit())
        .output()?;
    if !String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == "wasm32-unknown-unknown")
    {
        eprintln!("installing the wasm32-unknown-unknown target with rustup");
        run(Command::new("rustup").args(["target", "add", "wasm32-unknown-unknown"]))?;
    }
    Ok(())
}

const PACKAGES: [&str; 3] = ["mms-token", "issuer", "xtask"];

fn test(_root: &Path) -> Result<()> {
    ensure_wasm_target()?;
    run(cargo().args(["fmt", "--all", "--", "--check"]))?;
    for p in PACKAGES {
        run(cargo().args(["clippy", "-p", p, "--all-targets", "--", "-D", "warnings"]))?;
    }
    // The token crate must stay wasm-friendly: it is what the Envoy filter and the JS module use.
    run(cargo().args([
        "build",
        "-p",
        "mms-token",
        "--target",
        "wasm32-unknown-unknown",
    ]))?;
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
    for p in PACKAGES {
        run(cargo().args(["test", "-p", p]))?;
    }
    demo::run_demo(&root(), true)?;
    eprintln!("\nall checks and tests passed");
    Ok(())
}
