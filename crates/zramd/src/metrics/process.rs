//! The process metrics under their standard names (`process_resident_memory_bytes`,
//! `process_cpu_seconds_total`, `process_open_fds`, ...), read from `/proc/self` at each
//! scrape, and `zramd_build_info`. A figure that cannot be read is left out of the scrape.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::family::{Descriptor, Kind, Of, Value, single};

/// What `/proc/self/stat` says of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Stat {
    /// User CPU time, clock ticks.
    pub(super) utime: u64,
    /// System CPU time, clock ticks.
    pub(super) stime: u64,
    /// Start time, clock ticks after boot.
    pub(super) starttime: u64,
    /// Virtual memory size, bytes.
    pub(super) vsize: u64,
    /// Resident set, pages.
    pub(super) rss: u64,
}

/// Parses a `/proc/PID/stat` line; `None` if it is not one.
pub(super) fn parse_stat(line: &str) -> Option<Stat> {
    // The command name (field 2) is in parentheses and may hold anything: the fields
    // after its last `)` start with field 3 (the state).
    let rest = &line[line.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
        vsize: field(23)?,
        rss: field(24)?,
    })
}

/// The boot time (`btime` of `/proc/stat`), seconds since the epoch.
fn boot_time() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The process's metrics.
#[derive(Debug)]
pub(super) struct Process;

impl Collector for Process {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        use Kind::{Counter, Gauge};
        let mut figures: Vec<(Descriptor<'_>, Value)> = Vec::new();
        let stat = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|l| parse_stat(&l));
        let ticks = rustix::param::clock_ticks_per_second() as f64;
        if let Some(s) = stat {
            let cpu = (s.utime + s.stime) as f64 / ticks;
            let rss = s.rss.saturating_mul(rustix::param::page_size() as u64);
            figures.extend([
                (
                    (
                        "process_cpu",
                        Of::Seconds,
                        Counter,
                        "Total user and system CPU time spent in seconds",
                    ),
                    Value::Float(cpu),
                ),
                (
                    (
                        "process_resident_memory",
                        Of::Bytes,
                        Gauge,
                        "Resident memory size in bytes",
                    ),
                    Value::Int(rss),
                ),
                (
                    (
                        "process_virtual_memory",
                        Of::Bytes,
                        Gauge,
                        "Virtual memory size in bytes",
                    ),
                    Value::Int(s.vsize),
                ),
            ]);
            if let Some(boot) = boot_time() {
                let start = boot as f64 + s.starttime as f64 / ticks;
                let help = "Start time of the process since unix epoch in seconds";
                figures.push((
                    ("process_start_time", Of::Seconds, Gauge, help),
                    Value::Float(start),
                ));
            }
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            // The directory being read holds one descriptor of its own.
            let open = dir.count().saturating_sub(1) as u64;
            let help = "Number of open file descriptors";
            figures.push((
                ("process_open_fds", Of::Count, Gauge, help),
                Value::Int(open),
            ));
        }
        let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile);
        if let Some(limit) = nofile.current {
            let help = "Maximum number of open file descriptors";
            figures.push((
                ("process_max_fds", Of::Count, Gauge, help),
                Value::Int(limit),
            ));
        }
        for (descriptor, value) in figures {
            single(&mut encoder, descriptor, value)?;
        }
        Ok(())
    }
}

/// `zramd_build_info{version="..."} 1`.
#[derive(Debug)]
pub(super) struct Build;

impl Collector for Build {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        encoder
            .encode_descriptor("build", "The zramd version serving", None, MetricType::Info)?
            .encode_info(&[("version", env!("CARGO_PKG_VERSION"))])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_with_a_strange_command_name() {
        let line = "42 (a) b (c) R 1 42 42 0 -1 4194560 100 0 0 0 7 3 0 0 20 0 9 0 1234 \
                    5000000 321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let s = parse_stat(line).unwrap();
        assert_eq!(
            (s.utime, s.stime, s.starttime, s.vsize, s.rss),
            (7, 3, 1234, 5_000_000, 321)
        );
        assert_eq!(parse_stat("42 (x) R 1 2"), None);
        assert_eq!(parse_stat("no parenthesis"), None);
    }
}
