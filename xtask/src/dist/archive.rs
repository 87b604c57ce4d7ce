//! Reproducible tar archives (the `tar` crate) and gzip (`flate2`): a [`Tree`] of entries, each
//! with its own mode and numeric owner, written sorted by path with one mtime for all, and no user
//! or group names, so the same tree gives the same bytes on every machine.

use anyhow::{Context, Result};
use flate2::{Compression, GzBuilder};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::io::{Read, Write};

/// An entry's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Dir,
    File(Vec<u8>),
}

/// An entry: content, permission bits, numeric owner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub content: Content,
    pub mode: u32,
    pub uid: u64,
    pub gid: u64,
}

/// Entries by path (relative, `/`-separated, no trailing `/`), kept sorted.
#[derive(Debug, Default, Clone)]
pub struct Tree {
    entries: BTreeMap<String, Entry>,
}

impl Tree {
    pub fn new() -> Tree {
        Tree::default()
    }

    /// A folder owned by `uid:gid`.
    pub fn dir(&mut self, path: &str, mode: u32, uid: u64, gid: u64) -> &mut Tree {
        self.put(path, Content::Dir, mode, uid, gid)
    }

    /// A folder owned by root, 0755.
    pub fn root_dir(&mut self, path: &str) -> &mut Tree {
        self.dir(path, 0o755, 0, 0)
    }

    /// A file owned by `uid:gid`.
    pub fn file(&mut self, path: &str, bytes: Vec<u8>, mode: u32, uid: u64, gid: u64) -> &mut Tree {
        self.put(path, Content::File(bytes), mode, uid, gid)
    }

    /// A file owned by root.
    pub fn root_file(&mut self, path: &str, bytes: Vec<u8>, mode: u32) -> &mut Tree {
        self.file(path, bytes, mode, 0, 0)
    }

    fn put(&mut self, path: &str, content: Content, mode: u32, uid: u64, gid: u64) -> &mut Tree {
        let entry = Entry {
            content,
            mode,
            uid,
            gid,
        };
        self.entries
            .insert(path.trim_end_matches('/').to_owned(), entry);
        self
    }

    /// The archive: entries sorted by path (a folder before what it holds), mtime `epoch`.
    pub fn to_tar(&self, epoch: u64) -> Result<Vec<u8>> {
        let mut tar = tar::Builder::new(Vec::new());
        for (path, entry) in &self.entries {
            let mut header = tar::Header::new_ustar();
            header.set_mode(entry.mode);
            header.set_uid(entry.uid);
            header.set_gid(entry.gid);
            header.set_mtime(epoch);
            let (name, data): (String, &[u8]) = match &entry.content {
                Content::Dir => {
                    header.set_entry_type(tar::EntryType::Directory);
                    (format!("{path}/"), &[])
                }
                Content::File(bytes) => {
                    header.set_entry_type(tar::EntryType::Regular);
                    (path.clone(), bytes)
                }
            };
            header.set_size(data.len() as u64);
            tar.append_data(&mut header, &name, data)
                .with_context(|| format!("adding {name}"))?;
        }
        Ok(tar.into_inner()?)
    }
}

/// `bytes` gzipped at the best level, with no name and mtime 0 in the header.
pub fn gzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut gz = GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), Compression::best());
    gz.write_all(bytes)?;
    Ok(gz.finish()?)
}

/// `bytes` gunzipped.
pub fn gunzip(bytes: &[u8]) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(bytes).read_to_end(&mut out)?;
    Ok(out)
}

/// The files of a tar archive: path and content, in archive order (folders left out).
pub fn read_tar(bytes: &[u8]) -> Result<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for entry in tar::Archive::new(bytes).entries()? {
        let mut entry = entry?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = entry.path()?.to_string_lossy().into_owned();
        let mut content = Vec::new();
        entry.read_to_end(&mut content)?;
        files.push((path, content));
    }
    Ok(files)
}

/// `sha256:` and the hex SHA-256 of `bytes`, as OCI writes a digest.
pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{}", sha256_hex(bytes))
}

/// The hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Tree {
        let mut t = Tree::new();
        t.root_file("b/file", b"hello".to_vec(), 0o644)
            .dir("b", 0o700, 65532, 65532)
            .root_dir("a");
        t
    }

    #[test]
    fn the_same_tree_gives_the_same_bytes_sorted_with_owners() {
        let one = sample().to_tar(1_700_000_000).unwrap();
        assert_eq!(one, sample().to_tar(1_700_000_000).unwrap());
        let mut archive = tar::Archive::new(&one[..]);
        let seen: Vec<(String, u32, u64, u64)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let h = e.header();
                assert_eq!(h.mtime().unwrap(), 1_700_000_000);
                let path = e.path().unwrap().to_string_lossy().into_owned();
                (path, h.mode().unwrap(), h.uid().unwrap(), h.gid().unwrap())
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("a/".into(), 0o755, 0, 0),
                ("b/".into(), 0o700, 65532, 65532),
                ("b/file".into(), 0o644, 0, 0),
            ]
        );
        assert_eq!(
            read_tar(&one).unwrap(),
            [("b/file".into(), b"hello".to_vec())]
        );
    }

    #[test]
    fn gzip_is_deterministic_and_reversible() {
        let data = sample().to_tar(0).unwrap();
        let gz = gzip(&data).unwrap();
        assert_eq!(gz, gzip(&data).unwrap());
        assert_eq!(gunzip(&gz).unwrap(), data);
        assert!(digest(b"")
            .ends_with("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"));
    }
}
