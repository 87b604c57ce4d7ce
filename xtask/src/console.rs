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
    same_files(web, &copy_dir())?;
    eprintln!("{COPY_DIR}: the same as the fresh web build");
    Ok(())
}

/// Fails unless each of [`FILES`] is the same bytes in `fresh` and `kept`.
fn same_files(fresh: &Path, kept: &Path) -> Result<()> {
    for file in FILES {
        let read = |dir: &Path| {
            std::fs::read(dir.join(file))
                .with_context(|| format!("reading {}", dir.join(file).display()))
        };
        if read(fresh)? != read(kept)? {
            bail!(
                "{} differs from the fresh build in {}: run `cargo xtask console-pkg` and commit the result",
                kept.join(file).display(),
                fresh.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_refused_unless_every_file_is_the_same_bytes() {
        let dir = std::env::temp_dir().join(format!("xtask-console-{}", std::process::id()));
        let (fresh, kept) = (dir.join("fresh"), dir.join("kept"));
        for d in [&fresh, &kept] {
            std::fs::create_dir_all(d).unwrap();
            for file in FILES {
                std::fs::write(d.join(file), file).unwrap();
            }
        }
        assert!(same_files(&fresh, &kept).is_ok());
        std::fs::write(kept.join(FILES[1]), "changed").unwrap();
        let e = same_files(&fresh, &kept).unwrap_err().to_string();
        assert!(e.contains("cargo xtask console-pkg"), "{e}");
        std::fs::remove_file(kept.join(FILES[0])).unwrap();
        assert!(same_files(&fresh, &kept).is_err(), "a missing file");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
