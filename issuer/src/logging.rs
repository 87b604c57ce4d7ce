//! The issuer's logs: on stderr, as text or JSON lines.

use std::io::IsTerminal;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{reload, EnvFilter, Registry};

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event, coloured only when stderr is a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// The filter of the running log (`--log-level`), which a reload changes in place. `RUST_LOG`,
/// when set, wins over both.
pub struct LogLevel {
    handle: reload::Handle<EnvFilter, Registry>,
    from_env: bool,
}

impl LogLevel {
    /// Filters by `directives` from now on (`info`, `debug`, `info,issuer::directory=debug`).
    /// Returns whether it changed anything: not while `RUST_LOG` is set.
    pub fn set(&self, directives: &str) -> Result<bool, String> {
        if self.from_env {
            return Ok(false);
        }
        let filter = EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
        self.handle
            .reload(filter)
            .map(|()| true)
            .map_err(|e| e.to_string())
    }
}

/// `s` if it is a valid log filter (`--log-level`), else why not.
pub fn parse_level(s: &str) -> Result<String, String> {
    EnvFilter::try_new(s)
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

/// Logs to stderr at `level` (or as `RUST_LOG` says, when set). Values a client controls (client
/// ids, user names, claims) are logged as string fields, so the text format writes them quoted
/// and escaped and JSON as JSON strings: no value can plant a field or a line.
pub fn init(format: LogFormat, level: &str) -> LogLevel {
    let from_env = std::env::var_os(EnvFilter::DEFAULT_ENV).is_some();
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let (filter, handle) = reload::Layer::new(filter);
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    match format {
        LogFormat::Text => registry
            .with(layer.with_ansi(std::io::stderr().is_terminal()))
            .init(),
        LogFormat::Json => registry.with(layer.json().flatten_event(true)).init(),
    }
    LogLevel { handle, from_env }
}
