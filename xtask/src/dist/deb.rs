//! `dist/issuer_VERSION_amd64.deb`: the Debian package of the static issuer, built with
//! `dpkg-deb --root-owner-group --build` from a staging folder written here
//! (`target/dist-deb/`):
//!
//! - `/usr/bin/issuer`;
//! - `/lib/systemd/system/issuer.service` (`dist-assets/deb/issuer.service`): the hardened unit
//!   (`docs/operate.md` explains each setting), `ExecReload` sending SIGHUP;
//! - `/etc/issuer/issuer.toml` (`dist-assets/deb/issuer.toml`), a conffile (`DEBIAN/conffiles`),
//!   made root:issuer 0640 by `postinst`;
//! - `/usr/share/doc/issuer/`: `README.md`, `operate.md`, `issuer.md`, `copyright`;
//! - `DEBIAN/postinst` (the system user `issuer` with `adduser --system --group`, the data dir,
//!   the unit enabled, started where systemd runs), `prerm` (stopped), `postrm` (on purge: the
//!   user, `/var/lib/issuer` and `/etc/issuer` removed), from `dist-assets/deb/`.
//!
//! Every mtime is `SOURCE_DATE_EPOCH`, which `dpkg-deb` also reads, so the package is
//! reproducible.

use super::release::Release;
use crate::util::{root, run};
use anyhow::{Context, Result};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The unit's path in the package (Debian 12 installs units under `/lib`).
pub const UNIT_PATH: &str = "/lib/systemd/system/issuer.service";
/// The conffile.
pub const CONFIG_PATH: &str = "/etc/issuer/issuer.toml";

/// The package's file name in `dist/`.
pub fn file_name(release: &Release) -> String {
    format!("issuer_{}_amd64.deb", release.version)
}

/// The files of the package but `DEBIAN/`: path in the package, content, mode.
fn payload(issuer: &Path) -> Result<Vec<(&'static str, Vec<u8>, u32)>> {
    let asset = |name: &str| std::fs::read(root().join("dist-assets/deb").join(name));
    let doc = |name: &str| std::fs::read(root().join(name));
    Ok(vec![
        ("usr/bin/issuer", std::fs::read(issuer)?, 0o755),
        (&UNIT_PATH[1..], asset("issuer.service")?, 0o644),
        (&CONFIG_PATH[1..], asset("issuer.toml")?, 0o640),
        ("usr/share/doc/issuer/README.md", doc("README.md")?, 0o644),
        (
            "usr/share/doc/issuer/operate.md",
            doc("docs/operate.md")?,
            0o644,
        ),
        (
            "usr/share/doc/issuer/issuer.md",
            doc("docs/issuer.md")?,
            0o644,
        ),
        (
            "usr/share/doc/issuer/copyright",
            copyright().into_bytes(),
            0o644,
        ),
    ])
}

/// `/usr/share/doc/issuer/copyright`, in Debian's machine-readable format.
fn copyright() -> String {
    format!(
        "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n\
         Upstream-Name: issuer\n\n\
         Files: *\n\
         Copyright: the authors of the media management service's token issuer\n\
         License: {}\n \
         On Debian systems, the full text of the Apache License 2.0 is in\n \
         /usr/share/common-licenses/Apache-2.0.\n",
        env!("CARGO_PKG_LICENSE")
    )
}

/// `DEBIAN/control`.
fn control(release: &Release, installed_kib: u64) -> String {
    format!(
        "Package: issuer\n\
         Version: {}\n\
         Architecture: amd64\n\
         Maintainer: Media management service <ops@localhost>\n\
         Installed-Size: {installed_kib}\n\
         Depends: adduser\n\
         Section: net\n\
         Priority: optional\n\
         Description: OAuth 2.0 token issuer of the media management service\n \
         Mints short-lived access tokens and rotating refresh tokens for the media\n \
         management service, checked offline by its Envoy filter. Statically linked;\n \
         runs as the system user issuer under a hardened systemd unit, with its\n \
         state in /var/lib/issuer and its configuration in /etc/issuer/issuer.toml.\n",
        release.version
    )
}

/// Writes the staging folder and builds `dist/issuer_VERSION_amd64.deb` from it.
pub fn write(release: &Release, issuer: &Path, dist: &Path) -> Result<PathBuf> {
    let staging = root().join("target/dist-deb/issuer");
    if staging.exists() {
        std::fs::remove_dir_all(&staging)?;
    }
    let mut installed = 0;
    for (path, bytes, mode) in payload(issuer)? {
        installed += bytes.len().div_ceil(1024) as u64;
        put(&staging.join(path), &bytes, mode)?;
    }
    let debian = staging.join("DEBIAN");
    let control = control(release, installed);
    put(&debian.join("control"), control.as_bytes(), 0o644)?;
    put(
        &debian.join("conffiles"),
        format!("{CONFIG_PATH}\n").as_bytes(),
        0o644,
    )?;
    for script in ["postinst", "prerm", "postrm"] {
        let bytes = std::fs::read(root().join("dist-assets/deb").join(script))?;
        put(&debian.join(script), &bytes, 0o755)?;
    }
    fix_dirs_and_times(&staging, release.epoch)?;
    let out = dist.join(file_name(release));
    run(Command::new("dpkg-deb")
        .args(["--root-owner-group", "-Zxz", "--build"])
        .arg(&staging)
        .arg(&out)
        .env("SOURCE_DATE_EPOCH", release.epoch.to_string()))?;
    std::fs::remove_dir_all(root().join("target/dist-deb"))?;
    Ok(out)
}

/// Writes `bytes` at `path` with `mode`, making its folders.
fn put(path: &Path, bytes: &[u8], mode: u32) -> Result<()> {
    std::fs::create_dir_all(path.parent().context("no parent")?)?;
    std::fs::write(path, bytes)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Every folder under `dir` 0755, and every mtime `epoch` (whatever the umask and the clock).
fn fix_dirs_and_times(dir: &Path, epoch: u64) -> Result<()> {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(epoch);
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            fix_dirs_and_times(&path, epoch)?;
        }
        std::fs::File::open(&path)?.set_modified(time)?;
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    std::fs::File::open(dir)?.set_modified(time)?;
    Ok(())
}
