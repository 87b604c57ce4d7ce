//! An OCI image layout written as one tar archive (what `podman load -i`, `skopeo copy
//! oci-archive:FILE …` and `docker load` take): `oci-layout`, `index.json` naming one manifest,
//! and the blobs under `blobs/sha256/` (the config, the gzipped layers, the manifest), each
//! named by its SHA-256. Nothing is pulled: the image is only what its layers hold.
//!
//! JSON objects are written with sorted keys (serde_json's map), so the same image gives the
//! same bytes, and the manifest's digest (the image's digest in a registry) is reproducible.

use super::archive::{digest, gzip, Tree};
use anyhow::Result;
use serde_json::{json, Map, Value};
use std::path::Path;

pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";

/// An image to write.
pub struct Image {
    /// The image configuration (`application/vnd.oci.image.config.v1+json`), without
    /// `rootfs`, which is added from the layers.
    pub config: Value,
    /// Each layer's file tree, in order.
    pub layers: Vec<Tree>,
    /// The manifest's annotations.
    pub annotations: Map<String, Value>,
    /// The name `podman load` gives it (`org.opencontainers.image.ref.name` in `index.json`).
    pub ref_name: String,
}

/// What was written: the manifest's digest and the config's (podman's image id).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub manifest_digest: String,
    pub config_digest: String,
}

/// A descriptor of `bytes` of `media_type`.
fn descriptor(media_type: &str, bytes: &[u8]) -> Value {
    json!({ "mediaType": media_type, "digest": digest(bytes), "size": bytes.len() })
}

/// Writes `image` as an OCI archive at `out`; every mtime is `epoch`.
pub fn write_archive(image: &Image, epoch: u64, out: &Path) -> Result<Written> {
    let mut blobs: Vec<Vec<u8>> = Vec::new();
    let mut layer_descriptors = Vec::new();
    let mut diff_ids = Vec::new();
    for layer in &image.layers {
        let tar = layer.to_tar(epoch)?;
        diff_ids.push(Value::String(digest(&tar)));
        let gz = gzip(&tar)?;
        layer_descriptors.push(descriptor(LAYER_GZIP, &gz));
        blobs.push(gz);
    }
    let mut config = image.config.clone();
    config["rootfs"] = json!({ "type": "layers", "diff_ids": diff_ids });
    let config = serde_json::to_vec(&config)?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": descriptor(CONFIG, &config),
        "layers": layer_descriptors,
        "annotations": image.annotations,
    }))?;
    let mut manifest_descriptor = descriptor(MANIFEST, &manifest);
    manifest_descriptor["annotations"] =
        json!({ "org.opencontainers.image.ref.name": image.ref_name });
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [manifest_descriptor],
    }))?;
    let written = Written {
        manifest_digest: digest(&manifest),
        config_digest: digest(&config),
    };
    blobs.push(config);
    blobs.push(manifest);
    let mut tree = Tree::new();
    tree.root_file(
        "oci-layout",
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
        0o644,
    )
    .root_file("index.json", index, 0o644)
    .root_dir("blobs")
    .root_dir("blobs/sha256");
    for blob in blobs {
        let name = digest(&blob).replace("sha256:", "blobs/sha256/");
        tree.root_file(&name, blob, 0o644);
    }
    std::fs::write(out, tree.to_tar(epoch)?)?;
    Ok(written)
}

/// The parts of an OCI archive, read back: the manifest `index.json` names, its config, and the
/// layers' uncompressed tars.
#[derive(Debug)]
pub struct ReadBack {
    pub manifest: Value,
    pub manifest_digest: String,
    pub config: Value,
    pub layers: Vec<Vec<u8>>,
}

/// Reads the archive at `path`, checking every blob's digest and size against its descriptor.
pub fn read_archive(path: &Path) -> Result<ReadBack> {
    use anyhow::{bail, Context as _};
    let files: std::collections::BTreeMap<String, Vec<u8>> =
        super::archive::read_tar(&std::fs::read(path)?)?
            .into_iter()
            .collect();
    let blob = |d: &Value| -> Result<Vec<u8>> {
        let digest_text = d["digest"].as_str().context("descriptor without digest")?;
        let name = digest_text.replace("sha256:", "blobs/sha256/");
        let bytes = files.get(&name).with_context(|| format!("no {name}"))?;
        if digest(bytes) != digest_text || Some(bytes.len() as u64) != d["size"].as_u64() {
            bail!("{name} does not match its descriptor");
        }
        Ok(bytes.clone())
    };
    let index: Value = serde_json::from_slice(files.get("index.json").context("no index.json")?)?;
    if files.get("oci-layout").map(|b| &b[..]) != Some(br#"{"imageLayoutVersion":"1.0.0"}"#) {
        bail!("no oci-layout 1.0.0");
    }
    let manifest_descriptor = &index["manifests"][0];
    let manifest_bytes = blob(manifest_descriptor)?;
    let manifest: Value = serde_json::from_slice(&manifest_bytes)?;
    let config = serde_json::from_slice(&blob(&manifest["config"])?)?;
    let mut layers = Vec::new();
    for layer in manifest["layers"].as_array().context("no layers")? {
        layers.push(super::archive::gunzip(&blob(layer)?)?);
    }
    Ok(ReadBack {
        manifest_digest: digest(&manifest_bytes),
        manifest,
        config,
        layers,
    })
}
