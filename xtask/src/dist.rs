//! `cargo xtask dist`: release artifacts in `dist/`: the issuer, the Envoy modules (Wasm and
//! native) and configurations, and the npm packages of the browser/Node module.

use crate::util::{cargo, root, run};
use crate::{install, native, wasm};
use anyhow::{Context, Result};

pub fn dist() -> Result<()> {
    install::ensure_wasm_target()?;
    let wasm = wasm::build_envoy_module()?;
    wasm::check_envoy_module(&wasm)?;
    let native = native::build_native_module()?;
    run(cargo().args(["build", "--release", "-p", "issuer"]))?;
    let dist = root().join("dist");
    wasm::build_js_packages(&dist.join("js"))?;
    let example = dist.join("js/example");
    std::fs::create_dir_all(&example)?;
    std::fs::copy(
        root().join("filter-wasm/js/example/index.html"),
        example.join("index.html"),
    )?;
    std::fs::create_dir_all(dist.join("envoy"))?;
    std::fs::copy(root().join("target/release/issuer"), dist.join("issuer"))?;
    std::fs::copy(&wasm, dist.join("filter.wasm"))?;
    std::fs::copy(&native, dist.join("libmms_auth.so"))?;
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
        "\ndist/: issuer, filter.wasm ({} bytes), libmms_auth.so ({} bytes), envoy/*.yaml",
        std::fs::metadata(dist.join("filter.wasm"))?.len(),
        std::fs::metadata(dist.join("libmms_auth.so"))?.len()
    );
    Ok(())
}
