//! The admin listener of `[admin_http]` (part of the `issuer` binary): bound once the store is
//! open, TLS from its own PEM files (read again on a reload) unless it listens on loopback
//! without them, serving `issuer::http::admin` through `issuer::server::serve_admin_http`.

use super::listen::{tls_acceptor, Certificates};
use anyhow::Context as _;
use issuer::app::App;
use issuer::config::admin_http::AdminHttpConfig;
use issuer::http::admin::AdminHttp;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

/// A running admin listener: what a reload changes in it.
pub struct AdminListener {
    /// The routes' state, whose policy a reload replaces.
    pub state: Arc<AdminHttp>,
    /// Its certificate, read again on a reload.
    pub certificates: Option<Arc<Certificates>>,
    /// The table it started with (`listen` and TLS change at a restart).
    pub config: AdminHttpConfig,
    /// Its URL as bound (port 0 resolved).
    pub url: String,
}

impl AdminListener {
    /// The line `issuer serve` prints after `listening on …` once it serves.
    pub fn line(&self) -> String {
        format!("admin listening on {}\n", self.url)
    }
}

/// [`start`] when the configuration file has `[admin_http]`.
/// It stops when `stopped` turns true.
pub async fn start_if(
    config: Option<&AdminHttpConfig>,
    app: &Arc<App>,
    stopped: &tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Option<AdminListener>> {
    let mut stopped = stopped.clone();
    let shutdown = async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    match config {
        Some(config) => Ok(Some(start(config, app.clone(), shutdown).await?)),
        None => Ok(None),
    }
}

/// Binds `config.listen` and serves the admin routes of `app` on it until `shutdown`.
pub async fn start(
    config: &AdminHttpConfig,
    app: Arc<App>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<AdminListener> {
    let (tls, certificates) = match &config.tls {
        Some((cert, key)) => {
            let (acceptor, certificates) = tls_acceptor(cert, key)?;
            (Some(acceptor), Some(certificates))
        }
        None => (None, None),
    };
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding the admin listener {}", config.listen))?;
    let addr = listener.local_addr()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let state = AdminHttp::new(app, config.policy.clone(), tls.is_some());
    tokio::spawn(issuer::server::serve_admin_http(
        state.clone(),
        listener,
        tls,
        shutdown,
    ));
    tracing::info!(%addr, scheme, "admin listener serving");
    Ok(AdminListener {
        state,
        certificates,
        config: config.clone(),
        url: format!("{scheme}://{addr}"),
    })
}

/// A reload: the new table's policy in force, its certificate read again; a changed `listen`
/// or TLS files are named as taking effect at the next restart.
pub fn reload(running: &AdminListener, new: Option<&AdminHttpConfig>) {
    let Some(new) = new else {
        tracing::warn!("[admin_http] removed; the admin listener stays until the next restart");
        return;
    };
    running.state.set_policy(new.policy.clone());
    tracing::info!(
        clients = new.policy.clients.join(", "),
        token_max_age = new.policy.token_max_age,
        "[admin_http] policy in force"
    );
    if new.listen != running.config.listen || new.tls != running.config.tls {
        tracing::warn!(
            "[admin_http] listen or TLS files changed; they take effect at the next restart"
        );
    }
    if let Some(certificates) = &running.certificates {
        match certificates.reload() {
            Ok(()) => tracing::info!("admin TLS certificate read again"),
            Err(e) => tracing::error!(
                error = format!("{e:#}"),
                "admin TLS certificate refused; the one in use stays"
            ),
        }
    }
}
