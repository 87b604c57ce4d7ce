//! The artifacts of `dist/` checked with the tools their users have, for `cargo xtask test`.
//! One function per check, each installing what it needs (`install.rs`; never a skip) and
//! cleaning up after itself, failed or not, so they can run beside other suites:
//!
//! - [`check_static_binary`]: `file` and `ldd` say static; the tarball holds that binary;
//! - [`check_sums`]: `sha256sum -c SHA256SUMS` passes and lists every file;
//! - [`check_signature`]: `SHA256SUMS` signed with a throwaway key verifies with OpenSSL, and a
//!   tampered copy does not (and `SHA256SUMS.sig`, if `dist` signed, verifies with its key);
//! - [`check_reproducible`]: the archives written again from the same inputs are the same bytes
//!   (so the same image digests);
//! - [`check_binary_reproducible`] (`cargo xtask dist --check --rebuild`, minutes): the binary
//!   built again from nothing in another target dir is the same bytes;
//! - `check_image.rs`: the issuer image loaded and served with podman, the filter image's layout;
//! - `check_deb.rs`: the package installed, its unit verified and run as its user, purged.
//!
//! What they share is here: a free port, and HTTP through curl (`/readyz`, a token) to a port or
//! to the issuer's Unix socket ([`Endpoint`]).

use super::release::Release;
use super::{deb, image, sign, sums, tarball, Artifacts};
use crate::install;
use crate::util::root;
use anyhow::{bail, ensure, Context, Result};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub use super::check_deb::check_deb;
pub use super::check_image::{check_filter_image, check_issuer_image};

/// Builds every artifact (`cargo xtask dist`, signed with `sign_key` if given) and runs every
/// check on them; with `rebuild`, [`check_binary_reproducible`] too.
pub fn build_and_check_all(rebuild: bool, sign_key: Option<&Path>) -> Result<()> {
    let started = Instant::now();
    let made = super::build_all(sign_key)?;
    eprintln!("\ndist built in {} s", started.elapsed().as_secs());
    check_static_binary(&made)?;
    check_sums(&made)?;
    check_signature(&made)?;
    check_reproducible(&made)?;
    check_filter_image(&made)?;
    check_issuer_image(&made)?;
    check_deb(&made)?;
    if rebuild {
        check_binary_reproducible(&made)?;
    }
    super::say_signed(&made);
    eprintln!(
        "\ndist checked ({} s in all); issuer image {}, filter image {}",
        started.elapsed().as_secs(),
        made.issuer_image_digest,
        made.filter_image_digest
    );
    Ok(())
}

/// `dist/issuer` is statically linked (`file`, `ldd`), runs, and is the tarball's binary.
pub fn check_static_binary(made: &Artifacts) -> Result<()> {
    let bin = made.dir.join("issuer");
    let file = install::ensure_file()?;
    let out = Command::new(file).arg(&bin).output()?;
    let said = String::from_utf8_lossy(&out.stdout);
    eprintln!("{}", said.trim());
    ensure!(
        said.contains("statically linked") || said.contains("static-pie linked"),
        "file does not call dist/issuer static: {said}"
    );
    super::release::check_static(&bin)?;
    let version = Command::new(&bin).arg("--version").output()?;
    let version = String::from_utf8_lossy(&version.stdout);
    ensure!(
        version.trim() == format!("issuer {}", made.release.version),
        "dist/issuer --version: {version}"
    );
    let tarball = made
        .dir
        .join(format!("{}.tar.gz", tarball::stem(&made.release)));
    let tar = super::archive::gunzip(&std::fs::read(tarball)?)?;
    let inside = format!("{}/issuer", tarball::stem(&made.release));
    let (_, bytes) = super::archive::read_tar(&tar)?
        .into_iter()
        .find(|(path, _)| *path == inside)
        .context("no issuer in the tarball")?;
    ensure!(
        bytes == std::fs::read(&bin)?,
        "the tarball's issuer is not dist/issuer"
    );
    Ok(())
}

/// `sha256sum -c SHA256SUMS` in `dist/`.
pub fn check_sums(made: &Artifacts) -> Result<()> {
    sums::check(&made.dir)
}

/// `SHA256SUMS` signed as `dist --sign-key` signs it, with a throwaway key OpenSSL made, and
/// verified as a user verifies it (`openssl pkeyutl -verify -rawin`, with the public key OpenSSL
/// derives); a copy with one digit changed must fail. If `dist` signed with the release key,
/// `dist/SHA256SUMS.sig` must verify with that key's public half. The throwaway folder is removed.
pub fn check_signature(made: &Artifacts) -> Result<()> {
    let openssl = install::ensure_openssl()?;
    let dir = std::env::temp_dir().join(format!("xtask-dist-sign-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let checked = signature_checks(made, &openssl, &dir);
    std::fs::remove_dir_all(&dir)?;
    checked
}

fn signature_checks(made: &Artifacts, openssl: &Path, dir: &Path) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let key = dir.join("throwaway.key");
    let public = dir.join("release.pub");
    output_of(
        Command::new(openssl)
            .args(["genpkey", "-algorithm", "ed25519", "-out"])
            .arg(&key),
    )?;
    std::fs::set_permissions(&key, PermissionsExt::from_mode(0o600))?;
    output_of(
        Command::new(openssl)
            .args(["pkey", "-pubout", "-in"])
            .arg(&key)
            .arg("-out")
            .arg(&public),
    )?;
    std::fs::copy(made.dir.join(sums::FILE), dir.join(sums::FILE))?;
    let printed = sign::sign_sums(dir, &sign::read_key(&key)?)?;
    ensure!(
        printed == std::fs::read_to_string(&public)?,
        "the public key dist prints is not OpenSSL's:\n{printed}"
    );
    let verify = |public: &Path, sums: &Path, sig: &Path| -> Result<bool> {
        let out = Command::new(openssl)
            .args(["pkeyutl", "-verify", "-pubin", "-inkey"])
            .arg(public)
            .arg("-rawin")
            .arg("-in")
            .arg(sums)
            .arg("-sigfile")
            .arg(sig)
            .output()
            .context("starting openssl")?;
        Ok(out.status.success())
    };
    let (sums, sig) = (dir.join(sums::FILE), dir.join(sign::FILE));
    ensure!(
        verify(&public, &sums, &sig)?,
        "openssl does not verify the signature of {}",
        sums::FILE
    );
    eprintln!("{}: verified by openssl pkeyutl -verify", sign::FILE);
    let mut text = std::fs::read_to_string(&sums)?;
    let first = text.chars().next().context("an empty SHA256SUMS")?;
    let other = if first == '0' { "1" } else { "0" };
    text.replace_range(..first.len_utf8(), other);
    std::fs::write(&sums, text)?;
    ensure!(
        !verify(&public, &sums, &sig)?,
        "openssl verifies a tampered {} against its signature",
        sums::FILE
    );
    eprintln!("{}: a tampered copy fails verification", sums::FILE);
    if let Some(release_public) = &made.signed_by {
        std::fs::write(&public, release_public)?;
        ensure!(
            verify(
                &public,
                &made.dir.join(sums::FILE),
                &made.dir.join(sign::FILE)
            )?,
            "dist/{} does not verify with the release key",
            sign::FILE
        );
        eprintln!("dist/{}: verified with the release key", sign::FILE);
    }
    Ok(())
}

/// The tarball, both images and the package, written again into `target/dist-again/` from the
/// same binary and modules, are byte for byte those of `dist/`: the same digests.
pub fn check_reproducible(made: &Artifacts) -> Result<()> {
    let again = root().join("target/dist-again");
    if again.exists() {
        std::fs::remove_dir_all(&again)?;
    }
    std::fs::create_dir_all(&again)?;
    let release = Release::of_checkout()?;
    ensure!(
        release == made.release,
        "the checkout changed during the checks"
    );
    let (issuer, wasm) = (made.dir.join("issuer"), made.dir.join("filter.wasm"));
    tarball::write(&release, &issuer, &again)?;
    let issuer_digest = image::write_issuer_image(&release, &issuer, &again)?;
    let filter_digest = image::write_filter_image(&release, &wasm, &again)?;
    deb::write(&release, &issuer, &again)?;
    eprintln!("issuer image again: {issuer_digest}\nfilter image again: {filter_digest}");
    ensure!(
        issuer_digest == made.issuer_image_digest,
        "issuer image digest differs"
    );
    ensure!(
        filter_digest == made.filter_image_digest,
        "filter image digest differs"
    );
    for entry in std::fs::read_dir(&again)? {
        let name = entry?.file_name();
        let (one, two) = (made.dir.join(&name), again.join(&name));
        if std::fs::read(&one)? != std::fs::read(&two)? {
            bail!("{} differs when written again", name.to_string_lossy());
        }
        eprintln!("reproducible: {}", name.to_string_lossy());
    }
    std::fs::remove_dir_all(&again)?;
    Ok(())
}

/// The static issuer, built again from nothing in `target/dist-rebuild/` (another folder than
/// the first build's), is byte for byte `dist/issuer`; the folder is removed after.
pub fn check_binary_reproducible(made: &Artifacts) -> Result<()> {
    let dir = "target/dist-rebuild";
    if root().join(dir).exists() {
        std::fs::remove_dir_all(root().join(dir))?;
    }
    let again = super::release::build_static_issuer_in(dir)?;
    let same = std::fs::read(&again)? == std::fs::read(made.dir.join("issuer"))?;
    std::fs::remove_dir_all(root().join(dir))?;
    ensure!(same, "the issuer built again differs from dist/issuer");
    eprintln!("reproducible: issuer (built again from nothing)");
    Ok(())
}

/// A port free on 127.0.0.1 now.
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Where a checked issuer listens.
#[derive(Debug, Clone, Copy)]
pub enum Endpoint<'a> {
    /// 127.0.0.1:PORT.
    Port(u16),
    /// A Unix socket (`listen = "unix:PATH"`).
    Socket(&'a Path),
}

impl Endpoint<'_> {
    /// curl's arguments for `path` here: the URL, after `--unix-socket SOCKET` for a socket.
    fn curl_args(&self, path: &str) -> Vec<String> {
        match self {
            Self::Port(port) => vec![format!("http://127.0.0.1:{port}{path}")],
            Self::Socket(socket) => vec![
                "--unix-socket".to_owned(),
                socket.display().to_string(),
                format!("http://localhost{path}"),
            ],
        }
    }
}

/// Waits up to `limit` for `GET /readyz` at `at` to answer 200.
pub fn wait_ready(at: Endpoint, limit: Duration) -> Result<()> {
    let curl = install::ensure_curl()?;
    let deadline = Instant::now() + limit;
    let url = at.curl_args("/readyz");
    loop {
        let out = Command::new(&curl)
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "--max-time",
                "2",
            ])
            .args(&url)
            .output()?;
        if out.stdout == b"200" {
            eprintln!("{}: 200", url.join(" "));
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} did not answer 200 within {} s (last: {})",
                url.join(" "),
                limit.as_secs(),
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A client_credentials grant as `id`:`secret` at `at`; returns the access token.
pub fn client_credentials_token(at: Endpoint, id: &str, secret: &str) -> Result<String> {
    let curl = install::ensure_curl()?;
    let out = Command::new(curl)
        .args(["-s", "--max-time", "10", "-u", &format!("{id}:{secret}")])
        .args(["-d", "grant_type=client_credentials"])
        .args(at.curl_args("/apiv2/oauth/token"))
        .output()?;
    let body: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("token answer: {}", String::from_utf8_lossy(&out.stdout)))?;
    let token = body["access_token"]
        .as_str()
        .with_context(|| format!("no access_token in {body}"))?;
    ensure!(token.starts_with("mmat1."), "not an access token: {token}");
    eprintln!(
        "client_credentials grant: an access token of {} bytes",
        token.len()
    );
    Ok(token.to_owned())
}

/// The secret that `issuer client add` printed (`secret: …`).
pub fn printed_secret(stdout: &[u8]) -> Result<String> {
    String::from_utf8_lossy(stdout)
        .lines()
        .find_map(|l| l.strip_prefix("secret: "))
        .map(str::to_owned)
        .context("client add printed no secret")
}

/// Runs `cmd`, echoing it; fails with its stderr unless it succeeds; returns its stdout.
pub fn output_of(cmd: &mut Command) -> Result<Vec<u8>> {
    eprintln!("\n$ {cmd:?}");
    let out = cmd.output().with_context(|| format!("starting {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}
