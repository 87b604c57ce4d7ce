//! Where the state lives, as `--store` names it: `redb:DIR` (the embedded default; `--data-dir DIR`
//! says the same) or a PostgreSQL URL, and opening it.

use super::kek::{Kek, KekError};
use super::postgres::{ConnectOptions, PgStore};
use super::{OpenError, RefreshPolicy};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use zeroize::Zeroizing;

/// The files a PostgreSQL store is opened with.
#[derive(Debug, Clone, Copy, Default)]
pub struct PgFiles<'a> {
    /// The key-encryption key (required).
    pub kek: Option<&'a Path>,
    /// During a KEK rotation, the previous one.
    pub previous_kek: Option<&'a Path>,
    /// CA certificates (PEM) to verify the database's TLS certificate with.
    pub ca: Option<&'a Path>,
    /// The database password, for a URL without one (`--store-password-file`, mode 0600).
    pub password: Option<&'a Path>,
    /// Where the issuer `LISTEN`s for other issuers' changes, when not at the store's URL (a
    /// pooler in transaction mode in front: `--store-listen-url`).
    pub listen_url: Option<&'a str>,
}

/// A store's location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// The embedded store in this data dir.
    Redb(PathBuf),
    /// A PostgreSQL database (URL in libpq form).
    Postgres(String),
}

impl Location {
    /// `--store` if given, else the data dir.
    pub fn parse(store: Option<&str>, data_dir: &Path) -> Result<Self, OpenError> {
        match store {
            None => Ok(Self::Redb(data_dir.to_owned())),
            Some(s) if s.starts_with("postgres://") || s.starts_with("postgresql://") => {
                Ok(Self::Postgres(s.to_owned()))
            }
            Some(s) => match s.strip_prefix("redb:") {
                Some(dir) if !dir.is_empty() => Ok(Self::Redb(PathBuf::from(dir))),
                _ => Err(OpenError::Config(
                    "--store is redb:DIR or postgres://USER@HOST:PORT/DATABASE".into(),
                )),
            },
        }
    }

    /// The KEK from `kek_file` (required for PostgreSQL), with the previous one from
    /// `previous_file` during a KEK rotation.
    fn kek(kek_file: Option<&Path>, previous_file: Option<&Path>) -> Result<Kek, OpenError> {
        let Some(kek_file) = kek_file else {
            return Err(OpenError::Kek(KekError::NotGiven));
        };
        let kek = Kek::from_file(kek_file)?;
        Ok(match previous_file {
            Some(p) => kek.with_previous(Kek::from_file(p)?),
            None => kek,
        })
    }

    /// Connects to a PostgreSQL location with the key files and CA file of `files`.
    pub async fn connect_postgres(
        url: &str,
        files: &PgFiles<'_>,
        now: u64,
        policy: RefreshPolicy,
    ) -> Result<Arc<PgStore>, OpenError> {
        let kek = Self::kek(files.kek, files.previous_kek)?;
        let options = ConnectOptions {
            ca_file: files.ca,
            password: files.password.map(read_password).transpose()?,
            listen_url: files.listen_url,
        };
        Ok(Arc::new(
            PgStore::connect_options(url, options, kek, now, policy).await?,
        ))
    }
}

/// The database password in `path`: its first line, from a file that passes the check of secret
/// files ([`crate::secret_file`], as the KEK file).
pub fn read_password(path: &Path) -> Result<Zeroizing<Vec<u8>>, OpenError> {
    let name = path.display();
    let bytes = crate::secret_file::read("--store-password-file", path)?;
    let line = bytes.split(|b| *b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.is_empty() {
        return Err(OpenError::Config(format!(
            "--store-password-file {name} is empty: write the password on its first line"
        )));
    }
    Ok(Zeroizing::new(line.to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations() {
        let dir = Path::new("/d");
        assert_eq!(
            Location::parse(None, dir).unwrap(),
            Location::Redb("/d".into())
        );
        assert_eq!(
            Location::parse(Some("redb:/x"), dir).unwrap(),
            Location::Redb("/x".into())
        );
        assert_eq!(
            Location::parse(Some("postgres://app@127.0.0.1:5432/db"), dir).unwrap(),
            Location::Postgres("postgres://app@127.0.0.1:5432/db".into())
        );
        for bad in ["redb:", "mysql://x", "/just/a/path"] {
            assert!(Location::parse(Some(bad), dir).is_err(), "{bad}");
        }
    }

    #[test]
    fn password_files() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("pw");
        std::fs::write(&file, "s3cret\r\nignored\n").unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read_password(&file).unwrap_err().to_string();
        assert!(e.contains("lets other users read it; run chmod 600"), "{e}");
        assert!(!e.contains("s3cret"), "{e}");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_password(&file).unwrap().as_slice(), b"s3cret");
        std::fs::write(&file, "\n").unwrap();
        assert!(read_password(&file)
            .unwrap_err()
            .to_string()
            .contains("empty"));
        let missing = read_password(&tmp.path().join("none")).unwrap_err();
        assert!(missing.to_string().contains("cannot be read"), "{missing}");
    }
}
