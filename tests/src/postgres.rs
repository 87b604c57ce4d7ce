//! A throwaway PostgreSQL cluster for tests: `initdb` into a fresh temp dir (0700), one server on
//! a free loopback port where the role `app` signs in with a random password (SCRAM-SHA-256, even
//! on loopback and the Unix socket: no other local user gets in), serializable isolation by
//! default and fsync on (the product promises durable commits). [`PgCluster::pause`] and
//! [`PgCluster::resume`] stop and restart it in place, on the same port and data, to test riding
//! out a database outage. Dropping it stops the server (`pg_ctl stop -m fast`) and removes the dir.
//!
//! [`PgCluster::start_standby`] adds a streaming standby of a cluster (synchronous or not), and
//! [`PgCluster::kill`] and [`PgCluster::promote`] make a failover of the pair (see [`standby`]).
//!
//! The binaries come from `MMS_PG_BIN` (set by `cargo xtask test`), else the newest
//! `/usr/lib/postgresql/*/bin`. `initdb` refuses to run as root, so as root every server program
//! runs as the `postgres` OS user through `runuser`, in a dir under /tmp (0700) chowned to it.

use anyhow::{bail, Context, Result};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub mod pgbouncer;
pub mod standby;
#[cfg(test)]
mod tests;
pub use standby::Replication;

/// The role tests connect as (SCRAM-SHA-256, with the cluster's random password).
pub const USER: &str = "app";
/// Tries at starting the server, each on another free port, when the port got taken meanwhile.
const START_ATTEMPTS: usize = 5;

/// The PostgreSQL bin dir: `MMS_PG_BIN` if set, else the newest `/usr/lib/postgresql/*/bin`.
pub fn find_bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("MMS_PG_BIN").filter(|v| !v.is_empty()) {
        let dir = PathBuf::from(dir);
        if !dir.join("initdb").is_file() {
            bail!("MMS_PG_BIN={} holds no initdb", dir.display());
        }
        return Ok(dir);
    }
    let missing = "PostgreSQL is not installed: no /usr/lib/postgresql/*/bin/initdb \
                   (apt-get install postgresql, or set MMS_PG_BIN)";
    let mut newest: Option<(Vec<u32>, PathBuf)> = None;
    for entry in std::fs::read_dir("/usr/lib/postgresql").context(missing)? {
        let entry = entry.context("reading /usr/lib/postgresql")?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let version: Vec<u32> = name.split('.').map(|p| p.parse().unwrap_or(0)).collect();
        let bin = entry.path().join("bin");
        if bin.join("initdb").is_file() && newest.as_ref().is_none_or(|(v, _)| version > *v) {
            newest = Some((version, bin));
        }
    }
    newest.map(|(_, bin)| bin).context(missing)
}

/// A running (or paused) throwaway cluster; stopped and removed on drop.
pub struct PgCluster {
    bin: PathBuf,
    dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    port: u16,
    as_postgres: bool,
    /// `app`'s password (random hex).
    password: String,
}

impl PgCluster {
    /// A cluster for a test. A missing PostgreSQL fails the test, saying so
    /// ([`crate::needed_for_test`]); so does one that fails to start.
    pub fn for_test() -> Self {
        let bin = crate::needed_for_test(find_bin_dir());
        Self::start_with(&bin).unwrap_or_else(|e| panic!("{e:#}"))
    }

    /// Starts a cluster with the binaries of [`find_bin_dir`].
    pub fn start() -> Result<Self> {
        Self::start_with(&find_bin_dir()?)
    }

    /// Starts a cluster with the binaries in `bin`: initdb, then the server on a free port.
    pub fn start_with(bin: &Path) -> Result<Self> {
        // From here on, dropping `pg` stops whatever started and removes the dir.
        let mut pg = Self::empty(bin, crate::random_hex()?)?;
        // initdb reads the password from a file the server's user can read; it is removed after.
        let pwfile = tempfile::Builder::new()
            .prefix("mms-pgpw-")
            .tempfile_in("/tmp")
            .context("creating the password file")?;
        std::fs::write(pwfile.path(), &pg.password)?;
        if pg.as_postgres {
            let (uid, gid) = (postgres_id("-u")?, postgres_id("-g")?);
            std::os::unix::fs::chown(pwfile.path(), Some(uid), Some(gid))
                .context("chown postgres the password file")?;
        }
        let mut initdb = pg.command("initdb");
        initdb
            .arg("-D")
            .arg(&pg.dir)
            .args(["-A", "scram-sha-256", "-U", USER])
            .arg(format!("--pwfile={}", pwfile.path().display()));
        // The C locale also keeps the log in English, for the port check below.
        initdb.args(["--no-sync", "-E", "UTF8", "--locale=C"]);
        pg.run(initdb, "initdb")?;
        drop(pwfile);
        pg.start_on_a_free_port()?;
        Ok(pg)
    }

    /// A cluster with an empty data dir (0700, under /tmp, the `postgres` user's when we are
    /// root) and no server yet.
    fn empty(bin: &Path, password: String) -> Result<Self> {
        let tmp = tempfile::Builder::new()
            .prefix("mms-pg-")
            .tempdir_in("/tmp")
            .context("creating a temp dir under /tmp")?;
        let dir = tmp.path().to_owned();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("chmod 0700 {}", dir.display()))?;
        // The dir is ours, so its owner tells who we are.
        let as_postgres = std::fs::metadata(&dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .uid()
            == 0;
        if as_postgres {
            let (uid, gid) = (postgres_id("-u")?, postgres_id("-g")?);
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .with_context(|| format!("chown postgres {}", dir.display()))?;
        }
        Ok(Self {
            bin: bin.to_owned(),
            dir,
            tmp: Some(tmp),
            port: 0,
            as_postgres,
            password,
        })
    }

    /// Starts the server on a free port, another one when the port got taken meanwhile.
    fn start_on_a_free_port(&mut self) -> Result<()> {
        let mut attempt = 1;
        loop {
            self.port = crate::free_port();
            let log_before = self.log().len();
            match self.pg_ctl_start() {
                Ok(()) => return Ok(()),
                Err(e) if attempt < START_ATTEMPTS && port_taken(&self.log(), log_before) => {
                    eprintln!("port {} was taken; trying another ({e:#})", self.port);
                    attempt += 1;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The connection URL, libpq style, with the password: `postgres://app:PW@127.0.0.1:PORT/postgres`.
    /// Keep it out of command lines other users can read (`ps`): pass it in the environment.
    pub fn url(&self) -> String {
        format!(
            "postgres://{USER}:{}@127.0.0.1:{}/postgres",
            self.password, self.port
        )
    }

    /// A login role `name` as `docs/deploy-postgres.md` sets one up, no superuser: it may create
    /// tables in the `public` schema of `postgres` (which PostgreSQL 15 no longer grants every
    /// role), so it owns what it creates there and the harness, as `app`, still reads and
    /// changes them. Its new random password.
    pub fn create_role(&self, name: &str) -> Result<String> {
        let password = crate::random_hex()?;
        self.psql(&format!(
            "CREATE ROLE {name} LOGIN PASSWORD '{password}'; \
             GRANT CREATE ON SCHEMA public TO {name}"
        ))?;
        Ok(password)
    }

    /// [`Self::url`] as the role `user` with `password`.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!(
            "postgres://{user}:{password}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// `app`'s password, for a password file (the URL of [`Self::url`] holds it too).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The server's port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The data directory (also holding the server's log and Unix socket).
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }

    /// The PostgreSQL bin dir in use (`psql` and the others are there).
    pub fn bin_dir(&self) -> &Path {
        &self.bin
    }

    /// The server log's path.
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("log")
    }

    /// The server log so far, for failure messages (empty once the cluster is removed).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The postmaster's pid, while the server runs.
    pub fn pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.dir.join("postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// Turns TLS on: a self-signed certificate for 127.0.0.1 and localhost, taken up with a
    /// configuration reload (no restart). Returns the certificate (PEM) for clients to trust.
    pub fn enable_tls(&self) -> Result<String> {
        use std::os::unix::fs::PermissionsExt;
        let cert =
            rcgen::generate_simple_self_signed(vec!["127.0.0.1".into(), "localhost".into()])?;
        let (crt, key) = (self.dir.join("server.crt"), self.dir.join("server.key"));
        std::fs::write(&crt, cert.cert.pem())?;
        std::fs::write(&key, cert.key_pair.serialize_pem())?;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))?;
        if self.as_postgres {
            let (uid, gid) = (postgres_id("-u")?, postgres_id("-g")?);
            for f in [&crt, &key] {
                std::os::unix::fs::chown(f, Some(uid), Some(gid))
                    .with_context(|| format!("chown postgres {}", f.display()))?;
            }
        }
        self.psql(&format!(
            "ALTER SYSTEM SET ssl_cert_file = '{}'",
            crt.display()
        ))?;
        self.psql(&format!(
            "ALTER SYSTEM SET ssl_key_file = '{}'",
            key.display()
        ))?;
        self.psql("ALTER SYSTEM SET ssl = on")?;
        self.psql("SELECT pg_reload_conf()")?;
        Ok(cert.cert.pem())
    }

    /// Runs `psql URL -Atc SQL` and returns its output, trimmed; fails if psql fails.
    pub fn psql(&self, sql: &str) -> Result<String> {
        let out = Command::new(self.bin.join("psql"))
            .arg(format!(
                "postgres://{USER}@127.0.0.1:{}/postgres",
                self.port
            ))
            .env("PGPASSWORD", &self.password)
            .args(["-w", "-Atc", sql])
            .stdin(Stdio::null())
            .output()
            .context("running psql")?;
        if !out.status.success() {
            bail!(
                "psql -c {sql:?} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    /// Stops the server (`pg_ctl stop -m fast`), keeping its data and port for [`Self::resume`].
    pub fn pause(&mut self) -> Result<()> {
        self.pg_ctl_stop("fast")
    }

    /// Starts the paused server again, on the same port and data.
    pub fn resume(&mut self) -> Result<()> {
        self.pg_ctl_start()
    }

    /// Stops the server if it runs (fast, else immediate, else SIGKILL) and removes the data dir.
    /// Errors are printed: this runs on drop. Calling it again does nothing.
    pub fn stop(&mut self) {
        let Some(tmp) = self.tmp.take() else {
            return;
        };
        if self.dir.join("postmaster.pid").exists() {
            let stopped = self.pg_ctl_stop("fast").or_else(|e| {
                eprintln!("{e:#}; stopping it in immediate mode");
                self.pg_ctl_stop("immediate")
            });
            if let (Err(e), Some(pid)) = (stopped, self.pid()) {
                eprintln!("{e:#}; killing postmaster {pid}");
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
            }
        }
        if let Err(e) = tmp.close() {
            eprintln!("removing {}: {e}", self.dir.display());
        }
    }

    /// A server program from the bin dir, as the `postgres` user when we are root, run in the dir.
    fn command(&self, program: &str) -> Command {
        let path = self.bin.join(program);
        let mut c = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        c.current_dir(&self.dir).stdin(Stdio::null());
        c
    }

    /// Runs a command to its end; on failure the error holds its output and the server log.
    fn run(&self, mut cmd: Command, what: &str) -> Result<()> {
        let out = cmd.output().with_context(|| format!("starting {what}"))?;
        if !out.status.success() {
            bail!(
                "{what} failed ({}): {}{}\n--- {}:\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.log_path().display(),
                self.log()
            );
        }
        Ok(())
    }

    fn pg_ctl_start(&self) -> Result<()> {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on \
             -c default_transaction_isolation=serializable",
            self.port,
            self.dir.display()
        );
        let mut c = self.command("pg_ctl");
        c.arg("-D").arg(&self.dir).args(["-w", "-t", "60", "-l"]);
        c.arg(self.log_path()).arg("-o").arg(options).arg("start");
        self.run(c, &format!("pg_ctl start on port {}", self.port))
    }

    fn pg_ctl_stop(&self, mode: &str) -> Result<()> {
        let mut c = self.command("pg_ctl");
        c.arg("-D")
            .arg(&self.dir)
            .args(["-w", "-t", "60", "-m", mode, "stop"]);
        self.run(c, &format!("pg_ctl stop -m {mode}"))
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether the log written since byte `from` says the port was in use.
fn port_taken(log: &str, from: usize) -> bool {
    log.get(from..)
        .is_some_and(|new| new.contains("Address already in use"))
}

/// `id FLAG postgres`: the uid (`-u`) or gid (`-g`) of the `postgres` OS user.
fn postgres_id(flag: &str) -> Result<u32> {
    let out = Command::new("id")
        .args([flag, "postgres"])
        .output()
        .context("running id")?;
    if !out.status.success() {
        bail!(
            "no postgres OS user (id {flag} postgres: {})",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim()
        .parse()
        .with_context(|| format!("id {flag} postgres printed {text:?}"))
}
