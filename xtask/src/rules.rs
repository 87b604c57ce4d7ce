//! The shipped Prometheus rules (`dist-assets/prometheus/`), checked by `cargo xtask test` with
//! Debian's `promtool`: `check rules` (syntax, PromQL, duplicate names) on every rule file, then
//! `test rules` on the unit tests beside them (input series, expected alerts and values).

use crate::util::{root, run};
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the rules and their tests are, relative to the repository.
pub const RULES_DIR: &str = "dist-assets/prometheus";

/// The files of `dir` whose names end in `suffix`, sorted.
fn files(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_str().is_some_and(|s| s.ends_with(suffix)))
        .collect();
    out.sort();
    Ok(out)
}

/// `promtool check rules` on the rule files and `promtool test rules` on their tests, with the
/// `promtool` beside `prometheus`.
pub fn check_rules(prometheus: &Path) -> Result<()> {
    let promtool = prometheus.with_file_name("promtool");
    let dir = root().join(RULES_DIR);
    let rules = files(&dir, ".rules.yml")?;
    let tests = files(&dir, ".test.yml")?;
    if rules.is_empty() || tests.is_empty() {
        bail!("no rules or no rule tests in {}", dir.display());
    }
    run(Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .args(&rules))?;
    // The tests name their rule files relative to their own folder.
    run(Command::new(&promtool)
        .current_dir(&dir)
        .arg("test")
        .arg("rules")
        .args(&tests))?;
    Ok(())
}
