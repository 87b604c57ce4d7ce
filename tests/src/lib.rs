//! End-to-end harness: the real issuer binary, a real Envoy loading the real `filter.wasm`, and a
//! small media upstream, all on 127.0.0.1. The e2e tests and `cargo xtask demo` both use it. For
//! the stores and directories the issuer talks to, it also starts throwaway servers: PostgreSQL
//! ([`postgres`]), OpenLDAP ([`slapd`]) and a Samba AD domain controller ([`samba`]).
//!
//! Tools come from the environment, set by `cargo xtask test|demo`: `MMS_ENVOY` (the Envoy
//! binary), `MMS_FILTER_WASM` (the release filter module) and optionally `MMS_ISSUER` (default
//! `target/debug/issuer`). Every process started here is stopped by its pid when its handle drops.

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub mod browser;
pub mod directory;
pub mod directory_table;
pub mod envoy;
pub mod failover;
pub mod feed_cluster;
pub mod http1;
pub mod issuer;
pub mod postgres;
pub mod prometheus;
pub mod raw;
pub mod samba;
pub mod slapd;
pub mod soak;
pub mod squatter;
mod stack;
pub mod upstream;
pub mod wait;

pub use directory::{Fixture, LdapClient};
pub use directory_table::DirectoryTable;
pub use envoy::{admin_get, render_full_stack, render_minimal, start_envoy, Ports};
pub use envoy::{validate_shipped_configs, ADMIN_SOCKET};
pub use issuer::{demo, issuer_admin, issuer_admin_on, provision, provision_on};
pub use issuer::{start_issuer, start_issuer_on, StoreArgs};
pub use samba::SambaDc;
pub use slapd::Slapd;
pub use stack::{proof_memory_ready, start_upstream, Options, Stack, ISSUER_ROLE};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_owned()
}

/// Which build of the filter the stacks' Envoy loads: `MMS_FILTER=native` (with the library in
/// `MMS_NATIVE_MODULE`) for the dynamic module, else the Wasm module. `cargo xtask test` runs the
/// Envoy tests once with each.
#[derive(Debug, Clone, Default)]
pub enum Filter {
    /// `filter.wasm` in V8 (`envoy/full-stack.yaml`).
    #[default]
    Wasm,
    /// `libmms_auth.so`, this file, as a dynamic module (`envoy/native.yaml`).
    Native(PathBuf),
}

/// The test binary (`tests/without_envoy/`) whose tests never start Envoy: `cargo xtask test`
/// runs the other one, `through_envoy`, a second time with the native filter in Envoy. Starting
/// Envoy from this binary fails the test ([`envoy`] checks the executable's name), so a test that
/// needs Envoy cannot escape the native filter's run by sitting in the wrong binary.
pub const BINARY_WITHOUT_ENVOY: &str = "without_envoy";

/// The native filter's file name: Envoy loads the module `mms_auth` as `libmms_auth.so`.
pub const NATIVE_LIBRARY: &str = "libmms_auth.so";

/// Paths of the real parts.
#[derive(Debug, Clone)]
pub struct Tools {
    /// The Envoy binary.
    pub envoy: PathBuf,
    /// The release `filter.wasm`.
    pub wasm: PathBuf,
    /// The issuer binary.
    pub issuer: PathBuf,
    /// The filter the stacks run.
    pub filter: Filter,
}

impl Tools {
    /// Tools from the environment, or why not.
    pub fn from_env() -> Result<Self> {
        let issuer = std::env::var_os("MMS_ISSUER")
            .map_or_else(|| root().join("target/debug/issuer"), PathBuf::from);
        if !issuer.exists() {
            bail!(
                "the issuer binary {} is missing (cargo build -p issuer)",
                issuer.display()
            );
        }
        let filter = match std::env::var("MMS_FILTER").as_deref() {
            Ok("native") => Filter::Native(env_path("MMS_NATIVE_MODULE")?),
            Ok("wasm") | Err(_) => Filter::Wasm,
            Ok(other) => bail!("MMS_FILTER={other}: wasm or native"),
        };
        Ok(Self {
            envoy: env_path("MMS_ENVOY")?,
            wasm: env_path("MMS_FILTER_WASM")?,
            issuer,
            filter,
        })
    }

    /// Puts the filter where the shipped configuration of [`Tools::full_stack_config`] finds it
    /// when Envoy runs in `dir`: `filter.wasm`, and with the native filter `libmms_auth.so`.
    pub fn install_filter(&self, dir: &Path) -> Result<()> {
        std::fs::copy(&self.wasm, dir.join("filter.wasm"))?;
        if let Filter::Native(lib) = &self.filter {
            std::fs::copy(lib, dir.join(NATIVE_LIBRARY))?;
        }
        Ok(())
    }

    /// The file of the filter Envoy runs: the Wasm module, or the native library.
    pub fn filter_file(&self) -> &Path {
        match &self.filter {
            Filter::Wasm => &self.wasm,
            Filter::Native(lib) => lib,
        }
    }

    /// The shipped full-stack configuration for this filter, relative to the repository.
    pub fn full_stack_config(&self) -> &'static str {
        match self.filter {
            Filter::Wasm => "envoy/full-stack.yaml",
            Filter::Native(_) => "envoy/native.yaml",
        }
    }

    /// The shipped minimal configuration for this filter (plain HTTP, no issuer route).
    pub fn minimal_config(&self) -> &'static str {
        match self.filter {
            Filter::Wasm => "envoy/minimal.yaml",
            Filter::Native(_) => "envoy/minimal-native.yaml",
        }
    }

    /// How many edge-sync pollers an Envoy with `workers` workers runs: a Wasm VM per worker and
    /// one on the main thread; one for the native filter (on the main thread).
    pub fn pollers(&self, workers: u32) -> u64 {
        match self.filter {
            Filter::Wasm => u64::from(workers) + 1,
            Filter::Native(_) => 1,
        }
    }

    /// Tools for a test, or the test fails saying which is missing ([`needed_for_test`]).
    pub fn for_test() -> Self {
        needed_for_test(Self::from_env())
    }
}

/// How the tests that need a real part get it: what a missing part's failure says.
pub const HOW_TO_RUN: &str = "`cargo xtask test` installs every tool the tests need (Envoy, \
    PostgreSQL, PgBouncer, slapd, Samba, Prometheus, Chromium), builds the modules, sets the \
    MMS_* variables and runs these tests (they are `#[ignore]`d for a plain `cargo test`; with \
    the variables set, `cargo test -- --include-ignored` runs them too)";

/// What a test needs: the part, or the test fails (panics) saying what is missing and how
/// `cargo xtask test` provides it. Never a silent skip: the tests that need a part are
/// `#[ignore]`d with the reason, and run by `cargo xtask test`.
pub fn needed_for_test<T>(part: Result<T>) -> T {
    part.unwrap_or_else(|e| panic!("this test needs what is missing: {e:#}\n{HOW_TO_RUN}"))
}

/// The path named by the environment variable `name`, which must exist, or why not.
pub fn env_path(name: &str) -> Result<PathBuf> {
    let p = PathBuf::from(
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .with_context(|| format!("{name} is not set (run through `cargo xtask test`)"))?,
    );
    if !p.exists() {
        bail!("{name}={} does not exist", p.display());
    }
    Ok(p)
}

/// A command running `program` on the CPUs `pin` (a `taskset` list) if given, else wherever the
/// kernel puts it: the benchmarks keep the measured process and the load generator apart.
pub fn command_on(program: impl AsRef<std::ffi::OsStr>, pin: Option<&str>) -> Command {
    match pin {
        Some(cpus) => {
            let mut c = Command::new("taskset");
            c.args(["-c", cpus]).arg(program);
            c
        }
        None => Command::new(program),
    }
}

/// Seconds since the Unix epoch, by this machine's clock (what the issuer and the filter read).
pub fn unix_now() -> u64 {
    shared::time::unix_seconds(std::time::SystemTime::now())
}

/// A port that was free a moment ago, and that no other call in this process has handed out.
///
/// Ports come from below the kernel's ephemeral range (`ip_local_port_range`), so an outgoing
/// connection of a test, Envoy or the issuer can never be given one between this call and the
/// bind of the process the port is meant for. Asking the kernel for port 0 instead gave such a
/// port, and once in CI an Envoy listener lost it to a connection made meanwhile. The walk starts
/// at an offset drawn from the pid and the clock, so concurrent test processes rarely meet, and a
/// port some process already listens on is skipped.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::OnceLock;
    const LOW: u32 = 10_000;
    static SPAN: OnceLock<u32> = OnceLock::new();
    static NEXT: OnceLock<AtomicU32> = OnceLock::new();
    let span = *SPAN.get_or_init(|| {
        let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u32>().ok())
            .unwrap_or(32_768);
        ephemeral_low.saturating_sub(LOW).max(1_000)
    });
    let next = NEXT.get_or_init(|| {
        let nanos =
            shared::time::since_epoch(std::time::SystemTime::now()).map_or(0, |d| d.subsec_nanos());
        AtomicU32::new(std::process::id().wrapping_mul(7_919) ^ nanos)
    });
    for _ in 0..span {
        let port = (LOW + next.fetch_add(1, Ordering::Relaxed) % span) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port between {LOW} and {}", LOW + span)
}

/// A child process, stopped (SIGTERM, then SIGKILL after 10 s) and reaped on drop.
pub struct Proc {
    child: Option<Child>,
    name: &'static str,
}

impl Proc {
    /// Wraps a started child.
    pub fn new(child: Child, name: &'static str) -> Self {
        Self {
            child: Some(child),
            name,
        }
    }

    /// The pid.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// The exit status, if the process has ended by itself.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Kills the process with SIGKILL, as a crash would, and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The child's standard output, if it was piped and not taken before.
    pub fn stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.as_mut()?.stdout.take()
    }

    /// Hands the child over: it is no longer stopped on drop.
    pub fn into_child(mut self) -> Child {
        self.child.take().expect("the process was stopped already")
    }

    /// Stops the process and returns whether it exited successfully.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let stopped = wait::until_ok_blocking(Duration::from_secs(10), || Ok(child.try_wait()?));
        match stopped {
            Ok(Some(status)) => status.success(),
            _ => {
                eprintln!("{} did not stop on SIGTERM; killing it", self.name);
                let _ = child.kill();
                let _ = child.wait();
                false
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A log file for a process of the stack, created (or emptied) with mode 0600: logs name users
/// and clients, so only the stack's owner reads them.
pub fn private_log(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))?;
    Ok(file)
}

/// 32 random bytes, hex (the harness's key-encryption keys).
pub(crate) fn random_hex() -> Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Writes a self-signed certificate for `localhost` and 127.0.0.1 into `dir/tls/` unless one is
/// there; returns the certificate PEM.
pub fn ensure_tls(dir: &Path) -> Result<String> {
    let tls = dir.join("tls");
    let cert = tls.join("cert.pem");
    if let Ok(pem) = std::fs::read_to_string(&cert) {
        return Ok(pem);
    }
    std::fs::create_dir_all(&tls)?;
    let c = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])?;
    let key = tls.join("key.pem");
    write_private(&key, c.key_pair.serialize_pem().as_bytes())?;
    std::fs::write(&cert, c.cert.pem())?;
    Ok(c.cert.pem())
}

/// Writes a file only its owner can read (mode 0600).
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    Ok(())
}

/// Whether something accepts connections on 127.0.0.1:`port`.
pub fn port_open(port: u16) -> bool {
    let addr: std::net::SocketAddr = ([127, 0, 0, 1], port).into();
    std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok()
}

/// Whether the process runs (a zombie left for a reaper counts as ended).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("State:"))
            .is_some_and(|state| !state.trim_start().starts_with('Z'))
    })
}
