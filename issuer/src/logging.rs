//! The issuer's logs: on stderr, as text or JSON lines.

use std::io::IsTerminal;

/// How log lines are written.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LogFormat {
    /// One line per event, coloured only when stderr is a terminal.
    Text,
    /// One JSON object per line.
    Json,
}

/// Logs to stderr. Values a client controls (client ids, user names, claims) are logged as string
/// fields, so the text format writes them quoted and escaped and JSON as JSON strings: no value
/// can plant a field or a line.
pub fn init(format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().flatten_event(true).init(),
    }
}
