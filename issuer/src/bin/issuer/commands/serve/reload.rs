//! What SIGHUP does to a serving issuer. The command line is parsed again with its configuration
//! file as the file is now. The log level (`log_level`), the `[directory]` table, the
//! `[[vendor]]` tables and `registration`, the TLS certificates (read again from their files) and
//! `[admin_http]`'s `clients` and `token_max_age` change in place; every other option that changed is
//! named in the log as taking effect at the next restart. A file that no longer parses or fails
//! the check of the files the issuer trusts (`issuer::secret_file`: the configuration file, a
//! `bind_password_file`, the TLS key), or a change that fails, changes nothing and is logged.
//! SIGHUP never stops the process.

use super::listen::Certificates;
use super::Serve;
use anyhow::Context as _;
use issuer::app::App;
use issuer::logging::LogLevel;
use std::sync::Arc;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Parses `issuer serve`'s command line again, with its configuration file as it is now.
pub type Reparse = fn() -> anyhow::Result<Serve>;

/// What a reload needs: the options in force, how to read them again, and what it changes.
pub struct Reloader {
    pub running: Serve,
    pub reparse: Reparse,
    pub log: LogLevel,
    pub certificates: Option<Arc<Certificates>>,
    pub app: Arc<App>,
    pub admin: Option<super::admin_http::AdminListener>,
}

impl Reloader {
    /// Listens for SIGHUP: from then on the signal no longer stops the process. Call it first
    /// thing; signals that come before [`Reloader::on_sighup`] runs are kept for it.
    pub fn listen() -> anyhow::Result<Signal> {
        signal(SignalKind::hangup()).context("listening for SIGHUP")
    }

    /// Reloads on every SIGHUP of `hup`, for as long as the process runs.
    pub async fn on_sighup(mut self, mut hup: Signal) {
        while hup.recv().await.is_some() {
            self.reload();
        }
    }

    /// One reload.
    pub fn reload(&mut self) {
        tracing::info!("SIGHUP: reloading the configuration");
        let mut new = match (self.reparse)() {
            Ok(new) => new,
            Err(e) => {
                tracing::error!(
                    error = format!("{e:#}"),
                    "reload refused: the configuration cannot be used; nothing changed"
                );
                return;
            }
        };
        self.log_level(&new.log_level);
        self.directory(new.directory.take());
        self.vendors(&new);
        self.certificate();
        if let Some(admin) = &self.admin {
            super::admin_http::reload(admin, new.admin_http.as_deref());
        }
        let later = self.running.changed_until_restart(&new);
        if !later.is_empty() {
            tracing::warn!(
                options = later.join(", "),
                "these options changed; they take effect at the next restart"
            );
        }
        tracing::info!("reload done");
    }

    fn log_level(&mut self, level: &str) {
        if level == self.running.log_level {
            return;
        }
        match self.log.set(level) {
            Ok(true) => {
                tracing::info!(log_level = level, "log level changed");
                self.running.log_level = level.to_owned();
            }
            Ok(false) => tracing::warn!("log_level changed, but RUST_LOG is set and wins"),
            Err(e) => tracing::error!(error = e, "log_level refused; unchanged"),
        }
    }

    fn directory(&mut self, table: Option<Box<issuer::config::DirectoryConfig>>) {
        match (self.app.has_directory(), table) {
            (true, Some(config)) => match self.app.replace_directory(*config) {
                Ok(_) => tracing::info!("[directory] reloaded: servers and settings in force"),
                Err(e) => tracing::error!(
                    error = issuer::display::Causes(&e).to_string(),
                    "[directory] refused; unchanged"
                ),
            },
            (false, None) => {}
            (true, None) => {
                tracing::warn!("[directory] removed; sign-ins keep it until the next restart")
            }
            (false, Some(_)) => {
                tracing::warn!("[directory] added; it takes effect at the next restart")
            }
        }
    }

    fn vendors(&mut self, new: &Serve) {
        let trust = new.vendors.clone().unwrap_or_default();
        let names: Vec<&str> = trust.names().collect();
        tracing::info!(
            vendors = names.join(", "),
            registration = new.registration,
            "[[vendor]] tables in force"
        );
        self.app.set_vendors(trust, new.registration);
        let app = self.app.clone();
        tokio::spawn(async move { app.apply_revocation_files(issuer::app::now()).await });
    }

    fn certificate(&self) {
        if let Some(certificates) = &self.certificates {
            match certificates.reload() {
                Ok(()) => tracing::info!("TLS certificate read again; new connections get it"),
                Err(e) => tracing::error!(
                    error = format!("{e:#}"),
                    "TLS certificate refused; the one in use stays"
                ),
            }
        }
    }
}
