//! `dist/issuer-VERSION-x86_64-unknown-linux-musl.tar.gz`: the static issuer and what an operator
//! installing it by hand needs, under one folder `issuer-VERSION-x86_64-unknown-linux-musl/`:
//! `issuer`, `README.md`, `docs/operate.md`, `docs/issuer.md`, `LICENSE` (the license's name
//! and where its text is), and the Debian package's unit and configuration as examples
//! (`issuer.service`, `issuer.toml` in the folder `examples`). Sorted, owner 0, mtime
//! `SOURCE_DATE_EPOCH`, gzip without a timestamp: reproducible.

use super::archive::{gzip, Tree};
use super::release::{Release, MUSL_TARGET};
use crate::util::root;
use anyhow::Result;
use std::path::{Path, PathBuf};

/// The tarball's folder, and its name without `.tar.gz`.
pub fn stem(release: &Release) -> String {
    format!("issuer-{}-{MUSL_TARGET}", release.version)
}

/// The files of the tarball: path under its folder, source, mode.
fn files(issuer: &Path) -> Vec<(&'static str, PathBuf, u32)> {
    let at = |p: &str| root().join(p);
    vec![
        ("issuer", issuer.to_owned(), 0o755),
        ("README.md", at("README.md"), 0o644),
        ("docs/operate.md", at("docs/operate.md"), 0o644),
        ("docs/issuer.md", at("docs/issuer.md"), 0o644),
        (
            "examples/issuer.service",
            at("dist-assets/deb/issuer.service"),
            0o644,
        ),
        (
            "examples/issuer.toml",
            at("dist-assets/deb/issuer.toml"),
            0o644,
        ),
    ]
}

/// Writes the tarball into `dist`; returns its path.
pub fn write(release: &Release, issuer: &Path, dist: &Path) -> Result<PathBuf> {
    let top = stem(release);
    let mut tree = Tree::new();
    for dir in ["", "/docs", "/examples"] {
        tree.root_dir(&format!("{top}{dir}"));
    }
    for (name, source, mode) in files(issuer) {
        tree.root_file(&format!("{top}/{name}"), std::fs::read(source)?, mode);
    }
    let license = format!(
        "The issuer is licensed under the {} license (SPDX identifier); its text:\n\
         https://www.apache.org/licenses/LICENSE-2.0.txt\n",
        env!("CARGO_PKG_LICENSE")
    );
    tree.root_file(&format!("{top}/LICENSE"), license.into_bytes(), 0o644);
    let out = dist.join(format!("{top}.tar.gz"));
    std::fs::write(&out, gzip(&tree.to_tar(release.epoch)?)?)?;
    Ok(out)
}
