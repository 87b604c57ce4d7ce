//! Whose a data dir is: one that another user owns, or that group or others may write, lets them
//! replace `hash.key` or the database under the issuer, so `issuer serve` and `issuer restore`
//! refuse it ([`check_data_dir`]).

use crate::secret_file::{self, Fault, Owners};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Why a directory may not be a data dir; the message says what to run.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// Another user owns it.
    #[error(
        "{} is owned by uid {owner}, not by uid {me} that runs the issuer: its owner could \
         replace hash.key; `chown {me} {}` it or use a directory of your own",
        .dir.display(), .dir.display()
    )]
    NotOwned {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// The effective uid of this process.
        me: u32,
    },
    /// Group or others may write it.
    #[error(
        "{} is writable by group or others (mode {mode:o}), who could replace hash.key: \
         `chmod 700 {}` it",
        .dir.display(), .dir.display()
    )]
    Writable {
        /// The directory.
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// Its metadata could not be read.
    #[error("{}: {source}", .dir.display())]
    Unreadable {
        /// The directory.
        dir: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
}

/// Checks that `dir`, if it exists, is owned by the effective uid of this process and writable
/// by no one else (a symbolic link is judged by what it points to), by the rules of the folders
/// of secret files ([`crate::secret_file::folder_fault`]), root not excepted: the issuer writes
/// here. An absent `dir` passes: the issuer creates it, 0700 and its own.
pub fn check_data_dir(dir: &Path) -> Result<(), DirError> {
    let meta = match std::fs::metadata(dir) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(DirError::Unreadable {
                dir: dir.to_owned(),
                source,
            })
        }
    };
    let me = secret_file::me();
    let dir = dir.to_owned();
    match secret_file::folder_fault(Owners::Me, meta.uid(), meta.mode(), me) {
        None => Ok(()),
        Some(Fault::NotOwned { owner }) => Err(DirError::NotOwned { dir, owner, me }),
        Some(Fault::Writable { mode } | Fault::Readable { mode } | Fault::Open { mode }) => {
            Err(DirError::Writable { dir, mode })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn own_private_and_absent_dirs_pass_writable_ones_do_not() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        assert!(check_data_dir(&dir).is_ok());
        std::fs::create_dir(&dir).unwrap();
        for (mode, ok) in [(0o700, true), (0o755, true), (0o770, false), (0o702, false)] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let checked = check_data_dir(&dir);
            assert_eq!(checked.is_ok(), ok, "{mode:o}: {checked:?}");
            if let Err(e) = checked {
                assert!(e.to_string().contains("chmod 700"), "{e}");
            }
        }
    }
}
