//! Building the wasm modules of `filter-wasm/`: the Envoy module (the crate `filter-envoy`,
//! optimised with `wasm-opt` and checked), its benchmark variants, and the npm packages of the
//! browser/Node module (the crate `filter-js`, wasm-bindgen); and clippy on each as it is built.

use crate::install::{ensure_wasm_bindgen, ensure_wasm_opt};
use crate::util::{root, run};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The largest Envoy module accepted, in bytes.
pub const MAX_MODULE_BYTES: u64 = 373_700;
/// Target dir of the Envoy module: its own, so no other build's features can leak into it.
const ENVOY_TARGET_DIR: &str = "target/envoy-wasm";

/// The crate of the Envoy module, and the file its build writes.
const ENVOY_PACKAGE: &str = "filter-envoy";
const ENVOY_BUILT: &str = "wasm32-unknown-unknown/wasm/filter_envoy.wasm";

/// `cargo CMD` for one wasm32 build of `package`: only `feature` (none for `""`), in
/// `target_dir`. The Envoy and JS modules each have a target dir of their own, so no other build's
/// features can leak into them; the benchmark variants share one.
fn module_command(cmd: &str, package: &str, feature: &str, target_dir: &str) -> Command {
    let mut c = crate::native::crate_command(cmd, package, feature, target_dir);
    c.args(["--target", "wasm32-unknown-unknown"]);
    c
}

fn envoy_module(cmd: &str) -> Command {
    module_command(cmd, ENVOY_PACKAGE, "", ENVOY_TARGET_DIR)
}

fn variant_module(cmd: &str, feature: &str) -> Command {
    module_command(cmd, ENVOY_PACKAGE, feature, BENCH_TARGET_DIR)
}

/// The target dir every wasm32 lint shares: clippy only checks, so one build's features never
/// reach another's module, and the dependencies are checked once for all of them.
pub const LINT_TARGET_DIR: &str = "target/lint-wasm";

/// Clippy on the Envoy adapter as it is built, and on the benchmark variants of it.
pub fn clippy_envoy_module() -> Result<()> {
    let lint = |feature| {
        run(
            module_command("clippy", ENVOY_PACKAGE, feature, LINT_TARGET_DIR)
                .args(["--", "-D", "warnings"]),
        )
    };
    lint("")?;
    for feature in BENCH_VARIANTS {
        lint(feature)?;
    }
    Ok(())
}

/// Features of the benchmark-only Envoy modules (see `filter-wasm/envoy/Cargo.toml`).
const BENCH_VARIANTS: [&str; 4] = ["passthrough", "reference", "ablate-read", "ablate-decide"];
const BENCH_TARGET_DIR: &str = "target/bench-wasm";

/// Builds the Envoy module (profile `wasm`), optimizes it with `wasm-opt` and returns the path
/// of the result.
pub fn build_envoy_module() -> Result<PathBuf> {
    run(envoy_module("build").args(["--profile", "wasm"]))?;
    let dir = root().join(ENVOY_TARGET_DIR);
    let out = dir.join("filter.wasm");
    wasm_opt(&dir.join(ENVOY_BUILT), &out)?;
    Ok(out)
}

/// `wasm-opt -O2` (Binaryen, from Debian) of `input` into `output`: rustc's own size
/// optimisation leaves a fifth of the module that Binaryen removes (285 KB to 228 KB when it was
/// introduced). Speed level 2 rather than a size level: the token check stays as rustc made it.
/// The benchmark variants go through it too, so they compare alike.
fn wasm_opt(input: &Path, output: &Path) -> Result<()> {
    let bin = ensure_wasm_opt()?;
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

/// The crate of the JS module, and its target dir: its own, like the Envoy module's.
const JS_PACKAGE: &str = "filter-js";
const JS_TARGET_DIR: &str = "target/js-wasm";
/// npm package names.
pub const NODE_PACKAGE: &str = "mms-token-inspect";
pub const WEB_PACKAGE: &str = "mms-token-inspect-web";

/// Clippy on the JS binding, as it is built.
pub fn clippy_js_module() -> Result<()> {
    run(module_command("clippy", JS_PACKAGE, "", LINT_TARGET_DIR).args(["--", "-D", "warnings"]))
}

/// Builds the npm packages for Node (`dest/node`) and browsers (`dest/web`).
pub fn build_js_packages(dest: &Path) -> Result<()> {
    let bindgen = ensure_wasm_bindgen()?;
    // Paths remapped, so the module is the same bytes wherever it is built: the console's copy
    // of it (`crate::console`) is compared with a fresh build.
    run(module_command("build", JS_PACKAGE, "", JS_TARGET_DIR)
        .args(["--profile", "wasm-js"])
        .env(
            "CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS",
            crate::util::remap_path_prefixes()?,
        ))?;
    let module = root()
        .join(JS_TARGET_DIR)
        .join("wasm32-unknown-unknown/wasm-js/filter_js.wasm");
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
            "description": format!("Inspect media service access tokens (expiry, identity, binding) without a key, and make DPoP proofs under a non-extractable WebCrypto key; {} build", if esm { "browser" } else { "Node.js" }),
            "license": "Apache-2.0",
            "type": if esm { "module" } else { "commonjs" },
            "main": "mms_token.js",
            "types": "mms_token.d.ts",
            "exports": { ".": { "types": "./mms_token.d.ts", "default": "./mms_token.js" } },
            "files": ["mms_token.js", "mms_token.d.ts", "mms_token_bg.wasm", "mms_token_bg.wasm.d.ts", "README.md"],
            "sideEffects": !esm,
        });
        std::fs::copy(
            root().join("filter-wasm/js/README.md"),
            out.join("README.md"),
        )?;
        std::fs::write(
            out.join("package.json"),
            serde_json::to_string_pretty(&package)? + "\n",
        )?;
        let dts = std::fs::read_to_string(out.join("mms_token.d.ts"))?;
        // The web build's `InitOutput` (the raw exports of the wasm module) is typed `any` by
        // wasm-bindgen; what a user calls comes before it and must be typed throughout.
        let api = dts
            .split("export type InitInput")
            .next()
            .unwrap_or_default();
        if !api
            .contains("export function inspectToken(token: string, now?: Date | null): TokenInfo;")
            || !api.contains("proof(request: DpopRequest): Promise<string>;")
            || !api.contains(
                "fetch(url: string | URL, init?: DpopFetchInit | null): Promise<Response>;",
            )
            || !api.contains("static open(name?: string | null, options?: DpopKeyOptions | null): Promise<DpopKey>;")
            || api.contains(": any")
        {
            bail!(
                "unexpected typings in {}:\n{dts}",
                out.join("mms_token.d.ts").display()
            );
        }
    }
    Ok(())
}

/// Builds a benchmark variant of the Envoy module (one of [`BENCH_VARIANTS`]) and returns the path
/// of a copy of it. All variants share one target dir, so their dependencies are built once.
pub fn build_variant_module(feature: &str) -> Result<PathBuf> {
    run(variant_module("build", feature).args(["--profile", "wasm"]))?;
    let dir = root().join(BENCH_TARGET_DIR);
    let copy = dir.join(format!("{feature}.wasm"));
    wasm_opt(&dir.join(ENVOY_BUILT), &copy)?;
    Ok(copy)
}
