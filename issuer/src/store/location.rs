//! Where the state lives, as `--store` names it: `redb:DIR` (the embedded default; `--data-dir DIR`
//! says the same) or a PostgreSQL URL, and opening it.

use super::kek::Kek;
use super::postgres::PgStore;
use super::{OpenError, RefreshPolicy};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The files a PostgreSQL store is opened with.
#[derive(Debug, Clone, Copy, Default)]
pub struct PgFiles<'a> {
    /// The key-encryption key (required).
    pub kek: Option<&'a Path>,
    /// During a KEK rotation, the previous one.
    pub previous_kek: Option<&'a Path>,
    /// CA certificates (PEM) to verify the database's TLS certificate with.
    pub ca: Option<&'a Path>,
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
            return Err(OpenError::Kek(
                "the PostgreSQL store needs --kek-file (env ISSUER_KEK_FILE): the key that seals \
                 signing keys and the hash key in the database"
                    .into(),
            ));
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
        Ok(Arc::new(
            PgStore::connect_with(url, files.ca, kek, now, policy).await?,
        ))
    }
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
}
