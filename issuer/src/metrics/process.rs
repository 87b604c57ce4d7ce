//! The standard Prometheus process metrics (`process_cpu_seconds_total`,
//! `process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`,
//! `process_max_fds`, `process_start_time_seconds`, `process_threads`), read from `/proc/self`
//! at each scrape with the names and meanings of the official clients.
//!
//! No process collector for `prometheus-client` without a `/proc` crate and `libc` behind it was
//! found, and the files are few and simple: the parsing here is pure functions of the files'
//! text, tested on fixed input. Times in `/proc` are in clock ticks of `USER_HZ`, which Linux fixes
//! at 100 for user space (as the Go client's `procfs` assumes too). A file that cannot be read
//! leaves its metrics out of that scrape; the others are still served. Where `/proc` shows
//! processes only (systemd's `ProcSubset=pid`, the Debian unit's), the boot time that
//! `/proc/stat` gives is taken from the clocks instead ([`boot_time_from_clocks`]).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Unit;

/// Clock ticks per second of the times in `/proc` (`USER_HZ`).
const TICKS_PER_SECOND: f64 = 100.0;

/// What `/proc/self/stat` tells: the fields after the command name, which may hold anything.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stat {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Threads of the process.
    pub threads: u64,
    /// When the process started, in seconds after boot.
    pub started_after_boot: f64,
    /// Virtual memory size, in bytes.
    pub virtual_bytes: u64,
}

/// Reads `/proc/[pid]/stat`: fields 14 and 15 (utime, stime), 20 (threads), 22 (start time)
/// and 23 (vsize, bytes), counted from 1; the command name (field 2) is skipped
/// to its last `)`, as it may hold spaces and parentheses.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let after_name = &text[text.rfind(')')? + 1..];
    // Field 3 (state) is the first one after the name.
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    let ticks = |n: usize| field(n).map(|t| t as f64 / TICKS_PER_SECOND);
    Some(Stat {
        cpu_seconds: ticks(14)? + ticks(15)?,
        threads: field(20)?,
        started_after_boot: ticks(22)?,
        virtual_bytes: field(23)?,
    })
}

/// The boot time, in seconds since the Unix epoch: the `btime` line of `/proc/stat`.
pub fn parse_boot_time(text: &str) -> Option<u64> {
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The boot time, in seconds since the Unix epoch, without `/proc/stat`: the wall clock less the
/// time since boot (`CLOCK_BOOTTIME`, suspended time included, as the kernel's `btime` is).
pub fn boot_time_from_clocks() -> Option<f64> {
    use nix::time::{clock_gettime, ClockId};
    let since_boot = clock_gettime(ClockId::CLOCK_BOOTTIME).ok()?;
    let now = shared::time::since_epoch(std::time::SystemTime::now())?;
    Some(now.as_secs_f64() - std::time::Duration::from(since_boot).as_secs_f64())
}

/// The soft limit of open files: the `Max open files` line of `/proc/[pid]/limits`
/// (`unlimited` is `u64::MAX`).
pub fn parse_max_fds(text: &str) -> Option<u64> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))?;
    match line.split_whitespace().next()? {
        "unlimited" => Some(u64::MAX),
        soft => soft.parse().ok(),
    }
}

/// The resident set size, in bytes: the `VmRSS:` line of `/proc/[pid]/status` (in kB), which
/// needs no page size.
pub fn parse_resident_bytes(text: &str) -> Option<u64> {
    let line = text.lines().find_map(|l| l.strip_prefix("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// The process metrics of this process, read at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

fn open_fds() -> Option<u64> {
    let entries = std::fs::read_dir("/proc/self/fd").ok()?;
    // The directory's own descriptor, open while it is read, is not counted.
    Some((entries.count() as u64).saturating_sub(1))
}

/// The gauges of one scrape: name (unit aside), help, unit, value (`None`: unreadable).
type GaugeRow = (&'static str, &'static str, Option<Unit>, Option<f64>);

/// Reads the gauges' files once: `stat` is `/proc/self/stat`, already read.
fn gauges(stat: Option<Stat>) -> Vec<GaugeRow> {
    let resident = read("/proc/self/status").and_then(|t| parse_resident_bytes(&t));
    let max = read("/proc/self/limits").and_then(|t| parse_max_fds(&t));
    let boot = read("/proc/stat")
        .and_then(|t| parse_boot_time(&t))
        .map(|b| b as f64)
        .or_else(boot_time_from_clocks);
    let start = stat.zip(boot).map(|(s, b)| b + s.started_after_boot);
    vec![
        (
            "process_resident_memory",
            "Resident memory size in bytes.",
            Some(Unit::Bytes),
            resident.map(|b| b as f64),
        ),
        (
            "process_virtual_memory",
            "Virtual memory size in bytes.",
            Some(Unit::Bytes),
            stat.map(|s| s.virtual_bytes as f64),
        ),
        (
            "process_open_fds",
            "Number of open file descriptors.",
            None,
            open_fds().map(|n| n as f64),
        ),
        (
            "process_max_fds",
            "Maximum number of open file descriptors.",
            None,
            max.map(|n| n as f64),
        ),
        (
            "process_start_time",
            "Start time of the process since unix epoch in seconds.",
            Some(Unit::Seconds),
            start,
        ),
        (
            "process_threads",
            "Number of OS threads in the process.",
            None,
            stat.map(|s| s.threads as f64),
        ),
    ]
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let stat = read("/proc/self/stat").and_then(|t| parse_stat(&t));
        if let Some(stat) = stat {
            let cpu = ConstCounter::new(stat.cpu_seconds);
            let help = "Total user and system CPU time spent in seconds.";
            let unit = Some(&Unit::Seconds);
            cpu.encode(encoder.encode_descriptor("process_cpu", help, unit, cpu.metric_type())?)?;
        }
        for (name, help, unit, value) in gauges(stat) {
            let Some(value) = value else { continue };
            let gauge = ConstGauge::new(value);
            let descriptor =
                encoder.encode_descriptor(name, help, unit.as_ref(), gauge.metric_type())?;
            gauge.encode(descriptor)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (is (su) er) S 1 4242 4242 0 -1 4194560 2000 0 3 0 \
        250 125 0 0 20 0 7 0 123456 987654144 2500 18446744073709551615 1 1 0 0 0 0 0 4096 \
        17987 0 0 0 17 1 0 0 0 0 0";

    #[test]
    fn stat_fields_are_read_after_the_last_parenthesis() {
        let stat = parse_stat(STAT).unwrap();
        assert_eq!(
            stat,
            Stat {
                cpu_seconds: 3.75,
                threads: 7,
                started_after_boot: 1234.56,
                virtual_bytes: 987_654_144,
            }
        );
    }

    #[test]
    fn a_truncated_stat_is_none() {
        assert_eq!(parse_stat("4242 (issuer) S 1 4242"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }

    #[test]
    fn the_boot_time_from_the_clocks_is_the_kernels() {
        let kernel = parse_boot_time(&std::fs::read_to_string("/proc/stat").unwrap()).unwrap();
        let clocks = boot_time_from_clocks().unwrap();
        assert!((clocks - kernel as f64).abs() < 2.0, "{clocks} vs {kernel}");
    }

    #[test]
    fn boot_time_limits_and_status_are_read() {
        let stat = "cpu  1 2 3\nintr 5\nbtime 1764150000\nprocesses 99\n";
        assert_eq!(parse_boot_time(stat), Some(1_764_150_000));
        let limits =
            "Limit                     Soft Limit           Hard Limit           Units     \n\
            Max processes             63471                63471                processes \n\
            Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Some(1024));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_max_fds(unlimited), Some(u64::MAX));
        let status = "Name:\tissuer\nVmSize:\t  964504 kB\nVmRSS:\t   10000 kB\nThreads:\t7\n";
        assert_eq!(parse_resident_bytes(status), Some(10_240_000));
        assert_eq!(parse_resident_bytes("Name:\tissuer\n"), None);
    }

    #[test]
    fn this_process_is_read() {
        let mut out = String::new();
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(ProcessCollector));
        prometheus_client::encoding::text::encode(&mut out, &registry).unwrap();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_virtual_memory_bytes ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
            "process_threads ",
        ] {
            assert!(
                out.contains(&format!("\n{name}")),
                "{name} missing in {out}"
            );
        }
    }
}
