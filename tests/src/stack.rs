//! A whole stack in one state directory: the issuer (two on PostgreSQL), the media upstream and
//! Envoy with the real filter, provisioned with the demo client and user; stopped when dropped.

use crate::envoy::{
    self, admin_get, render_full_stack, start_envoy, start_envoy_epoch, HotRestart, Ports,
    ADMIN_SOCKET,
};
use crate::issuer::{self, demo, issuer_admin_on, provision_on, start_issuer_on, StoreArgs};
use crate::{ensure_tls, free_port, postgres, random_hex, write_private, Proc, Tools};
use anyhow::{bail, Context, Result};
use shared::dpop::MAX_AHEAD_SECONDS;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warp::Filter;

/// Options of a stack.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Extra `issuer serve` arguments.
    pub issuer_args: Vec<String>,
    /// Use the shipped ports instead of free ones.
    pub shipped_ports: bool,
    /// Two issuers on a throwaway PostgreSQL cluster instead of one on a redb data dir.
    pub postgres: bool,
    /// With [`Options::postgres`]: a synchronous streaming standby too, and the issuers on the
    /// multi-host URL of both with `target_session_attrs=read-write`, for a failover.
    pub standby: bool,
    /// Envoy with two workers, each pulling keys and revocations from the issuer's edge feed as
    /// the edge client [`demo::EDGE_CLIENT`].
    pub edge_sync: bool,
    /// Envoy started for hot restarts (epoch 0, a base id of its own), so that
    /// [`Stack::hot_restart_envoy`] can start the next epoch.
    pub hot_restart: bool,
    /// The issuer on this Unix socket (its folder the test's, checked by the issuer), and both
    /// issuer clusters of Envoy's configuration on it, as shipped; one issuer, on redb.
    pub issuer_socket: Option<PathBuf>,
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
    /// With [`Options::issuer_socket`]: the issuer's socket.
    socket: Option<PathBuf>,
    envoy: Option<Proc>,
    issuers: Vec<Proc>,
    upstream: tokio::task::JoinHandle<()>,
    /// Stopped after the issuers (fields drop in order).
    pg: Option<postgres::PgCluster>,
    /// The standby of `pg`, with [`Options::standby`].
    standby: Option<postgres::PgCluster>,
    /// With [`Options::hot_restart`]: the epoch Envoy runs in.
    hot_restart: Option<HotRestart>,
    /// The second from which a fresh DPoP proof passes every memory of used proofs: each
    /// refuses proofs dated before it began plus [`MAX_AHEAD_SECONDS`] ([`Stack::dpop_ready`]).
    dpop_ready_at: u64,
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
        let (store, (pg, standby), more_issuers) = issuer_state(&dir, &data, opts)?;
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
        tools.install_filter(&dir)?;
        // The issuer names itself by the URL clients use (Envoy's), not its internal address.
        let public_url = format!("https://localhost:{}", ports.listener);
        let mut extra = vec!["--public-url", &public_url];
        extra.extend(opts.issuer_args.iter().map(String::as_str));
        let issuers = match &opts.issuer_socket {
            Some(_) if opts.postgres => bail!("one issuer on a socket: no PostgreSQL"),
            Some(socket) => {
                let log = dir.join("issuer.log");
                vec![issuer::start_issuer_on_socket(tools, &store, socket, &extra, &log)?.0]
            }
            None => {
                let ports = std::iter::once(ports.issuer).chain(more_issuers.iter().copied());
                start_issuers(tools, &store, &dir, ports, &extra)?
            }
        };
        let upstream = start_upstream(ports.media).await?;
        let base_id_file = dir.join("envoy.base-id");
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
            socket: opts.issuer_socket.clone(),
            envoy: None,
            issuers,
            upstream,
            pg,
            standby,
            hot_restart: opts.hot_restart.then_some(HotRestart {
                epoch: 0,
                base_id_file,
                drain_seconds: 2,
                parent_shutdown_seconds: 4,
            }),
            dpop_ready_at: 0,
        };
        stack.restart_envoy()?;
        Ok(stack)
    }

    /// (Re)starts Envoy with the shipped full-stack configuration and [`Stack::filter_config`].
    pub fn restart_envoy(&mut self) -> Result<()> {
        let cfg = self.filter_config()?;
        self.restart_envoy_with(&cfg)
    }

    /// The plugin configuration: `issuer keys filter-config` for the stack's origin
    /// ([`Stack::url`]), plus the `edge_sync` block for the `issuer_feed` cluster with edge sync.
    pub fn filter_config(&self) -> Result<String> {
        let args = ["keys", "filter-config", "--public-origin", &self.url()];
        let cfg = issuer_admin_on(&self.tools, &self.store, &args, None)?;
        let Some(secret) = &self.edge_secret else {
            return Ok(cfg);
        };
        let mut cfg: serde_json::Value = serde_json::from_str(&cfg)?;
        // The node name: the Wasm filter reports Envoy's (`--service-node`, the same name); the
        // native filter has no other source of it.
        cfg["edge_sync"] = serde_json::json!({
            "cluster": "issuer_feed",
            "client_id": demo::EDGE_CLIENT,
            "client_secret": secret,
            "node": envoy::node_name(self.ports.listener),
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

    /// How many edge-sync pollers this stack's Envoy runs ([`Tools::pollers`]), each reporting
    /// to the issuer as an edge of its own.
    pub fn edge_pollers(&self) -> u64 {
        self.tools.pollers(self.envoy_workers())
    }

    /// Waits until each edge-sync poller (Wasm: one VM per Envoy worker and one on its main
    /// thread; native: one) has had its first good answer from the edge feed.
    pub fn wait_for_edge_sync(&self) -> Result<()> {
        envoy::wait_for_first_answers(&self.dir.join(ADMIN_SOCKET), self.edge_pollers())
            .with_context(|| self.logs())
    }

    /// (Re)starts Envoy with the shipped configuration changed by `edit` (a test's own routes
    /// and clusters beside the shipped ones) and [`Stack::filter_config`]; with edge sync, waits
    /// until every poller has had its first answer.
    pub fn restart_envoy_yaml_edited(
        &mut self,
        edit: impl FnOnce(String) -> Result<String>,
    ) -> Result<()> {
        let yaml = edit(self.envoy_yaml(&self.filter_config()?)?)?;
        self.launch_envoy_yaml(&yaml)?;
        if self.edge_secret.is_some() {
            self.wait_for_edge_sync()?;
        }
        Ok(())
    }

    /// (Re)starts Envoy with the shipped configuration and this plugin configuration JSON, and
    /// waits until it is ready (but not for edge sync).
    fn launch_envoy(&mut self, filter_config: &str) -> Result<()> {
        let yaml = self.envoy_yaml(filter_config)?;
        self.launch_envoy_yaml(&yaml)
    }

    /// (Re)starts Envoy with this configuration and waits until it is ready.
    fn launch_envoy_yaml(&mut self, yaml: &str) -> Result<()> {
        if let Some(mut e) = self.envoy.take() {
            e.stop();
        }
        let path = envoy::write_config(&self.dir, "envoy.yaml", yaml)?;
        let (dir, listener, workers) = (&self.dir, self.ports.listener, self.envoy_workers());
        self.envoy = Some(match &mut self.hot_restart {
            Some(restart) => {
                // A cold start: the first epoch of a new sequence.
                restart.epoch = 0;
                let log = dir.join(format!("envoy-{}.log", restart.epoch));
                start_envoy_epoch(&self.tools, dir, &path, listener, workers, restart, &log)?
            }
            None => start_envoy(
                &self.tools,
                dir,
                &path,
                listener,
                workers,
                &dir.join("envoy.log"),
            )?,
        });
        self.began_a_proof_memory();
        Ok(())
    }

    /// Notes that a memory of used DPoP proofs began now (an Envoy or an issuer started).
    fn began_a_proof_memory(&mut self) {
        self.dpop_ready_at = crate::unix_now() + MAX_AHEAD_SECONDS;
    }

    /// Waits until a proof made now passes the memories of used proofs of the Envoy and the
    /// issuers started last: each refuses, for the first [`MAX_AHEAD_SECONDS`] after it began,
    /// the proofs that a restart may have made it forget (`docs/filter.md`, "Restarts").
    pub async fn dpop_ready(&self) {
        proof_memory_ready(self.dpop_ready_at).await;
    }

    /// The shipped full-stack configuration with this stack's ports, issuers and plugin
    /// configuration.
    fn envoy_yaml(&self, filter_config: &str) -> Result<String> {
        if let Some(socket) = &self.socket {
            return envoy::render_full_stack_on_socket(
                &self.tools,
                self.ports,
                socket,
                filter_config,
            );
        }
        let mut yaml = render_full_stack(&self.tools, self.ports, filter_config)?;
        for port in &self.more_issuers {
            yaml = envoy::add_issuer_endpoint(&yaml, self.ports.issuer, *port)?;
        }
        Ok(yaml)
    }

    /// With [`Options::hot_restart`]: hot restarts Envoy onto [`Stack::filter_config`] as
    /// `docs/deploy-envoy.md` says (the new file validated, the next epoch on the same base id)
    /// and returns the previous process, draining: it exits by itself after
    /// [`HotRestart::parent_shutdown_seconds`].
    pub fn hot_restart_envoy(&mut self) -> Result<Proc> {
        let restart = self
            .hot_restart
            .as_mut()
            .context("not started for hot restarts")?;
        restart.epoch += 1;
        let epoch = restart.epoch;
        let yaml = self.envoy_yaml(&self.filter_config()?)?;
        let path = envoy::write_config(&self.dir, &format!("envoy-{epoch}.yaml"), &yaml)?;
        envoy::validate(&self.tools, &path)?;
        let old = self.envoy.take().context("no Envoy runs")?;
        let restart = self
            .hot_restart
            .as_ref()
            .context("not started for hot restarts")?;
        let (dir, listener, workers) = (&self.dir, self.ports.listener, self.envoy_workers());
        let log = dir.join(format!("envoy-{epoch}.log"));
        self.envoy = Some(start_envoy_epoch(
            &self.tools,
            dir,
            &path,
            listener,
            workers,
            restart,
            &log,
        )?);
        self.began_a_proof_memory();
        Ok(old)
    }

    /// Stops Envoy (gracefully); true if it exited cleanly.
    pub fn stop_envoy(&mut self) -> bool {
        self.envoy.take().is_none_or(|mut e| e.stop())
    }

    /// The HTTPS base URL through Envoy.
    pub fn url(&self) -> String {
        format!("https://localhost:{}", self.ports.listener)
    }

    /// With [`Options::issuer_socket`], the issuer's socket.
    pub fn issuer_socket(&self) -> Option<&Path> {
        self.socket.as_deref()
    }

    /// The issuer's own URL (bypassing Envoy; none listens there with [`Options::issuer_socket`]).
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
            // Settled means unchanged over a whole hand-over period: a window, not a wait.
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
                // The Wasm filter's namespace, or Envoy's for dynamic modules.
                let short = name
                    .strip_prefix("wasmcustom.mms_auth.")
                    .or_else(|| name.strip_prefix("dynamicmodulescustom.mms_auth."))?;
                Some((short.to_owned(), value.trim().parse().ok()?))
            })
            .collect())
    }

    /// The PostgreSQL cluster of a stack started with [`Options::postgres`].
    pub fn postgres(&mut self) -> Option<&mut postgres::PgCluster> {
        self.pg.as_mut()
    }

    /// The standby of a stack started with [`Options::standby`], and the primary, to fail over.
    pub fn postgres_pair(
        &mut self,
    ) -> Option<(&mut postgres::PgCluster, &mut postgres::PgCluster)> {
        Some((self.pg.as_mut()?, self.standby.as_mut()?))
    }

    /// Kills issuer `index` (0 is the first) with SIGKILL, as a crash would.
    pub fn kill_issuer(&mut self, index: usize) -> Result<()> {
        self.issuers
            .get_mut(index)
            .context("no such issuer")?
            .kill();
        Ok(())
    }

    /// Stops issuer `index` (0 is the first) gracefully.
    pub fn stop_issuer(&mut self, index: usize) -> Result<()> {
        let proc = self.issuers.get_mut(index).context("no such issuer")?;
        proc.stop();
        Ok(())
    }

    /// Starts issuer `index` again on its port (or socket), as the stack started it (its log
    /// goes to `issuer-again.log`).
    pub fn start_issuer_again(&mut self, index: usize) -> Result<()> {
        let port = match index {
            0 => self.ports.issuer,
            i => *self.more_issuers.get(i - 1).context("no such issuer")?,
        };
        let extra: Vec<&str> = self.issuer_args.iter().map(String::as_str).collect();
        let log = self.dir.join("issuer-again.log");
        let (proc, _) = match &self.socket {
            Some(socket) => {
                issuer::start_issuer_on_socket(&self.tools, &self.store, socket, &extra, &log)?
            }
            None => start_issuer_on(&self.tools, &self.store, port, &extra, &log)?,
        };
        *self.issuers.get_mut(index).context("no such issuer")? = proc;
        self.began_a_proof_memory();
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

    /// Envoy's log so far.
    pub fn envoy_log(&self) -> String {
        std::fs::read_to_string(self.dir.join("envoy.log")).unwrap_or_default()
    }

    /// The issuer's and Envoy's logs, for failure messages.
    pub fn logs(&self) -> String {
        let issuer = std::fs::read_to_string(self.dir.join("issuer.log")).unwrap_or_default();
        format!(
            "--- issuer.log\n{issuer}\n--- envoy.log\n{}",
            self.envoy_log()
        )
    }

    /// Stops Envoy and the issuer; true if both exited cleanly.
    pub fn stop(mut self) -> bool {
        let envoy_ok = self.envoy.take().is_none_or(|mut e| e.stop());
        let mut issuer_ok = true;
        for issuer in &mut self.issuers {
            issuer_ok &= issuer.stop();
        }
        for mut pg in [self.pg.take(), self.standby.take()].into_iter().flatten() {
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

/// The PostgreSQL role the issuers of a stack run as.
pub const ISSUER_ROLE: &str = "issuer";

/// A primary and, maybe, its standby.
type Clusters = (Option<postgres::PgCluster>, Option<postgres::PgCluster>);

/// Where the issuers' state lives, and the ports of the issuers after the first: with
/// [`Options::postgres`] a throwaway PostgreSQL cluster (returned, to stop after the issuers),
/// with [`Options::standby`] its synchronous standby too, and a second issuer, else the redb
/// data dir `data`.
fn issuer_state(
    dir: &Path,
    data: &Path,
    opts: &Options,
) -> Result<(StoreArgs, Clusters, Vec<u16>)> {
    if !opts.postgres {
        return Ok((StoreArgs::redb(data), (None, None), vec![]));
    }
    let pg = postgres::PgCluster::start()?;
    let standby = if opts.standby {
        Some(pg.start_standby(postgres::Replication::Synchronous)?)
    } else {
        None
    };
    // The issuers connect as the role the deployment guide creates, never as the superuser.
    let password = pg.create_role(ISSUER_ROLE)?;
    let url = match &standby {
        Some(standby) => pg.failover_url_as(ISSUER_ROLE, &password, standby),
        None => pg.url_as(ISSUER_ROLE, &password),
    };
    let kek = dir.join("kek");
    write_private(&kek, format!("{}\n", random_hex()?).as_bytes())?;
    // A new cluster has none of an earlier run's clients; the redb data dir's client
    // secret in `dir` stays for the next run without --postgres.
    let _ = std::fs::remove_dir_all(dir.join("postgres"));
    std::fs::create_dir_all(dir.join("postgres"))?;
    // For the admin commands the demo prints: the URL holds the database's password.
    write_private(&dir.join("postgres/store-url"), url.as_bytes())?;
    let second = if opts.shipped_ports {
        8082
    } else {
        free_port()
    };
    let store = StoreArgs::postgres(&url, &kek);
    Ok((store, (Some(pg), standby), vec![second]))
}

/// Starts an issuer on each of `ports`, logging to `dir/issuer.log`, `issuer2.log`, ...
fn start_issuers(
    tools: &Tools,
    store: &StoreArgs,
    dir: &Path,
    ports: impl Iterator<Item = u16>,
    extra: &[&str],
) -> Result<Vec<Proc>> {
    let mut issuers = Vec::new();
    for (i, port) in ports.enumerate() {
        let log = dir.join(if i == 0 {
            "issuer.log".to_owned()
        } else {
            format!("issuer{}.log", i + 1)
        });
        issuers.push(start_issuer_on(tools, store, port, extra, &log)?.0);
    }
    Ok(issuers)
}

/// Serves the media upstream on `port` until the handle is aborted.
pub async fn start_upstream(port: u16) -> Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .with_context(|| format!("media upstream port {port}"))?;
    let routes = crate::upstream::routes();
    Ok(tokio::spawn(async move {
        warp::serve(routes.boxed()).incoming(listener).run().await;
    }))
}

/// Waits until `ready_at` (seconds since the epoch): for a memory of used DPoP proofs that began
/// at `began`, `began + MAX_AHEAD_SECONDS` ([`Stack::dpop_ready`]).
pub async fn proof_memory_ready(ready_at: u64) {
    crate::wait::until_second(ready_at).await;
}
