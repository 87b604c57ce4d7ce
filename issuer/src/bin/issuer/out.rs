//! The command line's standard output (part of the `issuer` binary). Every output that may hold
//! a name someone else chose goes through here, text through [`issuer::display::escape_lines`]
//! and JSON through [`issuer::display::escape_json`], so no such name prints a line break or a
//! bidi control raw.

use issuer::display;
use serde::Serialize;
use std::io::Write as _;

fn write(s: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(s.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Text output, its lines ended by `\n`.
pub fn text(s: &str) -> anyhow::Result<()> {
    write(&display::escape_lines(s))
}

/// One line of text output.
pub fn line(s: &str) -> anyhow::Result<()> {
    text(&format!("{s}\n"))
}

/// Serialized JSON output (a document, or JSON lines ended by `\n`).
pub fn json(s: &str) -> anyhow::Result<()> {
    write(&display::escape_json(s))
}

/// One line of JSON output.
pub fn json_line(s: &str) -> anyhow::Result<()> {
    json(&format!("{s}\n"))
}

/// A JSON document, pretty-printed, then a line break.
pub fn json_document(value: &impl Serialize) -> anyhow::Result<()> {
    json(&(serde_json::to_string_pretty(value)? + "\n"))
}
