//! The web console's copy of the browser build of the JS module: the issuer binary embeds the
//! files of `issuer/console/pkg/` (so building the issuer needs no wasm toolchain), and this
//! module keeps that copy honest: `cargo xtask console-pkg` rebuilds it, and `cargo xtask test`
//! fails while it differs from the fresh build the tests use.

use crate::util::root;
use crate::wasm;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The files of the web package the console loads, as wasm-bindgen names them.
pub const FILES: [&str; 2] = ["mms_token.js", "mms_token_bg.wasm"];

/// Where the console's copy lives, under the root.
const COPY_DIR: &str = "issuer/console/pkg";

fn copy_dir() -> PathBuf {
    root().join(COPY_DIR)
}

/// `cargo xtask console-pkg`: builds the JS packages and copies the web build's files into
/// `issuer/console/pkg/`.
pub fn refresh() -> Result<()> {
    let js = root().join("target/js-pkg");
    wasm::build_js_packages(&js)?;
    let dest = copy_dir();
    std::fs::create_dir_all(&dest)?;
    for file in FILES {
        std::fs::copy(js.join("web").join(file), dest.join(file))
            .with_context(|| format!("copying {file} into {}", dest.display()))?;
    }
    eprintln!("{COPY_DIR}: refreshed from {}", js.join("web").display());
    Ok(())
}

/// Fails unless each file of `issuer/console/pkg/` equals the one of the fresh web build `web`.
pub fn check(web: &Path) -> Result<()> {
    for file in FILES {
        let fresh = std::fs::read(web.join(file))
            .with_context(|| format!("reading {}", web.join(file).display()))?;
        let kept = std::fs::read(copy_dir().join(file))
            .with_context(|| format!("reading {COPY_DIR}/{file}"))?;
        if fresh != kept {
            bail!(
                "{COPY_DIR}/{file} differs from the fresh build in {}: run `cargo xtask console-pkg` and commit the result",
                web.display()
            );
        }
    }
    eprintln!("{COPY_DIR}: the same as the fresh web build");
    Ok(())
}
