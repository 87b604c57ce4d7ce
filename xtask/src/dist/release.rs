//! What every artifact is stamped with (the version, the commit, its time), and the static build
//! of the issuer that every artifact ships.
//!
//! The binary is built once, with the release profile (fat LTO, one codegen unit), for
//! `x86_64-unknown-linux-musl`: the file tested is the file shipped. Paths of the checkout and of
//! cargo's registry are remapped (`--remap-path-prefix`), so the binary does not depend on where
//! it was built.

use crate::install;
use crate::util::{cargo, root, run};
use anyhow::{bail, Context, Result};
use std::path::PathBuf;
use std::process::Command;

/// The target of the static build.
pub const MUSL_TARGET: &str = "x86_64-unknown-linux-musl";

/// The stamp of one release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// The workspace version (`[workspace.package]`).
    pub version: String,
    /// The commit, with `-dirty` when the work tree has changes.
    pub revision: String,
    /// `SOURCE_DATE_EPOCH`: as set, else the commit's time; every mtime and date of the artifacts.
    pub epoch: u64,
    /// `epoch` in RFC 3339 (UTC).
    pub created: String,
    /// The repository's address, when `Cargo.toml` or git's `origin` names one.
    pub source: Option<String>,
}

impl Release {
    /// The stamp of the checkout at the workspace root.
    pub fn of_checkout() -> Result<Release> {
        let head = git(&["rev-parse", "HEAD"])?;
        let dirty = !git(&["status", "--porcelain", "--untracked-files=no"])?.is_empty();
        let epoch = match std::env::var("SOURCE_DATE_EPOCH") {
            Ok(v) if !v.is_empty() => v.parse().context("SOURCE_DATE_EPOCH")?,
            _ => git(&["log", "-1", "--format=%ct"])?.parse()?,
        };
        Ok(Release {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            revision: if dirty { format!("{head}-dirty") } else { head },
            epoch,
            created: rfc3339(epoch)?,
            source: source_url(),
        })
    }
}

/// The output of `git ARGS` at the root, trimmed.
fn git(args: &[&str]) -> Result<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(root())
        .output()
        .context("running git")?;
    if !out.status.success() {
        bail!("git {} failed", args.join(" "));
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// `epoch` as `YYYY-MM-DDTHH:MM:SSZ`.
fn rfc3339(epoch: u64) -> Result<String> {
    let out = Command::new("date")
        .args(["-u", "-d", &format!("@{epoch}"), "+%Y-%m-%dT%H:%M:%SZ"])
        .output()
        .context("running date")?;
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// `repository` of the workspace's `Cargo.toml`, else git's `origin`.
fn source_url() -> Option<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).ok()?;
    let declared = manifest.lines().find_map(|l| {
        let value = l.trim().strip_prefix("repository")?.trim_start();
        Some(value.strip_prefix('=')?.trim().trim_matches('"').to_owned())
    });
    declared.or_else(|| git(&["remote", "get-url", "origin"]).ok())
}

/// Builds the issuer for [`MUSL_TARGET`] (release profile) and returns the binary, checked to be
/// statically linked. `ring` compiles C: musl's `musl-gcc` (Debian's `musl-tools`) does.
pub fn build_static_issuer() -> Result<PathBuf> {
    build_static_issuer_in("target")
}

/// [`build_static_issuer`] with `target_dir` (relative to the root) as cargo's target dir.
pub fn build_static_issuer_in(target_dir: &str) -> Result<PathBuf> {
    install::ensure_musl_target()?;
    install::ensure_musl_gcc()?;
    let remap = crate::util::remap_path_prefixes()?;
    let started = std::time::Instant::now();
    run(cargo()
        .args([
            "build",
            "--release",
            "--target",
            MUSL_TARGET,
            "-p",
            "issuer",
        ])
        .args(["--target-dir", target_dir])
        .env("CC_x86_64_unknown_linux_musl", "musl-gcc")
        .env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_MUSL_RUSTFLAGS", remap))?;
    eprintln!("static issuer built in {} s", started.elapsed().as_secs());
    let bin = root()
        .join(target_dir)
        .join(MUSL_TARGET)
        .join("release/issuer");
    check_static(&bin)?;
    Ok(bin)
}

/// Fails unless `ldd` finds `bin` statically linked (no interpreter, no shared library).
pub fn check_static(bin: &std::path::Path) -> Result<()> {
    let out = Command::new("ldd")
        .arg(bin)
        .output()
        .context("running ldd")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !(text.contains("statically linked") || text.contains("not a dynamic executable")) {
        bail!(
            "{} is not statically linked: ldd says {text}",
            bin.display()
        );
    }
    Ok(())
}
