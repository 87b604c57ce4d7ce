//! End-to-end harness: the real issuer binary, a real Envoy loading the real `filter.wasm`, and a
//! small media upstream, all on 127.0.0.1. The e2e tests and `cargo xtask demo` both use it.
//!
//! Tools come from the environment, set by `cargo xtask test|demo`: `MMS_ENVOY` (the Envoy
//! binary), `MMS_FILTER_WASM` (the release filter module) and optionally `MMS_ISSUER` (default
//! `target/debug/issuer`). Every process started here is stopped by its pid when its handle drops.

use anyhow::{bail, Context, Result};
use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use warp::Filter;

pub mod envoy;
pub mod issuer;
pub mod postgres;
pub mod raw;
pub mod soak;
pub mod upstream;

pub use envoy::{admin_get, render_full_stack, render_minimal, start_envoy, Ports};
pub use envoy::{validate_shipped_configs, ADMIN_SOCKET};
pub use issuer::{demo, issuer_admin, issuer_admin_on, provision, provision_on};
pub use issuer::{start_issuer, start_issuer_on, StoreArgs};

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_owned()
}

/// Paths of the real parts.
#[derive(Debug, Clone)]
pub struct Tools {
    /// The Envoy binary.
    pub envoy: PathBuf,
    /// The release `filter.wasm`.
    pub wasm: PathBuf,
    /// The issuer binary.
    pub issuer: PathBuf,
}

impl Tools {
    /// Tools from the environment, or why not.
    pub fn from_env() -> Result<Self> {
        let get = |name: &str| -> Result<PathBuf> {
            let p =
                PathBuf::from(std::env::var_os(name).with_context(|| {
                    format!("{name} is not set (run through `cargo xtask test`)")
                })?);
            if !p.exists() {
                bail!("{name}={} does not exist", p.display());
            }
            Ok(p)
        };
        let issuer = std::env::var_os("MMS_ISSUER")
            .map_or_else(|| root().join("target/debug/issuer"), PathBuf::from);
        if !issuer.exists() {
            bail!(
                "the issuer binary {} is missing (cargo build -p issuer)",
                issuer.display()
            );
        }
        Ok(Self {
            envoy: get("MMS_ENVOY")?,
            wasm: get("MMS_FILTER_WASM")?,
            issuer,
        })
    }

    /// Tools for a test. With `CI` set a missing tool fails the test; elsewhere the test is skipped
    /// with a message (returns `None`).
    pub fn for_test() -> Option<Self> {
        needed_for_test(Self::from_env())
    }
}

/// What a test needs, or why not: with `CI` set a missing part fails the test (panics with the
/// reason); elsewhere the test is skipped with a message (`None`).
pub fn needed_for_test<T>(part: Result<T>) -> Option<T> {
    match part {
        Ok(t) => Some(t),
        Err(e)
            if std::env::var_os("CI")
                .is_some_and(|v| !v.is_empty() && v != "false" && v != "0") =>
        {
            panic!("{e:#}")
        }
        Err(e) => {
            eprintln!("SKIPPED: {e:#}");
            None
        }
    }
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
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
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

    /// Stops the process and returns whether it exited successfully.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    eprintln!("{} did not stop on SIGTERM; killing it", self.name);
                    let _ = child.kill();
                    let _ = child.wait();
                    return false;
                }
            }
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stop();
    }
}

/// 32 random bytes, hex (the harness's key-encryption keys).
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

/// 32 random bytes, hex.
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

/// Options of a stack.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Extra `issuer serve` arguments.
    pub issuer_args: Vec<String>,
    /// Use the shipped ports instead of free ones.
    pub shipped_ports: bool,
    /// Two issuers on a throwaway PostgreSQL cluster instead of one on a redb data dir.
    pub postgres: bool,
    /// Envoy with two workers, each pulling keys and revocations from the issuer's edge feed as
    /// the edge client [`demo::EDGE_CLIENT`].
    pub edge_sync: bool,
}

/// Issuer, media upstream and Envoy, running.
pub struct Stack {
    /// The state directory (data dir, tls/, filter.wasm, envoy.yaml, logs).
    pub dir: PathBuf,
    /// The issuer's data dir.
    pub data: PathBuf,
    /// Ports in use.
    pub ports: Ports,
    /// The demo client's secret.
    pub secret: String,
    /// The certificate Envoy serves.
    pub cert_pem: String,
    /// The tools.
    pub tools: Tools,
    /// Where the issuers' state lives.
    pub store: StoreArgs,
    /// Ports of the issuers after the first (`ports.issuer`), with PostgreSQL.
    pub more_issuers: Vec<u16>,
    /// The edge client's secret, with [`Options::edge_sync`].
    pub edge_secret: Option<String>,
    /// `issuer serve` arguments beyond the port and the store.
    issuer_args: Vec<String>,
    envoy: Option<Proc>,
    issuers: Vec<Proc>,
    upstream: tokio::task::JoinHandle<()>,
    /// Stopped after the issuers (fields drop in order).
    pg: Option<postgres::PgCluster>,
}

impl Stack {
    /// Starts everything in `dir`, provisioning the demo client and user on first use.
    pub async fn start(dir: &Path, tools: &Tools, opts: &Options) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
        let dir = dir.canonicalize()?;
        let data = dir.join("data");
        let ports = if opts.shipped_ports {
            Ports::SHIPPED
        } else {
            Ports::free()
        };
        let (store, pg, more_issuers) = if opts.postgres {
            let pg = postgres::PgCluster::start()?;
            let kek = dir.join("kek");
            write_private(&kek, format!("{}\n", random_hex()?).as_bytes())?;
            // A new cluster has none of an earlier run's clients; the redb data dir's client
            // secret in `dir` stays for the next run without --postgres.
            let _ = std::fs::remove_dir_all(dir.join("postgres"));
            std::fs::create_dir_all(dir.join("postgres"))?;
            // For the admin commands the demo prints: the URL holds the database's password.
            write_private(&dir.join("postgres/store-url"), pg.url().as_bytes())?;
            let second = if opts.shipped_ports {
                8082
            } else {
                free_port()
            };
            (StoreArgs::postgres(&pg.url(), &kek), Some(pg), vec![second])
        } else {
            (StoreArgs::redb(&data), None, vec![])
        };
        let secret_dir = if pg.is_some() {
            dir.join("postgres")
        } else {
            dir.clone()
        };
        let secret = provision_on(tools, &secret_dir, &store)?;
        let edge_secret = if opts.edge_sync {
            Some(issuer::provision_edge_on(tools, &secret_dir, &store)?)
        } else {
            None
        };
        let cert_pem = ensure_tls(&dir)?;
        std::fs::copy(&tools.wasm, dir.join("filter.wasm"))?;
        // The issuer names itself by the URL clients use (Envoy's), not its internal address.
        let public_url = format!("https://localhost:{}", ports.listener);
        let mut extra = vec!["--public-url", &public_url];
        extra.extend(opts.issuer_args.iter().map(String::as_str));
        let mut issuers = Vec::new();
        for (i, port) in std::iter::once(ports.issuer)
            .chain(more_issuers.iter().copied())
            .enumerate()
        {
            let log = dir.join(if i == 0 {
                "issuer.log".to_owned()
            } else {
                format!("issuer{}.log", i + 1)
            });
            issuers.push(start_issuer_on(tools, &store, port, &extra, &log)?.0);
        }
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", ports.media))
            .await
            .with_context(|| format!("media upstream port {}", ports.media))?;
        let routes = upstream::routes();
        let upstream = tokio::spawn(async move {
            warp::serve(routes.boxed()).incoming(listener).run().await;
        });
        let mut stack = Self {
            dir,
            data,
            ports,
            secret,
            cert_pem,
            tools: tools.clone(),
            store,
            more_issuers,
            edge_secret,
            issuer_args: extra.iter().map(|a| a.to_string()).collect(),
            envoy: None,
            issuers,
            upstream,
            pg,
        };
        stack.restart_envoy()?;
        Ok(stack)
    }

    /// (Re)starts Envoy with the shipped full-stack configuration and [`Stack::filter_config`].
    pub fn restart_envoy(&mut self) -> Result<()> {
        let cfg = self.filter_config()?;
        self.restart_envoy_with(&cfg)
    }

    /// The plugin configuration: `issuer keys filter-config`, plus the `edge_sync` block for the
    /// `issuer` cluster with edge sync.
    pub fn filter_config(&self) -> Result<String> {
        let cfg = issuer_admin_on(&self.tools, &self.store, &["keys", "filter-config"], None)?;
        let Some(secret) = &self.edge_secret else {
            return Ok(cfg);
        };
        let mut cfg: serde_json::Value = serde_json::from_str(&cfg)?;
        cfg["edge_sync"] = serde_json::json!({
            "cluster": "issuer",
            "client_id": demo::EDGE_CLIENT,
            "client_secret": secret,
        });
        Ok(serde_json::to_string_pretty(&cfg)?)
    }

    /// (Re)starts Envoy with [`Stack::filter_config`] and returns as soon as Envoy is ready,
    /// without waiting for edge sync's first answer: an Envoy started while the issuer is down.
    pub fn restart_envoy_without_waiting(&mut self) -> Result<()> {
        let cfg = self.filter_config()?;
        self.launch_envoy(&cfg)
    }

    /// (Re)starts Envoy with [`Stack::filter_config`] changed by `edit`.
    pub fn restart_envoy_edited(
        &mut self,
        edit: impl FnOnce(&mut serde_json::Value),
    ) -> Result<()> {
        let mut cfg: serde_json::Value = serde_json::from_str(&self.filter_config()?)?;
        edit(&mut cfg);
        self.restart_envoy_with(&cfg.to_string())
    }

    /// (Re)starts Envoy with the shipped configuration and this plugin configuration JSON; with
    /// edge sync, waits until every filter VM has had its first good answer from the feed (until
    /// then the filter answers 503 to every request with a token, `docs/filter.md`).
    pub fn restart_envoy_with(&mut self, filter_config: &str) -> Result<()> {
        self.launch_envoy(filter_config)?;
        let syncs = serde_json::from_str::<serde_json::Value>(filter_config)
            .is_ok_and(|v| v.get("edge_sync").is_some());
        if syncs {
            self.wait_for_edge_sync()?;
        }
        Ok(())
    }

    /// Envoy's worker threads: two with edge sync (to show every worker syncs), else one.
    fn envoy_workers(&self) -> u32 {
        1 + u32::from(self.edge_secret.is_some())
    }

    /// Waits until each filter VM (one per Envoy worker, one on its main thread) has had its
    /// first good answer from the edge feed.
    pub fn wait_for_edge_sync(&self) -> Result<()> {
        let vms = u64::from(self.envoy_workers()) + 1;
        envoy::wait_for_first_answers(&self.dir.join(ADMIN_SOCKET), vms)
            .with_context(|| self.logs())
    }

    /// (Re)starts Envoy with the shipped configuration and this plugin configuration JSON, and
    /// waits until it is ready (but not for edge sync).
    fn launch_envoy(&mut self, filter_config: &str) -> Result<()> {
        if let Some(mut e) = self.envoy.take() {
            e.stop();
        }
        let mut yaml = render_full_stack(self.ports, filter_config)?;
        for port in &self.more_issuers {
            yaml = envoy::add_issuer_endpoint(&yaml, self.ports.issuer, *port)?;
        }
        let path = envoy::write_config(&self.dir, "envoy.yaml", &yaml)?;
        self.envoy = Some(start_envoy(
            &self.tools,
            &self.dir,
            &path,
            self.ports.listener,
            self.envoy_workers(),
            &self.dir.join("envoy.log"),
        )?);
        Ok(())
    }

    /// The HTTPS base URL through Envoy.
    pub fn url(&self) -> String {
        format!("https://localhost:{}", self.ports.listener)
    }

    /// The issuer's own URL (bypassing Envoy).
    pub fn issuer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.issuer)
    }

    /// An HTTP client that trusts the stack's certificate and resolves `localhost` to it.
    pub fn client(&self) -> reqwest::Client {
        self.client_builder().build().expect("client")
    }

    /// A builder of [`Stack::client`], to adjust before building.
    pub fn client_builder(&self) -> reqwest::ClientBuilder {
        let addr: SocketAddr = ([127, 0, 0, 1], self.ports.listener).into();
        reqwest::Client::builder()
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.cert_pem.as_bytes()).expect("PEM"),
            )
            .resolve("localhost", addr)
    }

    /// Runs an admin command against the running issuer.
    pub fn admin(&self, args: &[&str], stdin: Option<&str>) -> Result<String> {
        issuer_admin_on(&self.tools, &self.store, args, stdin)
    }

    /// The filter's counters from Envoy's admin interface, once they have settled: the filter hands
    /// its counts to Envoy once a second, so this reads until two reads 1.1 s apart agree (on all
    /// but edge sync's, which move with every poll).
    pub async fn counters(&self) -> Result<std::collections::HashMap<String, u64>> {
        let mut last = None;
        let requests = |c: &std::collections::HashMap<String, u64>| {
            let mut c = c.clone();
            c.retain(|name, _| !name.starts_with("edge_sync"));
            c
        };
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(1100)).await;
            let now = self.read_counters().await?;
            if last.as_ref().map(requests) == Some(requests(&now)) {
                return Ok(now);
            }
            last = Some(now);
        }
        bail!("the filter's counters did not settle: {last:?}")
    }

    /// The filter's counters as they are right now (they move once a second).
    pub async fn read_counters(&self) -> Result<std::collections::HashMap<String, u64>> {
        let (status, text) = self.envoy_admin("/stats?filter=mms_auth")?;
        if status != 200 {
            bail!("envoy admin /stats answered {status}");
        }
        Ok(text
            .lines()
            .filter_map(|l| {
                let (name, value) = l.split_once(": ")?;
                let short = name.strip_prefix("wasmcustom.mms_auth.")?;
                Some((short.to_owned(), value.trim().parse().ok()?))
            })
            .collect())
    }

    /// The PostgreSQL cluster of a stack started with [`Options::postgres`].
    pub fn postgres(&mut self) -> Option<&mut postgres::PgCluster> {
        self.pg.as_mut()
    }

    /// Kills issuer `index` (0 is the first) with SIGKILL, as a crash would.
    pub fn kill_issuer(&mut self, index: usize) -> Result<()> {
        let proc = self.issuers.get_mut(index).context("no such issuer")?;
        let pid = proc.pid().to_string();
        Command::new("kill").args(["-KILL", &pid]).status()?;
        proc.stop();
        Ok(())
    }

    /// Stops issuer `index` (0 is the first) gracefully.
    pub fn stop_issuer(&mut self, index: usize) -> Result<()> {
        let proc = self.issuers.get_mut(index).context("no such issuer")?;
        proc.stop();
        Ok(())
    }

    /// Starts issuer `index` again on its port, as the stack started it (its log goes to
    /// `issuer-again.log`).
    pub fn start_issuer_again(&mut self, index: usize) -> Result<()> {
        let port = match index {
            0 => self.ports.issuer,
            i => *self.more_issuers.get(i - 1).context("no such issuer")?,
        };
        let extra: Vec<&str> = self.issuer_args.iter().map(String::as_str).collect();
        let log = self.dir.join("issuer-again.log");
        let (proc, _) = start_issuer_on(&self.tools, &self.store, port, &extra, &log)?;
        *self.issuers.get_mut(index).context("no such issuer")? = proc;
        Ok(())
    }

    /// A GET to Envoy's admin interface (the Unix socket in the stack's directory).
    pub fn envoy_admin(&self, path: &str) -> Result<(u16, String)> {
        admin_get(&self.dir.join(ADMIN_SOCKET), path)
    }

    /// Process ids of the issuer and Envoy.
    pub fn pids(&self) -> (u32, u32) {
        (
            self.issuers.first().map_or(0, Proc::pid),
            self.envoy.as_ref().map_or(0, Proc::pid),
        )
    }

    /// The issuer's and Envoy's logs, for failure messages.
    pub fn logs(&self) -> String {
        let read = |f: &str| std::fs::read_to_string(self.dir.join(f)).unwrap_or_default();
        format!(
            "--- issuer.log\n{}\n--- envoy.log\n{}",
            read("issuer.log"),
            read("envoy.log")
        )
    }

    /// Stops Envoy and the issuer; true if both exited cleanly.
    pub fn stop(mut self) -> bool {
        let envoy_ok = self.envoy.take().is_none_or(|mut e| e.stop());
        let mut issuer_ok = true;
        for issuer in &mut self.issuers {
            issuer_ok &= issuer.stop();
        }
        if let Some(mut pg) = self.pg.take() {
            pg.stop();
        }
        self.upstream.abort();
        envoy_ok && issuer_ok
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.upstream.abort();
    }
}
