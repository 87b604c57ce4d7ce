//! What every command shares: the workspace root, running commands with an echo, and writing a
//! results section of a Markdown file.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_owned()
}

/// Runs a command, echoing it, and fails if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    eprintln!("\n$ {}", show(cmd));
    let status = cmd
        .status()
        .with_context(|| format!("starting {}", show(cmd)))?;
    if !status.success() {
        bail!("`{}` failed with {status}", show(cmd));
    }
    Ok(())
}

fn show(cmd: &Command) -> String {
    let envs: Vec<String> = cmd
        .get_envs()
        .filter_map(|(k, v)| Some(format!("{}={}", k.to_string_lossy(), v?.to_string_lossy())))
        .collect();
    envs.into_iter()
        .chain(std::iter::once(
            cmd.get_program().to_string_lossy().into_owned(),
        ))
        .chain(cmd.get_args().map(|s| s.to_string_lossy().into_owned()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// `cargo`, as the one running xtask.
pub fn cargo() -> Command {
    Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
}

/// The time now in UTC, to the minute, for reports.
pub fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Replaces the section between the `<!-- NAME:results:begin ... -->` and `<!-- NAME:results:end -->`
/// markers of `file` (relative to the repository root) with `text`, keeping the hand-written
/// text around it.
pub fn write_section(file: &str, name: &str, text: &str) -> Result<()> {
    write_section_by(file, name, &format!("cargo xtask {name}"), text)
}

/// [`write_section`] for a section named apart from the command `by` that writes it.
pub fn write_section_by(file: &str, name: &str, by: &str, text: &str) -> Result<()> {
    let path = root().join(file);
    let begin = format!("<!-- {name}:results:begin (written by {by}) -->");
    let end = format!("<!-- {name}:results:end -->");
    let existing = std::fs::read_to_string(&path).unwrap_or_else(|_| format!("{begin}\n{end}\n"));
    let (head, rest) = existing
        .split_once(&begin)
        .with_context(|| format!("{file} lost its results marker"))?;
    let (_, tail) = rest
        .split_once(&end)
        .with_context(|| format!("{file} lost its end marker"))?;
    std::fs::write(&path, format!("{head}{begin}\n{text}{end}{tail}"))?;
    Ok(())
}

/// `n` with a comma between thousands: `364,100`.
pub fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// rustc's flags that write the paths of cargo's registry as `/cargo` and of the repository as
/// `.` into what it builds, so the output does not depend on where either lives.
pub fn remap_path_prefixes() -> Result<String> {
    let cargo_home = std::env::var("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .context("neither CARGO_HOME nor HOME is set")?;
    Ok(format!(
        "--remap-path-prefix={}=/cargo --remap-path-prefix={}=.",
        cargo_home.display(),
        root().display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_separated_by_commas() {
        let cases = [
            (0, "0"),
            (999, "999"),
            (1_000, "1,000"),
            (364_100, "364,100"),
        ];
        for (n, text) in cases {
            assert_eq!(thousands(n), text);
        }
        assert_eq!(thousands(12_345_678), "12,345,678");
    }
}
