//! `cargo xtask dist`: release artifacts in `dist/`, versioned with the workspace version and
//! checksummed:
//!
//! - `issuer`: the issuer, statically linked (musl); `release.rs` builds it;
//! - `issuer-VERSION-x86_64-unknown-linux-musl.tar.gz`: the same binary with its docs
//!   (`tarball.rs`);
//! - `issuer-image.tar`: an OCI image archive of the issuer, built from scratch (`oci.rs`,
//!   `image.rs`);
//! - `filter-image.tar`: an OCI image of `filter.wasm` for Istio's `WasmPlugin` (`image.rs`);
//! - `issuer_VERSION_amd64.deb`: a Debian package with a hardened systemd unit (`deb.rs`);
//! - `filter.wasm`, `libmms_auth.so`, `envoy/*.yaml` (the configurations load the modules by
//!   these names, so they stay unversioned), `js/` (npm packages, versioned inside);
//! - `prometheus/`: the alert and recording rules and their tests (`dist-assets/prometheus`);
//! - `SHA256SUMS` over every other file (`sums.rs`), checkable with `sha256sum -c`;
//! - `SHA256SUMS.sig`, with `--sign-key FILE`: its detached Ed25519 signature under the release
//!   manager's key, checkable with stock OpenSSL (`sign.rs`); without a key, `dist` says the sums
//!   are unsigned.
//!
//! Every archive is reproducible: entries sorted, owner 0 (or the image's user), mtime the
//! commit's time (`SOURCE_DATE_EPOCH`, from git unless set), so one commit gives the same bytes
//! and the same image digests. `check*.rs` test the artifacts with the real tools (`podman`,
//! `dpkg`, `systemd-analyze`, `sha256sum`, `openssl`) for `cargo xtask test`.

pub mod archive;
pub mod check;
mod check_deb;
mod check_image;
mod deb;
mod image;
mod oci;
pub mod release;
mod sign;
mod sums;
mod tarball;

use crate::util::root;
use crate::{install, native, wasm};
use anyhow::{Context, Result};
use release::Release;
use std::path::{Path, PathBuf};

/// What `dist` made: the folder and the digests of the two images' manifests.
pub struct Artifacts {
    pub dir: PathBuf,
    pub release: Release,
    pub issuer_image_digest: String,
    pub filter_image_digest: String,
    /// The PEM of the public key `SHA256SUMS.sig` verifies with; `None`: unsigned.
    pub signed_by: Option<String>,
}

/// `cargo xtask dist`, `SHA256SUMS` signed with the key in `sign_key` if given.
pub fn dist(sign_key: Option<&Path>) -> Result<()> {
    let started = std::time::Instant::now();
    let made = build_all(sign_key)?;
    eprintln!("\ndist/ ({} s):", started.elapsed().as_secs());
    for line in sums::listing(&made.dir)? {
        eprintln!("  {line}");
    }
    eprintln!("issuer image: {}", made.issuer_image_digest);
    eprintln!("filter image: {}", made.filter_image_digest);
    say_signed(&made);
    Ok(())
}

/// Says whether `SHA256SUMS` is signed, and by which key.
fn say_signed(made: &Artifacts) {
    match &made.signed_by {
        Some(public) => eprintln!(
            "{} signed ({}); it verifies with this public key, which must be the one \
             published:\n{public}",
            sums::FILE,
            sign::FILE
        ),
        None => eprintln!(
            "{} is UNSIGNED: no --sign-key FILE was given (docs/operate.md, \
             \"Verifying a release\")",
            sums::FILE
        ),
    }
}

/// Builds every artifact into a fresh `dist/`; signs `SHA256SUMS` with the key in `sign_key`
/// if given. The key is read before anything is built, so a bad one fails at once.
pub fn build_all(sign_key: Option<&Path>) -> Result<Artifacts> {
    let key = sign_key.map(sign::read_key).transpose()?;
    let release = Release::of_checkout()?;
    install::ensure_wasm_target()?;
    let wasm = wasm::build_envoy_module()?;
    wasm::check_envoy_module(&wasm)?;
    let native = native::build_native_module()?;
    let issuer = release::build_static_issuer()?;
    let dist = root().join("dist");
    if dist.exists() {
        std::fs::remove_dir_all(&dist)?;
    }
    std::fs::create_dir_all(&dist)?;
    wasm::build_js_packages(&dist.join("js"))?;
    copy_modules_and_configs(&dist, &issuer, &wasm, &native)?;
    tarball::write(&release, &issuer, &dist)?;
    let issuer_image_digest = image::write_issuer_image(&release, &issuer, &dist)?;
    let filter_image_digest = image::write_filter_image(&release, &wasm, &dist)?;
    deb::write(&release, &issuer, &dist)?;
    copy_prometheus(&dist)?;
    sums::write(&dist)?;
    let signed_by = key.map(|key| sign::sign_sums(&dist, &key)).transpose()?;
    Ok(Artifacts {
        dir: dist,
        release,
        issuer_image_digest,
        filter_image_digest,
        signed_by,
    })
}

/// The binary, both filters, the JS example page and the shipped Envoy configurations.
fn copy_modules_and_configs(dist: &Path, issuer: &Path, wasm: &Path, native: &Path) -> Result<()> {
    let example = dist.join("js/example");
    std::fs::create_dir_all(&example)?;
    std::fs::copy(
        root().join("filter-wasm/js/example/index.html"),
        example.join("index.html"),
    )?;
    std::fs::copy(issuer, dist.join("issuer"))?;
    std::fs::copy(wasm, dist.join("filter.wasm"))?;
    std::fs::copy(native, dist.join("libmms_auth.so"))?;
    std::fs::create_dir_all(dist.join("envoy"))?;
    for entry in std::fs::read_dir(root().join("envoy"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let name = path.file_name().context("file name")?;
            std::fs::copy(&path, dist.join("envoy").join(name))?;
        }
    }
    Ok(())
}

/// The Prometheus alert and recording rules and their `promtool` tests
/// (`dist-assets/prometheus`), copied as they are into `dist/prometheus/`.
fn copy_prometheus(dist: &Path) -> Result<()> {
    let from = root().join("dist-assets/prometheus");
    copy_tree(&from, &dist.join("prometheus"))
        .with_context(|| format!("copying {}", from.display()))
}

/// Copies the files under `from` into `to`, folders included.
fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
