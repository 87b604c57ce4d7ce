//! `dist/SHA256SUMS`: the SHA-256 of every other file under `dist/`, folders included, in
//! `sha256sum`'s format (`HEX  PATH`, paths relative to `dist/`, sorted), so
//! `cd dist && sha256sum -c SHA256SUMS` checks them all. Its signature, `SHA256SUMS.sig`
//! (`sign.rs`), is written after it and is not listed.

use super::archive::sha256_hex;
use crate::util::run;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const FILE: &str = "SHA256SUMS";

/// Every file under `dir` but `SHA256SUMS` and its signature, relative, with `/`, sorted.
fn files(dir: &Path) -> Result<Vec<String>> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) -> Result<()> {
        for entry in std::fs::read_dir(dir)? {
            let path: PathBuf = entry?.path();
            if path.is_dir() {
                walk(base, &path, out)?;
            } else {
                let rel = path.strip_prefix(base)?.to_string_lossy().into_owned();
                if rel != FILE && rel != super::sign::FILE {
                    out.push(rel);
                }
            }
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out)?;
    out.sort();
    Ok(out)
}

/// The text of `SHA256SUMS` for `dir`.
fn text(dir: &Path) -> Result<String> {
    let mut text = String::new();
    for rel in files(dir)? {
        let bytes = std::fs::read(dir.join(&rel)).with_context(|| rel.clone())?;
        text.push_str(&format!("{}  {rel}\n", sha256_hex(&bytes)));
    }
    Ok(text)
}

/// Writes `dir/SHA256SUMS`.
pub fn write(dir: &Path) -> Result<()> {
    std::fs::write(dir.join(FILE), text(dir)?)?;
    Ok(())
}

/// `SIZE  PATH` of every file under `dir` (for the summary of `dist`).
pub fn listing(dir: &Path) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    for rel in files(dir)? {
        let size = std::fs::metadata(dir.join(&rel))?.len();
        if !rel.contains('/') {
            lines.push(format!("{size:>10}  {rel}"));
        }
    }
    Ok(lines)
}

/// `sha256sum --strict -c SHA256SUMS` in `dir`, and every file listed.
pub fn check(dir: &Path) -> Result<()> {
    run(Command::new("sha256sum")
        .args(["--strict", "--quiet", "-c", FILE])
        .current_dir(dir))?;
    let listed: Vec<String> = std::fs::read_to_string(dir.join(FILE))?
        .lines()
        .filter_map(|l| l.split_once("  ").map(|(_, p)| p.to_owned()))
        .collect();
    anyhow::ensure!(listed == files(dir)?, "{FILE} does not list every file");
    Ok(())
}
