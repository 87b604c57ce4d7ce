//! `issuer serve`: the token server. Its flags and the `[directory]` of its configuration file
//! here, the store opened in `store.rs` and the listeners made in `listen.rs`.

mod admin_http;
mod listen;
mod reload;
mod store;

pub use reload::Reparse;

use crate::data_dir::DataDir;
use anyhow::bail;
use clap::Args;
use issuer::admin;
use issuer::app::{App, Settings};
use issuer::config::{parse_proxy, ConfigFile, DirectoryConfig};
use issuer::directory::Directory;
use issuer::http::AppSlot;
use issuer::logging::LogFormat;
use issuer::server::ListenAddr;
use issuer::store::RefreshPolicy;
use issuer::throttle::ThrottlePolicy;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Args, Clone)]
pub struct Serve {
    /// The file's `[directory]`, validated at startup: users the store does not hold sign in
    /// with it.
    #[arg(skip)]
    directory: Option<Box<DirectoryConfig>>,
    /// The file's `[[vendor]]` tables, their key sets read: whose software statements a client
    /// may register with, and `issuer client import` imports (docs/clients.md).
    #[arg(skip)]
    vendors: Option<issuer::vendor::Trust>,
    /// The file's `[admin_http]`: the admin listener (docs/admin-api.md).
    #[arg(skip)]
    admin_http: Option<Box<issuer::config::admin_http::AdminHttpConfig>>,
    /// Let clients register themselves with a trusted vendor's software statement
    /// (`POST /apiv2/oauth/register`, RFC 7591); they exist pending until activated.
    #[arg(long)]
    registration: bool,
    #[command(flatten)]
    dir: DataDir,
    /// Where to listen: IP:PORT (port 0 picks a free port; the chosen address is printed), or
    /// unix:PATH, a Unix socket (mode 0660) in a folder only the issuer's user may write, which
    /// no other local user can take while the issuer restarts (docs/issuer.md, "Serving").
    #[arg(long, env = "ISSUER_LISTEN", default_value = "127.0.0.1:8080")]
    listen: ListenAddr,
    /// PEM certificate chain: serve HTTPS (needs --tls-key).
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Access token lifetime, seconds.
    #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    access_ttl: u64,
    /// A refresh token unused for this long expires, seconds.
    #[arg(long, default_value_t = 14 * 86_400, value_parser = clap::value_parser!(u64).range(1..))]
    refresh_idle_ttl: u64,
    /// A refresh token family ends this long after sign-in, seconds.
    #[arg(long, default_value_t = 90 * 86_400, value_parser = clap::value_parser!(u64).range(1..))]
    refresh_absolute_ttl: u64,
    /// A rotated refresh token presented again within this window gets the same successor, seconds.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=600))]
    refresh_retry_window: u64,
    /// Issuer identifier and base URL in the metadata document [default: from --listen].
    #[arg(long)]
    public_url: Option<String>,
    /// Take the client address for throttling from X-Forwarded-For, when the connection comes from
    /// a --trusted-proxy (such as the shipped Envoy configuration, which appends the address it
    /// saw). From any other peer the header is ignored.
    #[arg(long)]
    trust_x_forwarded_for: bool,
    /// A proxy whose X-Forwarded-For is believed: an address or a CIDR range, repeatable or comma
    /// separated. Entries are read from the right, skipping trusted proxies. No range wider than
    /// an IPv4 /8 or an IPv6 /7.
    #[arg(
        long = "trusted-proxy",
        env = "ISSUER_TRUSTED_PROXIES",
        value_delimiter = ',',
        default_values = ["127.0.0.1", "::1"],
        value_parser = parse_proxy
    )]
    trusted_proxies: Vec<ipnet::IpNet>,
    /// Log format: `text` (coloured only on a terminal) or `json` (one object per line).
    #[arg(long, env = "ISSUER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// What to log: a level (`error`, `warn`, `info`, `debug`, `trace`) or filter directives
    /// (`info,issuer::directory=debug`); SIGHUP applies a new one. `RUST_LOG`, when set, wins.
    #[arg(long, env = "ISSUER_LOG_LEVEL", default_value = "info", value_parser = issuer::logging::parse_level)]
    log_level: String,
    /// First wait after repeated failed sign-ins (per user from one address after 5, per user
    /// from all addresses after 50, per address after 20), seconds; each further failure doubles
    /// it.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=3600))]
    login_backoff_base: u64,
    /// Longest wait after failed sign-ins, seconds.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    login_backoff_max: u64,
    /// Leading bits of an IPv6 client address that the back-off counts as one address (one
    /// host commonly holds a whole /64).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u8).range(32..=128))]
    login_backoff_ipv6_prefix: u8,
    /// Most memory the embedded store's page cache may use, MiB [default: redb's, 1024]. Resident
    /// memory grows into it as the database is read; bound it on small hosts.
    #[arg(long, env = "ISSUER_STORE_CACHE_MIB", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    store_cache_mib: Option<u64>,
    /// Password hashes verified at once (each takes 19 MiB) [default: CPU count].
    #[arg(long)]
    password_concurrency: Option<usize>,
    /// Revocations (RFC 7009) one client may record a minute, and at once; beyond, the revoke
    /// endpoint answers 429 with Retry-After and records nothing. Each recorded revocation is
    /// kept by every edge until the tokens it covers expire.
    #[arg(long, default_value_t = issuer::app::REVOCATIONS_PER_MINUTE, value_parser = clap::value_parser!(u32).range(1..=60_000))]
    revocations_per_minute: u32,
    /// An edge that stopped polling leaves `issuer edges` and the edges a key rotation waits for
    /// after this long, seconds.
    #[arg(long, default_value_t = issuer::store::edges::EDGE_FORGET_AFTER, value_parser = clap::value_parser!(u64).range(5..=86_400))]
    edge_forget_after: u64,
    /// Days the audit trail keeps an event; older ones are swept.
    #[arg(long, default_value_t = issuer::app::AUDIT_RETENTION_DAYS, value_parser = clap::value_parser!(u64).range(1..=36_500))]
    audit_retention_days: u64,
    /// How far a DPoP proof's `iat` may be from now, either way, seconds; its id is remembered
    /// that long (docs/dpop.md).
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=600))]
    dpop_proof_seconds: u64,
    /// `required`: DPoP proofs must carry a current server nonce (`use_dpop_nonce` answers
    /// give it); `off`: no nonce is asked for.
    #[arg(long, value_enum, default_value_t = DpopNonce::Off)]
    dpop_nonce: DpopNonce,
    /// The longest an edge feed request that asks to wait (`wait=S`) is held until there is news,
    /// seconds; 0: every request is answered at once (edges poll).
    #[arg(long, default_value_t = issuer::app::feed_wait::MAX_WAIT, value_parser = clap::value_parser!(u64).range(0..=issuer::app::feed_wait::MAX_WAIT_LIMIT))]
    feed_max_wait_seconds: u64,
    /// Edge feed requests that may wait at once on this issuer; beyond, a request is answered at
    /// once with `"busy": true` and its edge asks again a poll interval later.
    #[arg(long, default_value_t = issuer::app::feed_wait::MAX_WAITING, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    feed_max_waiting: usize,
    /// Edge feed requests of one edge client that may wait at once.
    #[arg(long, default_value_t = issuer::app::feed_wait::MAX_WAITING_PER_CLIENT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1_000_000))]
    feed_max_waiting_per_client: usize,
}

/// `--dpop-nonce`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DpopNonce {
    /// No nonce asked for.
    Off,
    /// Every proof carries a current server nonce.
    Required,
}

/// `issuer serve`, with the configuration file if it names one; `reparse` reads both again on
/// SIGHUP.
pub fn run(s: Serve, file: Option<ConfigFile>, reparse: Reparse) -> anyhow::Result<()> {
    serve(with_file(s, file)?, reparse)
}

/// `s` with the `[directory]` of its configuration file.
pub fn with_file(mut s: Serve, file: Option<ConfigFile>) -> anyhow::Result<Serve> {
    s.vendors = file.as_ref().map(ConfigFile::vendors).transpose()?;
    s.admin_http = file
        .as_ref()
        .map(ConfigFile::admin_http)
        .transpose()?
        .flatten()
        .map(Box::new);
    s.directory = file
        .map(|f| f.directory())
        .transpose()?
        .flatten()
        .map(Box::new);
    Ok(s)
}

impl Serve {
    /// The options that differ in `new` and take effect only at a restart, by their file keys.
    fn changed_until_restart(&self, new: &Serve) -> Vec<&'static str> {
        let mut changed = Vec::new();
        macro_rules! compare {
            ($($field:ident),*) => {
                $(if self.$field != new.$field {
                    changed.push(stringify!($field));
                })*
            };
        }
        compare!(
            dir,
            listen,
            tls_cert,
            tls_key,
            access_ttl,
            refresh_idle_ttl,
            refresh_absolute_ttl,
            refresh_retry_window,
            public_url,
            trust_x_forwarded_for,
            trusted_proxies,
            log_format,
            login_backoff_base,
            login_backoff_max,
            login_backoff_ipv6_prefix,
            store_cache_mib,
            password_concurrency,
            revocations_per_minute,
            edge_forget_after,
            audit_retention_days
        );
        if changed.contains(&"dir") {
            changed.retain(|c| *c != "dir");
            changed.push("data_dir or store");
        }
        changed
    }

    fn refresh_policy(&self) -> RefreshPolicy {
        RefreshPolicy {
            idle_ttl: self.refresh_idle_ttl,
            absolute_ttl: self.refresh_absolute_ttl,
            retry_window: self.refresh_retry_window,
        }
    }

    fn throttle_policy(&self) -> ThrottlePolicy {
        ThrottlePolicy {
            base_delay: self.login_backoff_base,
            max_delay: self.login_backoff_max.max(self.login_backoff_base),
            ipv6_prefix: self.login_backoff_ipv6_prefix,
            ..ThrottlePolicy::default()
        }
    }

    /// The settings of an issuer listening on `addr` (as bound), with TLS or not.
    fn settings(&self, addr: &ListenAddr, tls: bool) -> Settings {
        let scheme = if tls { "https" } else { "http" };
        // A socket has no address a client could name: the metadata says localhost unless
        // --public-url says what clients use.
        let host = match addr {
            ListenAddr::Tcp(addr) => addr.to_string(),
            ListenAddr::Unix(_) => "localhost".to_owned(),
        };
        Settings {
            access_ttl: self.access_ttl,
            refresh: self.refresh_policy(),
            trusted_proxies: if self.trust_x_forwarded_for {
                self.trusted_proxies.clone()
            } else {
                Vec::new()
            },
            public_url: self
                .public_url
                .clone()
                .unwrap_or_else(|| format!("{scheme}://{host}")),
            tls,
            revocations_per_minute: self.revocations_per_minute,
            edge_forget_after: self.edge_forget_after,
            shared_store: false,
            dpop: issuer::app::DpopSettings {
                proof_seconds: self.dpop_proof_seconds,
                nonce_required: self.dpop_nonce == DpopNonce::Required,
            },
            feed: issuer::app::feed_wait::FeedWaitSettings {
                max_wait: self.feed_max_wait_seconds,
                max_waiting: self.feed_max_waiting,
                max_waiting_per_client: self.feed_max_waiting_per_client,
            },
        }
    }
}

fn serve(s: Serve, reparse: reload::Reparse) -> anyhow::Result<()> {
    let log = issuer::logging::init(s.log_format, &s.log_level);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let source = store::prepare(&s)?;
    let (tls, certificates) = match (&s.tls_cert, &s.tls_key) {
        (Some(c), Some(k)) => {
            let (acceptor, certificates) = listen::tls_acceptor(c, k)?;
            (Some(acceptor), Some(certificates))
        }
        (None, None) => (None, None),
        _ => bail!("tls_cert and tls_key go together"),
    };
    let reload = move |running: Serve, app, admin| reload::Reloader {
        running,
        reparse,
        log,
        certificates,
        app,
        admin,
    };
    runtime.block_on(serve_on(s, source, tls, reload))
}

/// Serves until SIGTERM or Ctrl-C: HTTP(S) from the start (503 but for `/livez` until the store
/// opens), then the admin socket of the embedded store, and the periodic sweep and reloads.
async fn serve_on(
    mut s: Serve,
    source: store::Source,
    tls: Option<tokio_rustls::TlsAcceptor>,
    reload: impl FnOnce(Serve, Arc<App>, Option<admin_http::AdminListener>) -> reload::Reloader,
) -> anyhow::Result<()> {
    let hup = reload::Reloader::listen()?;
    let data_dir = match &source {
        store::Source::Redb(opened) => opened.as_ref().and_then(|o| o.data_dir.clone()),
        store::Source::Postgres(_) => None,
    };
    let tls_on = tls.is_some();
    let scheme = if tls_on { "https" } else { "http" };
    let slot = AppSlot::default();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let stopping = stopped.clone();
    let shutdown = until_stopped(stopped.clone());
    let (server, addr) = listen::serve_http_on(&s.listen, slot.clone(), tls, shutdown).await?;
    let settings = Settings {
        shared_store: data_dir.is_none(),
        ..s.settings(&addr, tls_on)
    };
    tokio::spawn(async move {
        issuer::server::shutdown_signal().await;
        let _ = stop.send(true);
    });
    tracing::info!(%addr, scheme, "listening; opening the store");
    let mut app = tokio::select! {
        app = store::start(&s, source, settings) => app?,
        () = until_stopped(stopped) => {
            let _ = server.await;
            return Ok(());
        }
    };
    app.audit_retention = s.audit_retention_days * 86_400;
    let app = Arc::new(ready(app, s.directory.take()).await?);
    app.set_vendors(s.vendors.clone().unwrap_or_default(), s.registration);
    slot.set(app.clone());
    let admin_http = admin_http::start_if(s.admin_http.as_deref(), &app, &stopping).await?;
    // The embedded store takes admin commands over its socket; with PostgreSQL they write to
    // the database, and every issuer reads the change from there.
    if let Some(dir) = &data_dir {
        let admin_listener = listen::bind_admin_socket(dir)?;
        tokio::spawn(issuer::server::serve_admin(app.clone(), admin_listener));
    }
    spawn_background(&app);
    // At a stop, edge feed requests waiting for news are answered before the drain.
    let closing = app.clone();
    tokio::spawn(async move {
        until_stopped(stopping).await;
        closing.close_feed();
    });
    let running = Serve {
        directory: None,
        ..s.clone()
    };
    let admin_line = admin_http.as_ref().map(|a| a.line()).unwrap_or_default();
    tokio::spawn(reload(running, app.clone(), admin_http).on_sighup(hup));
    let name = data_dir.as_ref().map_or_else(
        || "postgres".to_owned(),
        |d| format!("redb:{}", d.display()),
    );
    tracing::info!(%addr, scheme, store = name, "issuer serving");
    let main = match &addr {
        ListenAddr::Tcp(addr) => format!("{scheme}://{addr}"),
        ListenAddr::Unix(_) => addr.to_string(),
    };
    announce(&format!("listening on {main}\n{admin_line}"));
    let audit = app.audit.clone();
    drop(app);
    let _ = server.await;
    audit.flush().await;
    if let Some(dir) = &data_dir {
        let _ = std::fs::remove_file(dir.join(admin::SOCKET_FILE));
    }
    tracing::info!("stopped");
    Ok(())
}

/// `app` with the directory of `[directory]`, if any, its store probed once for `/readyz`.
async fn ready(mut app: App, directory: Option<Box<DirectoryConfig>>) -> anyhow::Result<App> {
    if let Some(d) = directory {
        tracing::info!(urls = ?d.urls, kind = ?d.kind, "directory sign-in");
        app = app.with_directory(Arc::new(Directory::new(*d)?));
    }
    if let Err(e) = app.probe_store().await {
        tracing::warn!(
            error = e.to_string(),
            "the store refused the readiness probe's write"
        );
    }
    Ok(app)
}

/// The periodic work of a serving issuer: the sweep, the edges' reports, the key ring and the
/// readiness probe, the directory's probes and recheck.
fn spawn_background(app: &Arc<App>) {
    tokio::spawn(issuer::server::sweep_forever(app.clone()));
    tokio::spawn(issuer::server::expire_vendor_clients_forever(app.clone()));
    tokio::spawn(issuer::server::watch_revocation_files_forever(app.clone()));
    tokio::spawn(issuer::server::flush_edges_forever(app.clone()));
    tokio::spawn(issuer::server::reload_keys_forever(app.clone()));
    tokio::spawn(issuer::server::follow_store_changes_forever(app.clone()));
    tokio::spawn(issuer::server::probe_store_forever(app.clone()));
    tokio::spawn(issuer::server::probe_directory_forever(app.clone()));
    tokio::spawn(issuer::server::recheck_directory_forever(app.clone()));
}

/// Completes once `stopped` turns true (SIGTERM or Ctrl-C).
async fn until_stopped(mut stopped: tokio::sync::watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

/// Prints `lines` in one write (stdout writes up to the last newline at once), and never fails:
/// a reader of the first line alone may close the pipe after it.
fn announce(lines: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(lines.as_bytes());
    let _ = out.flush();
}
