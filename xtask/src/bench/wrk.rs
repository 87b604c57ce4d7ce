//! wrk runs and what is made of them: one run's figures ([`Sample`]), medians over rounds, and
//! ratios taken within each round ([`Results`]); the resident memory of a process.

use anyhow::{bail, Context, Result};

/// One wrk run.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Sample {
    pub(super) rps: f64,
    pub(super) p50_ms: f64,
    pub(super) p99_ms: f64,
    pub(super) requests: u64,
    pub(super) bad: u64,
}

pub(super) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub(super) fn summarize(samples: &[Sample]) -> Sample {
    Sample {
        rps: median(samples.iter().map(|s| s.rps).collect()),
        p50_ms: median(samples.iter().map(|s| s.p50_ms).collect()),
        p99_ms: median(samples.iter().map(|s| s.p99_ms).collect()),
        requests: samples.iter().map(|s| s.requests).sum(),
        bad: samples.iter().map(|s| s.bad).sum(),
    }
}

pub(super) fn duration_ms(s: &str) -> Option<f64> {
    let s = s.trim();
    let (num, factor) = if let Some(n) = s.strip_suffix("us") {
        (n, 0.001)
    } else if let Some(n) = s.strip_suffix("ms") {
        (n, 1.0)
    } else if let Some(n) = s.strip_suffix('s') {
        (n, 1000.0)
    } else {
        return None;
    };
    num.trim().parse::<f64>().ok().map(|v| v * factor)
}

pub(super) fn parse_wrk(out: &str) -> Result<Sample> {
    let mut s = Sample::default();
    for line in out.lines().map(str::trim) {
        if let Some(v) = line.strip_prefix("Requests/sec:") {
            s.rps = v.trim().parse()?;
        } else if let Some(v) = line.strip_prefix("50%") {
            s.p50_ms = duration_ms(v).context("p50")?;
        } else if let Some(v) = line.strip_prefix("99%") {
            s.p99_ms = duration_ms(v).context("p99")?;
        } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
            s.bad += v.trim().parse::<u64>()?;
        } else if let Some(v) = line.strip_prefix("Socket errors:") {
            s.bad += v
                .split(',')
                .filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok())
                .sum::<u64>();
        } else if line.contains(" requests in ") {
            s.requests = line
                .split_whitespace()
                .next()
                .context("requests")?
                .parse()?;
        }
    }
    if s.rps == 0.0 {
        bail!("wrk printed no throughput:\n{out}");
    }
    Ok(s)
}

/// Runs wrk on core 1.
pub(super) fn wrk(args: &[String], url: &str) -> Result<Sample> {
    wrk_on(Some("1"), args, url)
}

/// Runs wrk on `cpus` (a `taskset` list), or wherever the kernel puts it.
pub(super) fn wrk_on(cpus: Option<&str>, args: &[String], url: &str) -> Result<Sample> {
    let out = e2e::command_on("wrk", cpus)
        .arg("--latency")
        .args(args)
        .arg(url)
        .output()
        .context("running wrk")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!("wrk failed: {text}{}", String::from_utf8_lossy(&out.stderr));
    }
    parse_wrk(&text)
}

/// A process's CPU time so far (user and system), in milliseconds.
pub(super) fn cpu_ms(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(") ").map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    (ticks(11) + ticks(12)) * 10.0
}

pub(super) fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| {
                l.strip_prefix(name)?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Medians per variant or load, and the memory of the process under test afterwards.
pub(super) struct Results {
    pub(super) samples: Vec<Sample>,
    /// Requests per second of each variant or load in each round.
    per_round: Vec<Vec<f64>>,
    pub(super) rss_kib: (u64, u64),
}

impl Results {
    pub(super) fn new(per: &[Vec<Sample>], rss_kib: (u64, u64)) -> Self {
        Self {
            samples: per.iter().map(|v| summarize(v)).collect(),
            per_round: per
                .iter()
                .map(|v| v.iter().map(|s| s.rps).collect())
                .collect(),
            rss_kib,
        }
    }

    /// Throughput of `a` over that of `b`, taken within each round (side by side, a few seconds
    /// apart), then the median over rounds: steadier on a noisy host than a ratio of medians.
    pub(super) fn paired(&self, a: usize, b: usize) -> f64 {
        median(
            self.per_round[a]
                .iter()
                .zip(&self.per_round[b])
                .map(|(x, y)| x / y)
                .collect(),
        )
    }
}
