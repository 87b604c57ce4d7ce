//! The `[[vendor]]` tables of the configuration file: the vendors whose client credential sets
//! this installation accepts (`docs/clients.md`). Each has a `name` (what the clients it issues
//! are listed under) and `keys`, the path of its public JWK set as `issuer vendor keygen` wrote
//! it (relative to the configuration file's folder), a file the issuer trusts as it trusts its
//! configuration: its owner, folder and link target checked, no writing by group or others.
//! `issuer serve` reads them again on SIGHUP. A table's `revocations`, the path of a file where
//! the installation puts the vendor's revocation list, is watched by `issuer serve` (read each
//! minute and at SIGHUP, applied when it changed).

use crate::secret_file::Rule;
use crate::vendor::Trust;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// One `[[vendor]]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct VendorTable {
    name: String,
    keys: PathBuf,
    /// A file `issuer serve` watches for the vendor's revocation list.
    revocations: Option<PathBuf>,
}

/// The vendors of `value` (the array of `[[vendor]]` tables) with their keys read, relative
/// paths taken from `folder`.
pub fn trust_of(value: toml::Value, folder: &Path) -> Result<Trust, String> {
    let tables: Vec<VendorTable> = value.try_into().map_err(|e: toml::de::Error| {
        format!(
            "each [[vendor]] has `name` and `keys`: {}",
            e.message().trim_end()
        )
    })?;
    let mut trust = Trust::default();
    for t in tables {
        let name = t.name.trim();
        if name.is_empty() || name.len() > 100 || name.chars().any(char::is_control) {
            return Err("a vendor's `name` is 1 to 100 characters".into());
        }
        if trust.names().any(|n| n == name) {
            return Err(format!("vendor {name:?} is named twice"));
        }
        let path = folder.join(&t.keys);
        let bytes = crate::secret_file::open("vendor key set", &path, Rule::Config)
            .and_then(|c| c.read(crate::secret_file::READ_LIMIT))
            .map_err(|e| format!("vendor {name:?}: {e}"))?;
        let text = std::str::from_utf8(&bytes).unwrap_or_default();
        let keys = crate::vendor::parse_key_set(text)
            .map_err(|e| format!("vendor {name:?}, {}: {e}", path.display()))?;
        for k in &keys {
            if let Some((other, _)) = trust.key(&k.kid) {
                return Err(format!("vendors {other:?} and {name:?} share a key"));
            }
        }
        trust.add(name, keys);
        if let Some(file) = &t.revocations {
            trust.watch_revocations(name, folder.join(file));
        }
    }
    Ok(trust)
}
