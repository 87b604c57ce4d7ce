//! The images checked with podman (Debian's, with Debian's runc: `podman --runtime runc`, a
//! `containers.conf` of `default_ulimits = []` through `CONTAINERS_CONF`, the host's network):
//!
//! - the issuer image: `podman load` takes it under its name, with the config's digest as its
//!   id and the labels; an admin command in the image against a fresh volume adds a client;
//!   the image's command serves on a free port of 127.0.0.1 (a config mounted at
//!   `/etc/issuer/issuer.toml`), as uid 65532, `/readyz` answers, the client gets a token, and
//!   `podman exec … issuer client list` (through the admin socket) lists it.
//!   The container, the volume and the image are removed, failed or not;
//! - the filter image: one layer holding exactly `plugin.wasm`, `dist/filter.wasm`'s bytes, the
//!   compat annotation, and `podman load` takes it.

use super::check::Endpoint;
use super::check::{client_credentials_token, free_port, output_of, printed_secret, wait_ready};
use super::image::{filter_ref, issuer_ref, FILTER_IMAGE_FILE, GID, ISSUER_IMAGE_FILE, UID};
use super::{archive, oci, Artifacts};
use crate::install;
use crate::util::root;
use anyhow::{ensure, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// podman as it works here, with what it made, removed when dropped.
struct Podman {
    bin: PathBuf,
    conf: PathBuf,
    containers: Vec<String>,
    volumes: Vec<String>,
    images: Vec<String>,
}

impl Podman {
    fn new() -> Result<Podman> {
        let bin = install::ensure_podman()?;
        let dir = root().join("target/dist-podman");
        std::fs::create_dir_all(&dir)?;
        let conf = dir.join("containers.conf");
        std::fs::write(&conf, "[containers]\ndefault_ulimits = []\n")?;
        Ok(Podman {
            bin,
            conf,
            containers: Vec::new(),
            volumes: Vec::new(),
            images: Vec::new(),
        })
    }

    /// `podman --runtime runc ARGS` with the `containers.conf`.
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(["--runtime", "runc"])
            .args(args)
            .env("CONTAINERS_CONF", &self.conf);
        c
    }

    fn out(&self, args: &[&str]) -> Result<String> {
        Ok(String::from_utf8(output_of(&mut self.cmd(args))?)?)
    }

    /// Loads an archive; the image is removed when this is dropped.
    fn load(&mut self, archive: &Path, name: &str) -> Result<()> {
        let said = self.out(&["load", "-i", &archive.to_string_lossy()])?;
        self.images.push(name.to_owned());
        ensure!(
            said.contains(name),
            "podman load named it otherwise: {said}"
        );
        Ok(())
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let quiet = |args: &[&str]| {
            let _ = self.cmd(args).output();
        };
        for c in &self.containers {
            quiet(&["rm", "-f", "-t", "2", c]);
        }
        for v in &self.volumes {
            quiet(&["volume", "rm", "-f", v]);
        }
        for i in &self.images {
            quiet(&["rmi", "-f", i]);
        }
    }
}

/// The issuer image, loaded and served (see the module's doc).
pub fn check_issuer_image(made: &Artifacts) -> Result<()> {
    let archive = made.dir.join(ISSUER_IMAGE_FILE);
    let read = oci::read_archive(&archive)?;
    let name = issuer_ref(&made.release);
    let mut podman = Podman::new()?;
    podman.load(&archive, &name)?;
    let id = podman.out(&[
        "image",
        "inspect",
        "--format",
        "{{.Id}} {{.Config.User}}",
        &name,
    ])?;
    let config_digest = read.manifest["config"]["digest"]
        .as_str()
        .unwrap_or_default();
    ensure!(
        id.trim()
            == format!(
                "{} {UID}:{GID}",
                config_digest.trim_start_matches("sha256:")
            ),
        "podman's id and user: {id}"
    );
    let version = "{{index .Labels \"org.opencontainers.image.version\"}}";
    let label = podman.out(&["image", "inspect", "--format", version, &name])?;
    ensure!(
        label.trim() == made.release.version,
        "version label: {label}"
    );
    let config = &read.config["config"];
    ensure!(
        config["Volumes"].get("/var/lib/issuer").is_some()
            && config["Cmd"] == serde_json::json!(["serve", "--config", "/etc/issuer/issuer.toml"]),
        "image config: {config}"
    );
    let suffix = format!("{}-{}", std::process::id(), free_port()?);
    let volume = format!("issuer-dist-check-{suffix}");
    podman.out(&["volume", "create", &volume])?;
    podman.volumes.push(volume.clone());
    let secret = add_client(&podman, &volume, &name)?;
    let port = free_port()?;
    let config = root().join("target/dist-podman/issuer.toml");
    std::fs::write(
        &config,
        format!("listen = \"127.0.0.1:{port}\"\ndata_dir = \"/var/lib/issuer\"\n"),
    )?;
    let container = format!("issuer-dist-check-{suffix}");
    podman.containers.push(container.clone());
    let data = format!("{volume}:/var/lib/issuer");
    let mount = format!("{}:/etc/issuer/issuer.toml:ro", config.display());
    podman.out(&[
        "run",
        "-d",
        "--name",
        &container,
        "--network",
        "host",
        "-v",
        &data,
        "-v",
        &mount,
        &name,
    ])?;
    if let Err(e) = wait_ready(Endpoint::Port(port), Duration::from_secs(30)) {
        let logs = podman.cmd(&["logs", &container]).output()?;
        eprintln!("{}", String::from_utf8_lossy(&logs.stderr));
        return Err(e);
    }
    client_credentials_token(Endpoint::Port(port), "dist-check", &secret)?;
    // An admin command beside the running server, through its admin socket in the volume.
    let listed = podman.out(&["exec", &container, "issuer", "client", "list"])?;
    ensure!(listed.contains("dist-check"), "client list: {listed}");
    check_runs_as_user(&podman, &container)
}

/// The container's process runs as [`UID`].
fn check_runs_as_user(podman: &Podman, container: &str) -> Result<()> {
    let pid = podman.out(&["inspect", "--format", "{{.State.Pid}}", container])?;
    let status = std::fs::read_to_string(format!("/proc/{}/status", pid.trim()))?;
    let uid = status.lines().find(|l| l.starts_with("Uid:")).unwrap_or("");
    ensure!(
        uid.split_whitespace().nth(1) == Some(&UID.to_string()),
        "the issuer runs as {uid}"
    );
    eprintln!("the container's issuer runs as uid {UID}");
    Ok(())
}

/// `init`, `client add` and `client activate` run in the image against `volume`; returns the
/// secret.
fn add_client(podman: &Podman, volume: &str, image: &str) -> Result<String> {
    let data = format!("{volume}:/var/lib/issuer");
    let admin = |args: &[&str]| {
        let base = ["run", "--rm", "--network", "host", "-v", &data, image];
        podman.out(&[&base[..], args].concat())
    };
    admin(&["init"])?;
    let said = admin(&[
        "client",
        "add",
        "dist-check",
        "--grants",
        "client_credentials",
    ])?;
    let secret = printed_secret(said.as_bytes())?;
    admin(&["client", "activate", "dist-check"])?;
    Ok(secret)
}

/// The filter image: Istio's compat layout, `plugin.wasm` = `dist/filter.wasm`, and podman
/// loads it.
pub fn check_filter_image(made: &Artifacts) -> Result<()> {
    let archive = made.dir.join(FILTER_IMAGE_FILE);
    let read = oci::read_archive(&archive)?;
    ensure!(
        read.manifest["annotations"]["module.wasm.image/variant"] == "compat",
        "no compat annotation: {}",
        read.manifest
    );
    ensure!(read.layers.len() == 1, "{} layers", read.layers.len());
    ensure!(
        read.manifest["layers"][0]["mediaType"] == oci::LAYER_GZIP,
        "layer type: {}",
        read.manifest["layers"][0]
    );
    let files = archive::read_tar(&read.layers[0])?;
    let wasm = std::fs::read(made.dir.join("filter.wasm"))?;
    ensure!(
        files.len() == 1 && files[0].0 == "plugin.wasm" && files[0].1 == wasm,
        "the layer holds {:?}, not plugin.wasm = filter.wasm",
        files.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    ensure!(
        read.manifest_digest == made.filter_image_digest,
        "manifest digest"
    );
    let mut podman = Podman::new()?;
    podman
        .load(&archive, &filter_ref(&made.release))
        .context("podman load of the filter image")?;
    Ok(())
}
