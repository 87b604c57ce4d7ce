//! The one check of every file the issuer reads a secret or its configuration from: the
//! configuration file (`--config`), the TLS key (`--tls-key`), the key-encryption key files
//! (`--kek-file`, `--previous-kek-file`), the database password file (`--store-password-file`),
//! the directory's `bind_password_file`, an apply file's `secret_file`, a DPoP key
//! (`issuer dpop proof --key`) and a backup (`issuer restore --from`). Whoever may change such a
//! file, or put another in its place, chooses what the issuer trusts; whoever may read a secret
//! file holds the secret. So, at start and at every reload:
//!
//! - the file is owned by the effective uid the issuer runs as, or by root;
//! - group and others may neither read nor write it ([`Rule::Secret`], 0600 or stricter), or,
//!   for the configuration file, not write it ([`Rule::Config`]: the file must also be private
//!   when it holds a password, [`Checked::require_private`]);
//! - its folder is owned by the issuer's uid or root, and group and others may not write it (no
//!   exception for a sticky folder such as `/tmp`: such files belong in a folder of their own);
//! - a symbolic link is followed, and the file it resolves to is judged as above, in its own
//!   folder, and so is the folder the link is in.
//!
//! The owner and mode are read from the file opened ([`File::metadata`]), so the content taken
//! is that of the file checked. The rules themselves are pure functions of owner and mode
//! ([`file_fault`], [`folder_fault`]), which the data dir's check
//! (`crate::store::redb::owner`) uses too. Every error names the file and the command that
//! fixes it.

use std::fmt;
use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// What the mode of a file must keep from group and others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// A secret: no access at all for group or others (0600 or stricter).
    Secret,
    /// The configuration file: group and others may not write it; they may read it while it
    /// holds no password (the package installs it `root:issuer 0640`).
    Config,
}

/// Who may own a file or folder the issuer trusts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owners {
    /// The effective uid the issuer runs as, or root.
    MeOrRoot,
    /// The effective uid the issuer runs as alone (the data dir, which the issuer writes).
    Me,
}

/// What is wrong with a file or a folder, judged from its owner and mode alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Another user owns it.
    NotOwned { owner: u32 },
    /// Group or others may read it (a secret file, or a configuration file with a password).
    Readable { mode: u32 },
    /// Group or others may write it.
    Writable { mode: u32 },
    /// Group or others have another access to a secret file (execute).
    Open { mode: u32 },
}

/// The fault of a file of owner `owner` and permission bits `mode` under `rule`, for a process
/// of effective uid `me`; the owner is judged first.
pub fn file_fault(rule: Rule, owner: u32, mode: u32, me: u32) -> Option<Fault> {
    let mode = mode & 0o7777;
    if !owned(Owners::MeOrRoot, owner, me) {
        return Some(Fault::NotOwned { owner });
    }
    match rule {
        Rule::Secret if mode & 0o044 != 0 => Some(Fault::Readable { mode }),
        Rule::Secret | Rule::Config if mode & 0o022 != 0 => Some(Fault::Writable { mode }),
        Rule::Secret if mode & 0o077 != 0 => Some(Fault::Open { mode }),
        _ => None,
    }
}

/// The fault of a folder of owner `owner` and permission bits `mode`, for a process of
/// effective uid `me`, that holds a file the issuer trusts: another owner than `owners`, or
/// writable by group or others (who could rename the file away and put their own there).
pub fn folder_fault(owners: Owners, owner: u32, mode: u32, me: u32) -> Option<Fault> {
    let mode = mode & 0o7777;
    if !owned(owners, owner, me) {
        Some(Fault::NotOwned { owner })
    } else if mode & 0o022 != 0 {
        Some(Fault::Writable { mode })
    } else {
        None
    }
}

fn owned(owners: Owners, owner: u32, me: u32) -> bool {
    owner == me || (owners == Owners::MeOrRoot && owner == 0)
}

/// The effective uid of this process, which owns what the issuer trusts (besides root).
pub fn me() -> u32 {
    nix::unistd::geteuid().as_raw()
}

/// A file as errors name it: what it is to the issuer, its path as given, and the file a
/// symbolic link there resolves to.
#[derive(Debug, Clone)]
pub struct Named {
    what: &'static str,
    path: PathBuf,
    target: Option<PathBuf>,
}

impl fmt::Display for Named {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.what, self.path.display())?;
        match &self.target {
            Some(target) => write!(f, " (a link to {})", target.display()),
            None => Ok(()),
        }
    }
}

impl Named {
    /// The path the fix names: the one given (`chmod` and `chown` follow a link).
    fn fix(&self) -> std::path::Display<'_> {
        self.path.display()
    }
}

/// Why a file the issuer would read a secret or its configuration from is refused. The message
/// names the file and how to fix it; never its content.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file, or its folder, could not be examined or read.
    #[error("{file}: cannot be read")]
    Unreadable {
        file: Box<Named>,
        #[source]
        source: std::io::Error,
    },
    /// It is a folder, a device or a pipe.
    #[error("{file}: not a regular file")]
    NotAFile { file: Box<Named> },
    /// It holds more than a file of its kind may.
    #[error("{file}: larger than {limit} bytes")]
    TooLarge { file: Box<Named>, limit: u64 },
    /// Another user owns the file.
    #[error(
        "{file}: owned by uid {owner}, not by the issuer's user (uid {me}) or root: that user \
         could change it; run chown {me} {}", .file.fix()
    )]
    NotOwned {
        file: Box<Named>,
        owner: u32,
        me: u32,
    },
    /// Group or others may read the file.
    #[error("{file}: mode {mode:04o} lets other users read it; run chmod 600 {}", .file.fix())]
    Readable { file: Box<Named>, mode: u32 },
    /// Group or others may write the file.
    #[error("{file}: mode {mode:04o} lets other users change it; run chmod 600 {}", .file.fix())]
    Writable { file: Box<Named>, mode: u32 },
    /// Group or others may execute a secret file.
    #[error("{file}: mode {mode:04o} opens it to other users; run chmod 600 {}", .file.fix())]
    Open { file: Box<Named>, mode: u32 },
    /// Another user owns the folder of the file (or of the link).
    #[error(
        "{file}: its folder {} is owned by uid {owner}, not by the issuer's user (uid {me}) or \
         root: that user could replace it; run chown {me} {} or move the file",
        .folder.display(), .folder.display()
    )]
    FolderNotOwned {
        file: Box<Named>,
        folder: PathBuf,
        owner: u32,
        me: u32,
    },
    /// Group or others may write the folder of the file (or of the link).
    #[error(
        "{file}: its folder {} (mode {mode:04o}) lets other users replace it; run chmod go-w {} \
         or move the file", .folder.display(), .folder.display()
    )]
    FolderWritable {
        file: Box<Named>,
        folder: PathBuf,
        mode: u32,
    },
}

impl FileError {
    /// The message with its cause, for an error told as a string.
    pub fn describe(&self) -> String {
        match std::error::Error::source(self) {
            Some(cause) => format!("{self}: {cause}"),
            None => self.to_string(),
        }
    }

    fn of_file(file: &Named, fault: Fault, me: u32) -> Self {
        let file = Box::new(file.clone());
        match fault {
            Fault::NotOwned { owner } => Self::NotOwned { file, owner, me },
            Fault::Readable { mode } => Self::Readable { file, mode },
            Fault::Writable { mode } => Self::Writable { file, mode },
            Fault::Open { mode } => Self::Open { file, mode },
        }
    }

    fn of_folder(file: &Named, folder: &Path, fault: Fault, me: u32) -> Self {
        let (file, folder) = (Box::new(file.clone()), folder.to_owned());
        match fault {
            Fault::NotOwned { owner } => Self::FolderNotOwned {
                file,
                folder,
                owner,
                me,
            },
            Fault::Readable { mode } | Fault::Writable { mode } | Fault::Open { mode } => {
                Self::FolderWritable { file, folder, mode }
            }
        }
    }
}

/// A file that passed the check, open for reading.
#[derive(Debug)]
pub struct Checked {
    file: File,
    name: Named,
    owner: u32,
    mode: u32,
}

impl Checked {
    /// Refuses the file unless group and others may not read it either: for a configuration
    /// file that holds a password.
    pub fn require_private(&self) -> Result<(), FileError> {
        let me = me();
        match file_fault(Rule::Secret, self.owner, self.mode, me) {
            Some(fault) => Err(FileError::of_file(&self.name, fault, me)),
            None => Ok(()),
        }
    }

    /// The file, to read from.
    pub fn into_file(self) -> File {
        self.file
    }

    /// Reads the file, which must hold at most `limit` bytes.
    pub fn read(self, limit: u64) -> Result<Zeroizing<Vec<u8>>, FileError> {
        // Sized ahead, so no copy of the secret is left behind by a growing buffer.
        let len = self.file.metadata().map_or(0, |m| m.len()).min(limit);
        let mut bytes = Zeroizing::new(Vec::with_capacity(len as usize + 2));
        if let Err(source) = self.file.take(limit + 1).read_to_end(&mut bytes) {
            let file = Box::new(self.name);
            return Err(FileError::Unreadable { file, source });
        }
        if bytes.len() as u64 > limit {
            return Err(FileError::TooLarge {
                file: Box::new(self.name),
                limit,
            });
        }
        Ok(bytes)
    }
}

/// The most [`read`] takes of a file: far more than any key, password or configuration.
pub const READ_LIMIT: u64 = 1 << 20;

/// Opens `path`, which is the issuer's `what` ("TLS key", "configuration file"), after checking
/// it, the file a link there resolves to and their folders under `rule`.
pub fn open(what: &'static str, path: &Path, rule: Rule) -> Result<Checked, FileError> {
    let mut name = Named {
        what,
        path: path.to_owned(),
        target: None,
    };
    let unreadable = |name: &Named| {
        let file = Box::new(name.clone());
        move |source| FileError::Unreadable { file, source }
    };
    let link = std::fs::symlink_metadata(path).map_err(unreadable(&name))?;
    let real = std::fs::canonicalize(path).map_err(unreadable(&name))?;
    let mut folders = vec![real.parent().unwrap_or(Path::new("/")).to_owned()];
    if link.file_type().is_symlink() {
        name.target = Some(real.clone());
        let own = path.parent().filter(|p| !p.as_os_str().is_empty());
        folders.push(own.unwrap_or(Path::new(".")).to_owned());
    }
    if !std::fs::metadata(&real)
        .map_err(unreadable(&name))?
        .is_file()
    {
        return Err(FileError::NotAFile {
            file: Box::new(name),
        });
    }
    let file = File::open(&real).map_err(unreadable(&name))?;
    let meta = file.metadata().map_err(unreadable(&name))?;
    let (owner, mode, me) = (meta.uid(), meta.mode() & 0o7777, me());
    if let Some(fault) = file_fault(rule, owner, mode, me) {
        return Err(FileError::of_file(&name, fault, me));
    }
    for folder in &folders {
        let meta = std::fs::metadata(folder).map_err(unreadable(&name))?;
        if let Some(fault) = folder_fault(Owners::MeOrRoot, meta.uid(), meta.mode(), me) {
            return Err(FileError::of_folder(&name, folder, fault, me));
        }
    }
    Ok(Checked {
        file,
        name,
        owner,
        mode,
    })
}

/// Reads the secret file `path` (the issuer's `what`), checked under [`Rule::Secret`]; at most
/// [`READ_LIMIT`] bytes.
pub fn read(what: &'static str, path: &Path) -> Result<Zeroizing<Vec<u8>>, FileError> {
    open(what, path, Rule::Secret)?.read(READ_LIMIT)
}

#[cfg(test)]
mod tests;
