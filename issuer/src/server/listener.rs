//! What the HTTP server listens on (`--listen`): a TCP address, or a Unix socket
//! (`unix:/run/issuer/http.sock`), behind one accept loop ([`Listener`]).
//!
//! Why a socket: a TCP port, loopback included, belongs to whoever binds it first. While the
//! issuer restarts, any local account can bind its port and receive what Envoy sends there: the
//! edge client's Basic credential with every feed poll (enough to read every signing key once
//! the issuer is back), and the token requests, passwords and client secrets included. A socket
//! is a file in a folder: [`bind_unix`] binds it only in a folder that the issuer's user owns and
//! that no one else may write (every folder above it too: none writable by others unless
//! sticky), so no other account can put anything at its path, running or not. It is made 0660:
//! the folder's mode and the issuer's group say who may connect (Envoy's user, in that group).
//! A socket file left by a previous run (of the same user, no longer answering) is replaced;
//! anything else at the path is refused, never removed. The socket's peer counts as a loopback
//! peer ([`crate::app::Peer`]). Over TCP, the safe channel is TLS that Envoy verifies.

use crate::app::Peer;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};

/// The prefix of a Unix socket in `--listen`.
pub const UNIX_PREFIX: &str = "unix:";
/// The Unix socket's mode: the issuer's user and group may connect.
pub const SOCKET_MODE: u32 = 0o660;

/// Where `issuer serve` listens: `IP:PORT`, or `unix:/ABSOLUTE/PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddr {
    /// A TCP address (port 0: a free port).
    Tcp(SocketAddr),
    /// A Unix socket's path.
    Unix(PathBuf),
}

impl std::str::FromStr for ListenAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix(UNIX_PREFIX) {
            let path = PathBuf::from(path);
            if !path.is_absolute() || path.file_name().is_none() {
                return Err(format!(
                    "{s}: a Unix socket needs an absolute path to a file, \
                     `unix:/run/issuer/http.sock`"
                ));
            }
            return Ok(Self::Unix(path));
        }
        s.parse().map(Self::Tcp).map_err(|_| {
            format!(
                "{s}: expected IP:PORT (`127.0.0.1:8080`) or unix:PATH \
                 (`unix:/run/issuer/http.sock`)"
            )
        })
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Tcp(addr) => addr.fmt(f),
            Self::Unix(path) => write!(f, "{UNIX_PREFIX}{}", path.display()),
        }
    }
}

/// A listener the accept loop takes connections from, each with its peer.
pub trait Listener: Send + 'static {
    /// One connection.
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    /// The next connection and its peer.
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Stream, Peer)>> + Send;
}

impl Listener for TcpListener {
    type Stream = TcpStream;

    async fn accept(&self) -> io::Result<(TcpStream, Peer)> {
        let (stream, addr) = TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        Ok((stream, Peer::Tcp(addr)))
    }
}

/// A Unix socket bound by [`bind_unix`]; its file is removed when it drops, if it is still the
/// one bound.
#[derive(Debug)]
pub struct UnixSocket {
    listener: UnixListener,
    path: PathBuf,
    /// The socket file's device and inode.
    file: (u64, u64),
}

impl Listener for UnixSocket {
    type Stream = UnixStream;

    async fn accept(&self) -> io::Result<(UnixStream, Peer)> {
        let (stream, _) = self.listener.accept().await?;
        let uid = stream.peer_cred().ok().map(|c| c.uid());
        Ok((stream, Peer::Unix { uid }))
    }
}

impl Drop for UnixSocket {
    fn drop(&mut self) {
        if std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.file) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Why the Unix socket was not bound; the message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SocketError {
    /// Another user owns the socket's folder.
    #[error(
        "{} is owned by uid {owner}, not by uid {me} that runs the issuer: its owner could put \
         another server at the socket's path; `chown {me} {}` it or use a folder of your own",
        .dir.display(), .dir.display()
    )]
    NotOwned { dir: PathBuf, owner: u32, me: u32 },
    /// Group or others may write the socket's folder.
    #[error(
        "{} is writable by group or others (mode {mode:o}), who could take the socket's path \
         while the issuer is stopped: `chmod 750 {}` it",
        .dir.display(), .dir.display()
    )]
    Writable { dir: PathBuf, mode: u32 },
    /// A folder above it may be replaced by someone else.
    #[error(
        "{} (above the socket's folder) is owned by uid {owner} or writable by group or others \
         without the sticky bit (mode {mode:o}): they could replace the socket's folder; use a \
         folder under /run or your own home",
        .dir.display()
    )]
    Ancestor { dir: PathBuf, owner: u32, mode: u32 },
    /// Something other than a stale socket of this user is at the path.
    #[error(
        "{} exists and is not a socket of uid {me}: the issuer replaces only a socket a previous \
         run left; see what it is and remove it yourself",
        .path.display()
    )]
    Occupied { path: PathBuf, me: u32 },
    /// A server answers on the socket.
    #[error("a server answers on {}: is the issuer running already?", .path.display())]
    InUse { path: PathBuf },
    /// A system call failed.
    #[error("{}: {source}", .path.display())]
    Io { path: PathBuf, source: io::Error },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> SocketError + '_ {
    move |source| SocketError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Binds the Unix socket `path` ([`SOCKET_MODE`]) after checking its folder
/// ([`check_socket_folder`]), replacing a stale socket of this user that no server answers on.
pub fn bind_unix(path: &Path) -> Result<UnixSocket, SocketError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    check_socket_folder(dir)?;
    clear_stale(path)?;
    let listener = UnixListener::bind(path).map_err(io_error(path))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
        .map_err(io_error(path))?;
    let meta = std::fs::symlink_metadata(path).map_err(io_error(path))?;
    Ok(UnixSocket {
        listener,
        path: path.to_owned(),
        file: (meta.dev(), meta.ino()),
    })
}

/// Checks that `dir` is owned by the effective uid and writable by no one else, and that no
/// folder above it may be replaced by another user: each is root's or this uid's, and writable
/// by group or others only with the sticky bit (`/tmp`).
pub fn check_socket_folder(dir: &Path) -> Result<(), SocketError> {
    let real = dir.canonicalize().map_err(io_error(dir))?;
    let me = nix::unistd::geteuid().as_raw();
    let meta = std::fs::metadata(&real).map_err(io_error(&real))?;
    let mode = meta.mode() & 0o7777;
    if meta.uid() != me {
        let owner = meta.uid();
        return Err(SocketError::NotOwned {
            dir: real,
            owner,
            me,
        });
    }
    if mode & 0o022 != 0 {
        return Err(SocketError::Writable { dir: real, mode });
    }
    for above in real.ancestors().skip(1) {
        let meta = std::fs::metadata(above).map_err(io_error(above))?;
        let (owner, mode) = (meta.uid(), meta.mode() & 0o7777);
        let shared = mode & 0o022 != 0 && mode & 0o1000 == 0;
        if (owner != 0 && owner != me) || shared {
            let dir = above.to_owned();
            return Err(SocketError::Ancestor { dir, owner, mode });
        }
    }
    Ok(())
}

/// Removes a socket of this user left at `path` by a run that ended; nothing at the path passes.
fn clear_stale(path: &Path) -> Result<(), SocketError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io_error(path)(e)),
    };
    let me = nix::unistd::geteuid().as_raw();
    if !meta.file_type().is_socket() || meta.uid() != me {
        let path = path.to_owned();
        return Err(SocketError::Occupied { path, me });
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(SocketError::InUse {
            path: path.to_owned(),
        }),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            std::fs::remove_file(path).map_err(io_error(path))
        }
        Err(e) => Err(io_error(path)(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_is_an_address_or_an_absolute_socket_path() {
        let tcp: ListenAddr = "127.0.0.1:8080".parse().unwrap();
        assert_eq!(tcp, ListenAddr::Tcp("127.0.0.1:8080".parse().unwrap()));
        let unix: ListenAddr = "unix:/run/issuer/http.sock".parse().unwrap();
        assert_eq!(unix, ListenAddr::Unix("/run/issuer/http.sock".into()));
        assert_eq!(unix.to_string(), "unix:/run/issuer/http.sock");
        assert_eq!(tcp.to_string(), "127.0.0.1:8080");
        for bad in [
            "unix:http.sock",
            "unix:",
            "unix:/",
            "localhost:8080",
            "nowhere",
        ] {
            let e = bad.parse::<ListenAddr>().unwrap_err();
            assert!(e.contains("unix:/run/issuer/http.sock"), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn a_socket_is_bound_0660_only_in_a_private_folder() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("run");
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("http.sock");
        for (mode, ok) in [(0o750, true), (0o700, true), (0o770, false), (0o757, false)] {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            let bound = bind_unix(&path);
            assert_eq!(bound.is_ok(), ok, "{mode:o}: {bound:?}");
            if let Err(e) = bound {
                assert!(e.to_string().contains("chmod 750"), "{e}");
                continue;
            }
            let m = std::fs::symlink_metadata(&path).unwrap();
            assert_eq!(m.mode() & 0o7777, SOCKET_MODE);
            drop(bound);
            assert!(!path.exists(), "the socket leaves with its listener");
        }
    }

    #[tokio::test]
    async fn only_a_stale_socket_of_this_user_is_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("http.sock");
        // A socket no one answers on any more (a run that was killed).
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        let live = bind_unix(&path).expect("a stale socket is replaced");
        let e = bind_unix(&path).unwrap_err();
        assert!(matches!(e, SocketError::InUse { .. }), "{e}");
        drop(live);
        std::fs::write(&path, "not a socket").unwrap();
        let e = bind_unix(&path).unwrap_err();
        assert!(matches!(e, SocketError::Occupied { .. }), "{e}");
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a socket");
    }
}
