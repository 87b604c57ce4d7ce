//! Work that runs beside the tests of `cargo xtask test`: compiling that no test needs (the
//! lints, the release issuer of `dist`, the fuzz targets), on threads at the lowest CPU
//! priority, so that it takes only the cores the tests leave idle while they wait on sockets,
//! Envoy and the databases, and never slows a test down.
//!
//! Each lane is a thread that runs its jobs in order and stops at the first that fails; every
//! job's wall time goes into the table of phases, marked as beside the tests.

use crate::phases::Phases;
use anyhow::{anyhow, Result};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One piece of work beside the tests.
pub struct Job {
    /// How the table of phases names it.
    pub name: &'static str,
    pub run: fn() -> Result<()>,
}

/// A job that ran, with its wall time.
struct Done {
    name: &'static str,
    took: Duration,
    ok: bool,
}

/// The lanes started by [`Beside::start`].
pub struct Beside {
    lanes: Vec<JoinHandle<(Vec<Done>, Result<()>)>>,
}

impl Beside {
    /// Starts one thread per lane, each at the lowest CPU priority.
    pub fn start(lanes: &'static [&'static [Job]]) -> Self {
        let lanes = lanes
            .iter()
            .map(|jobs| std::thread::spawn(move || run_lane(jobs)))
            .collect();
        Self { lanes }
    }

    /// Waits for every lane (the wait itself a phase), records each job in `p`, and fails with
    /// the first failure.
    pub fn join(self, p: &mut Phases) -> Result<()> {
        let began = Instant::now();
        let mut result = Ok(());
        let mut done = Vec::new();
        for lane in self.lanes {
            let (jobs, lane_result) = lane
                .join()
                .unwrap_or_else(|_| (Vec::new(), Err(anyhow!("a lane beside the tests panicked"))));
            done.extend(jobs);
            if result.is_ok() {
                result = lane_result;
            }
        }
        p.record(
            "waiting for the work beside the tests",
            began.elapsed(),
            result.is_ok(),
        );
        for d in done {
            p.record(d.name, d.took, d.ok);
        }
        result
    }
}

fn run_lane(jobs: &[Job]) -> (Vec<Done>, Result<()>) {
    lowest_priority();
    let mut done = Vec::new();
    for job in jobs {
        eprintln!("\n=== beside the tests: {}", job.name);
        let began = Instant::now();
        let result = (job.run)();
        done.push(Done {
            name: job.name,
            took: began.elapsed(),
            ok: result.is_ok(),
        });
        if let Err(e) = result {
            return (
                done,
                Err(e.context(format!("{} (beside the tests)", job.name))),
            );
        }
    }
    (done, Ok(()))
}

/// Gives the calling thread, and every process it starts from now on, nice value 19: on Linux
/// the nice value belongs to a thread, and a child inherits its parent's.
fn lowest_priority() {
    // SAFETY: setpriority only reads its integer arguments; `who` 0 is the calling thread.
    let status = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, 19) };
    if status != 0 {
        eprintln!(
            "could not lower the priority of the work beside the tests: {}",
            std::io::Error::last_os_error()
        );
    }
}
