//! A throwaway PgBouncer in front of a throwaway cluster, configured as `docs/deploy-postgres.md`
//! says ("A pooler in front"): the role `app` with the cluster's password (SCRAM-SHA-256 both
//! ways), `ignore_startup_parameters = options`, on a free loopback port, in a pool mode of the
//! test's choosing. It runs in the foreground as the `postgres` user when we are root (`-u`: one
//! process, whose pid we hold), and is stopped and its dir removed when dropped.
//!
//! The binary is `MMS_PGBOUNCER` (set by `cargo xtask test`), else `/usr/sbin/pgbouncer`, Debian's.

use super::{postgres_id, PgCluster, USER};
use crate::{free_port, Proc};
use anyhow::{bail, Context, Result};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// How PgBouncer hands its server connections to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMode {
    /// A server connection per client connection, for as long as the client stays.
    Session,
    /// A server connection per transaction: the next one may run on another.
    Transaction,
}

impl PoolMode {
    fn name(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Transaction => "transaction",
        }
    }
}

/// The PgBouncer binary: `MMS_PGBOUNCER` if set, else Debian's `/usr/sbin/pgbouncer`.
pub fn find_pgbouncer() -> Result<PathBuf> {
    let bin = std::env::var_os("MMS_PGBOUNCER")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("/usr/sbin/pgbouncer"), PathBuf::from);
    if !bin.is_file() {
        bail!(
            "PgBouncer is not installed: no {} (apt-get install pgbouncer, or set MMS_PGBOUNCER)",
            bin.display()
        );
    }
    Ok(bin)
}

/// A running PgBouncer; stopped (by its pid) and its dir removed on drop.
pub struct PgBouncer {
    proc: Proc,
    dir: tempfile::TempDir,
    port: u16,
    /// `(major, minor)` of `pgbouncer --version`.
    version: (u32, u32),
}

impl PgBouncer {
    /// A PgBouncer for a test in front of `pg`. A missing PgBouncer fails the test, saying so
    /// ([`crate::needed_for_test`]).
    pub fn for_test(pg: &PgCluster, mode: PoolMode) -> Self {
        let bin = crate::needed_for_test(find_pgbouncer());
        Self::start(&bin, pg, mode).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Starts `bin` in front of `pg` in `mode`; returns once it accepts connections.
    pub fn start(bin: &Path, pg: &PgCluster, mode: PoolMode) -> Result<Self> {
        let version = version_of(bin)?;
        let dir = tempfile::Builder::new()
            .prefix("mms-pgbouncer-")
            .tempdir_in("/tmp")
            .context("creating a temp dir under /tmp")?;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700))?;
        let port = free_port();
        let ini = dir.path().join("pgbouncer.ini");
        let users = dir.path().join("users.txt");
        std::fs::write(&ini, config(dir.path(), pg.port(), port, mode, version))?;
        std::fs::write(&users, format!("\"{USER}\" \"{}\"\n", pg.password()))?;
        let as_root = std::fs::metadata(dir.path())?.uid() == 0;
        let mut cmd = Command::new(bin);
        if as_root {
            // PgBouncer refuses to run as root; `-u` makes it switch user without a fork.
            let (uid, gid) = (postgres_id("-u")?, postgres_id("-g")?);
            for path in [dir.path(), &ini, &users] {
                std::os::unix::fs::chown(path, Some(uid), Some(gid))
                    .with_context(|| format!("chown postgres {}", path.display()))?;
            }
            cmd.args(["-u", "postgres"]);
        }
        cmd.arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().context("starting pgbouncer")?;
        let mut bouncer = Self {
            proc: Proc::new(child, "pgbouncer"),
            dir,
            port,
            version,
        };
        bouncer.wait_listening()?;
        Ok(bouncer)
    }

    fn wait_listening(&mut self) -> Result<()> {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let listening = crate::wait::until_ok_blocking(Duration::from_secs(20), || {
            if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(Some(()));
            }
            if let Some(status) = self.proc.exited() {
                bail!("pgbouncer exited ({status}):\n{}", self.log());
            }
            Ok(None)
        })?;
        if listening.is_none() {
            bail!(
                "pgbouncer did not listen on {addr} in 20 s:\n{}",
                self.log()
            );
        }
        Ok(())
    }

    /// The issuer's `--store` URL through this PgBouncer, without the password (give it in a
    /// password file): `postgres://app@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://{USER}@127.0.0.1:{}/postgres", self.port)
    }

    /// `(major, minor)` of this PgBouncer.
    pub fn version(&self) -> (u32, u32) {
        self.version
    }

    /// Whether this PgBouncer keeps named prepared statements across server connections in
    /// transaction mode (`max_prepared_statements`, since 1.21).
    pub fn tracks_prepared_statements(&self) -> bool {
        self.version >= (1, 21)
    }

    /// PgBouncer's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

/// The configuration the docs give, on these ports and in this mode.
fn config(dir: &Path, server: u16, port: u16, mode: PoolMode, version: (u32, u32)) -> String {
    let mut ini = format!(
        "[databases]\n\
         postgres = host=127.0.0.1 port={server} dbname=postgres\n\
         [pgbouncer]\n\
         listen_addr = 127.0.0.1\n\
         listen_port = {port}\n\
         unix_socket_dir =\n\
         auth_type = scram-sha-256\n\
         auth_file = {users}\n\
         pool_mode = {mode}\n\
         ignore_startup_parameters = options\n\
         server_lifetime = 300\n\
         logfile = {log}\n",
        users = dir.join("users.txt").display(),
        mode = mode.name(),
        log = dir.join("pgbouncer.log").display(),
    );
    if version >= (1, 21) {
        ini.push_str("max_prepared_statements = 200\n");
    }
    ini
}

/// `(major, minor)` from `pgbouncer --version` ("PgBouncer 1.18.0 ...").
fn version_of(bin: &Path) -> Result<(u32, u32)> {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", bin.display()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let number = text
        .split_whitespace()
        .nth(1)
        .with_context(|| format!("pgbouncer --version printed {text:?}"))?;
    let mut parts = number.split('.').map(str::parse::<u32>);
    match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => Ok((major, minor)),
        _ => bail!("pgbouncer --version printed {text:?}"),
    }
}
