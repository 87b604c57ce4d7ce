//! The wall time of each phase of `cargo xtask test`, shown as a table at its end (passed or
//! not) and written to `target/test-phases.md`, so the next reader of a CI log sees where the
//! time went. Each phase has a share of the run's budget ([`BUDGET`]); a run over the budget
//! warns and names the phases over their share.

use anyhow::Result;
use std::time::{Duration, Instant};

/// What a whole run on a fresh machine may take (CI stops at 90 minutes; the goal is 30).
pub const BUDGET: Duration = Duration::from_secs(30 * 60);

/// The phases and each one's share of [`BUDGET`], in minutes: what a fresh machine took when the
/// shares were set, with room. A phase not listed has no share and is never named. The work
/// beside the tests ([`crate::beside`]) has shares too, though its time overlaps theirs: when it
/// grows past them, the wait for it grows.
const SHARES: [(&str, u64); 12] = [
    ("building xtask", 2),
    ("tidy and fmt", 1),
    ("modules and test builds", 7),
    ("installs (what was left to wait for)", 1),
    ("tests, with each filter side by side", 7),
    ("demos", 1),
    ("waiting for the work beside the tests", 7),
    ("lints (beside the tests)", 10),
    ("static release issuer for dist (beside the tests)", 7),
    ("fuzz targets built (beside the tests)", 8),
    ("token crate's DPoP tests with ring (beside the tests)", 2),
    ("dist, and fuzzing beside it", 4),
];

/// The phases run so far, with their wall times.
#[derive(Debug)]
pub struct Phases {
    started: Instant,
    done: Vec<(&'static str, Duration, bool)>,
}

impl Default for Phases {
    /// From now; with `MMS_TEST_STARTED` (seconds since the epoch, set by `.ci/run` before cargo
    /// builds this command), from then, the build of `xtask` itself its first phase.
    fn default() -> Self {
        let now = Instant::now();
        let since_start = std::env::var("MMS_TEST_STARTED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .and_then(|at| {
                let unix = shared::time::since_epoch(std::time::SystemTime::now())?;
                unix.checked_sub(Duration::from_secs(at))
            });
        match since_start {
            Some(took) => Self {
                started: now.checked_sub(took).unwrap_or(now),
                done: vec![("building xtask", took, true)],
            },
            None => Self {
                started: now,
                done: Vec::new(),
            },
        }
    }
}

impl Phases {
    /// Runs `step` as the phase `name` and records its wall time, failed or not.
    pub fn run<T>(&mut self, name: &'static str, step: impl FnOnce() -> Result<T>) -> Result<T> {
        eprintln!("\n=== phase: {name}");
        let began = Instant::now();
        let out = step();
        self.done.push((name, began.elapsed(), out.is_ok()));
        out
    }

    /// Records a phase that ran elsewhere (beside others: [`crate::beside`]).
    pub fn record(&mut self, name: &'static str, took: Duration, ok: bool) {
        self.done.push((name, took, ok));
    }

    /// The table of phases (Markdown), the total, and a warning when the run is over budget.
    pub fn report(&self) -> String {
        let mut out = String::from("| phase | wall time | share | |\n|---|---|---|---|\n");
        for (name, took, ok) in &self.done {
            let share = share_of(name).map_or("-".into(), |m| format!("{m} min"));
            let state = if *ok { "" } else { "failed" };
            out.push_str(&format!(
                "| {name} | {} | {share} | {state} |\n",
                clock(*took)
            ));
        }
        let total = self.started.elapsed();
        out.push_str(&format!(
            "| **total** | **{}** | {} min | |\n",
            clock(total),
            BUDGET.as_secs() / 60
        ));
        if total > BUDGET {
            let over: Vec<String> = self
                .done
                .iter()
                .filter(|(name, took, _)| share_of(name).is_some_and(|m| took.as_secs() > m * 60))
                .map(|(name, took, _)| format!("{name} ({})", clock(*took)))
                .collect();
            out.push_str(&format!(
                "\nwarning: the run took {}, over its budget of {} min; over their share: {}\n",
                clock(total),
                BUDGET.as_secs() / 60,
                if over.is_empty() {
                    "none (the phases grew together)".into()
                } else {
                    over.join(", ")
                }
            ));
        }
        out
    }

    /// Prints the report and writes it to `target/test-phases.md`.
    pub fn finish(&self) {
        let report = self.report();
        eprintln!("\n{report}");
        let path = crate::util::root().join("target/test-phases.md");
        if let Err(e) = std::fs::write(&path, &report) {
            eprintln!("could not write {}: {e}", path.display());
        }
    }
}

fn share_of(name: &str) -> Option<u64> {
    SHARES.iter().find(|(n, _)| *n == name).map(|(_, m)| *m)
}

/// `12 min 05 s` or `48 s`.
fn clock(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{s} s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_over_budget_names_the_phases_over_their_share() {
        let mut p = Phases {
            started: Instant::now() - BUDGET - Duration::from_secs(60),
            done: Vec::new(),
        };
        p.record(
            "dist, and fuzzing beside it",
            Duration::from_secs(14 * 60),
            true,
        );
        p.record("demos", Duration::from_secs(60), false);
        let r = p.report();
        assert!(
            r.contains("| dist, and fuzzing beside it | 14 min 00 s | 4 min |  |"),
            "{r}"
        );
        assert!(r.contains("| demos | 1 min 00 s | 1 min | failed |"), "{r}");
        assert!(
            r.contains("over their share: dist, and fuzzing beside it (14 min 00 s)"),
            "{r}"
        );
    }

    #[test]
    fn a_run_within_budget_warns_of_nothing() {
        let mut p = Phases::default();
        p.record(
            "dist, and fuzzing beside it",
            Duration::from_secs(20 * 60),
            true,
        );
        assert!(!p.report().contains("warning"));
    }
}
