//! The two OCI images of `dist/`, written by `oci.rs`:
//!
//! - `issuer-image.tar` (`localhost/issuer:VERSION`): one layer built from scratch: the static
//!   issuer at `/usr/bin/issuer`, `/etc/passwd` and `/etc/group` naming its user `issuer`
//!   ([`UID`]:[`GID`], not root), the data dir `/var/lib/issuer` (a volume, the user's, 0700),
//!   the configuration `/etc/issuer/issuer.toml` (`dist-assets/image/issuer.toml`: listen on
//!   `0.0.0.0:8080`), an empty `/tmp`. Entrypoint `issuer`, command
//!   `serve --config /etc/issuer/issuer.toml`; `ISSUER_DATA_DIR=/var/lib/issuer`, so the admin
//!   commands (`podman run … IMAGE client add …`) find the same store.
//! - `filter-image.tar` (`localhost/issuer-filter:VERSION`): `filter.wasm` as Istio's
//!   `WasmPlugin` pulls it, in the "compat" variant of the Wasm image specification that Istio
//!   documents: exactly one layer (`application/vnd.oci.image.layer.v1.tar+gzip`) holding
//!   `plugin.wasm`, and the manifest annotation `module.wasm.image/variant: compat`. Standard
//!   media types, so podman, skopeo and any registry take it.
//!
//! Both carry the `org.opencontainers.image.*` labels and annotations (title, description,
//! version, revision, created = `SOURCE_DATE_EPOCH`, licenses, source when known).

use super::archive::Tree;
use super::oci::{self, Image};
use super::release::Release;
use crate::util::root;
use anyhow::Result;
use serde_json::{json, Map, Value};
use std::path::Path;

/// The image's user and group: numeric, not root, the value distroless images use.
pub const UID: u64 = 65532;
pub const GID: u64 = 65532;
/// Names and files of the images in `dist/`.
pub const ISSUER_IMAGE_FILE: &str = "issuer-image.tar";
pub const FILTER_IMAGE_FILE: &str = "filter-image.tar";
/// The port of the image's configuration.
pub const PORT: u16 = 8080;

/// The image's name as `podman load` gives it.
pub fn issuer_ref(release: &Release) -> String {
    format!("localhost/issuer:{}", release.version)
}

/// The filter image's name as `podman load` gives it.
pub fn filter_ref(release: &Release) -> String {
    format!("localhost/issuer-filter:{}", release.version)
}

/// The `org.opencontainers.image.*` keys of one image.
fn labels(release: &Release, title: &str, description: &str) -> Map<String, Value> {
    let mut labels = Map::new();
    let mut put = |key: &str, value: &str| {
        labels.insert(format!("org.opencontainers.image.{key}"), value.into());
    };
    put("title", title);
    put("description", description);
    put("version", &release.version);
    put("revision", &release.revision);
    put("created", &release.created);
    put("licenses", env!("CARGO_PKG_LICENSE"));
    if let Some(source) = &release.source {
        put("source", source);
    }
    labels
}

/// The issuer image's one layer.
fn issuer_layer(issuer: &Path) -> Result<Tree> {
    let passwd = format!(
        "root:x:0:0:root:/root:/sbin/nologin\nissuer:x:{UID}:{GID}:issuer:/var/lib/issuer:/sbin/nologin\n"
    );
    let group = format!("root:x:0:\nissuer:x:{GID}:\n");
    let config = std::fs::read(root().join("dist-assets/image/issuer.toml"))?;
    let mut tree = Tree::new();
    for dir in ["etc", "usr", "usr/bin", "var", "var/lib"] {
        tree.root_dir(dir);
    }
    tree.root_file("etc/passwd", passwd.into_bytes(), 0o644)
        .root_file("etc/group", group.into_bytes(), 0o644)
        .root_dir("etc/issuer")
        .file("etc/issuer/issuer.toml", config, 0o640, 0, GID)
        .root_file("usr/bin/issuer", std::fs::read(issuer)?, 0o755)
        .dir("var/lib/issuer", 0o700, UID, GID)
        .dir("tmp", 0o1777, 0, 0);
    Ok(tree)
}

/// Writes `dist/issuer-image.tar`; returns the manifest's digest.
pub fn write_issuer_image(release: &Release, issuer: &Path, dist: &Path) -> Result<String> {
    let labels = labels(
        release,
        "issuer",
        "OAuth 2.0 token issuer of the media management service",
    );
    let config = json!({
        "created": release.created,
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "User": format!("{UID}:{GID}"),
            "Env": ["PATH=/usr/bin", "ISSUER_DATA_DIR=/var/lib/issuer"],
            "Entrypoint": ["/usr/bin/issuer"],
            "Cmd": ["serve", "--config", "/etc/issuer/issuer.toml"],
            "ExposedPorts": { format!("{PORT}/tcp"): {} },
            "Volumes": { "/var/lib/issuer": {} },
            "StopSignal": "SIGTERM",
            "Labels": labels,
        },
        "history": [{ "created": release.created, "created_by": "cargo xtask dist (from scratch)" }],
    });
    let image = Image {
        config,
        layers: vec![issuer_layer(issuer)?],
        annotations: labels,
        ref_name: issuer_ref(release),
    };
    let written = oci::write_archive(&image, release.epoch, &dist.join(ISSUER_IMAGE_FILE))?;
    Ok(written.manifest_digest)
}

/// Writes `dist/filter-image.tar`; returns the manifest's digest.
pub fn write_filter_image(release: &Release, wasm: &Path, dist: &Path) -> Result<String> {
    let labels = labels(
        release,
        "issuer-filter",
        "Envoy Wasm filter checking the issuer's bearer tokens (Istio WasmPlugin, compat variant)",
    );
    let mut annotations = labels.clone();
    annotations.insert("module.wasm.image/variant".into(), "compat".into());
    let mut layer = Tree::new();
    layer.root_file("plugin.wasm", std::fs::read(wasm)?, 0o644);
    // What a `FROM scratch` build records; Istio reads only the layer.
    let config = json!({
        "created": release.created,
        "architecture": "amd64",
        "os": "linux",
        "config": { "Labels": labels },
        "history": [{ "created": release.created, "created_by": "cargo xtask dist (plugin.wasm)" }],
    });
    let image = Image {
        config,
        layers: vec![layer],
        annotations,
        ref_name: filter_ref(release),
    };
    let written = oci::write_archive(&image, release.epoch, &dist.join(FILTER_IMAGE_FILE))?;
    Ok(written.manifest_digest)
}
