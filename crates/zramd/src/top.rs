//! `zramd top`: a refreshing table of every device of a running server, read through its
//! control socket (`Request::Stat`): data, compressed, total, ratio, reads and writes per
//! second (requests and bytes), and what the post-processing policy did since the last
//! refresh. On a terminal the table is redrawn in place; otherwise each refresh prints
//! one more table.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use zramd::control::{self, Request};
use zramd::human::size;
use zramd::registry::DeviceStat;

/// `zramd top`'s options.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds between refreshes (a fraction too: 0.5).
    #[arg(long, default_value = "1", value_parser = interval)]
    interval: Duration,
    /// Stop after N refreshes (default: until interrupted).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    iterations: Option<u64>,
    /// The server's control socket.
    #[arg(long)]
    control: Option<PathBuf>,
}

/// Longest refresh interval accepted: a day.
const MAX_INTERVAL: f64 = 86_400.0;

/// Parses `--interval`: seconds, more than 0, at most a day.
fn interval(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number of seconds"))?;
    if !(secs > 0.0 && secs <= MAX_INTERVAL) {
        return Err(format!(
            "the interval must be more than 0 and at most {MAX_INTERVAL} s"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The devices of the server at `path`.
fn devices(path: &std::path::Path) -> anyhow::Result<Vec<DeviceStat>> {
    let value = control::call_value(path, &Request::Stat)?;
    if value.get("uswap").is_some() {
        bail!(
            "{} is a program run by `zramd run`, not a server of devices; try zramd stat",
            path.display()
        );
    }
    let response: control::Response =
        serde_json::from_value(value).context("parse the server's answer")?;
    Ok(response.devices)
}

/// A figure per second over `elapsed`, or `-` without an earlier refresh.
fn rate(now: u64, before: Option<u64>, elapsed: Duration, fmt: fn(f64) -> String) -> String {
    match before {
        Some(b) if !elapsed.is_zero() => fmt(now.saturating_sub(b) as f64 / elapsed.as_secs_f64()),
        _ => "-".to_owned(),
    }
}

/// A count since the last refresh, or `-` without one.
fn delta(now: u64, before: Option<u64>) -> String {
    before.map_or_else(|| "-".to_owned(), |b| now.saturating_sub(b).to_string())
}

/// One table: a header and a row per device, rates and deltas against `before` (the
/// devices `elapsed` ago).
pub fn table(devices: &[DeviceStat], before: &[DeviceStat], elapsed: Duration) -> String {
    let mut out = format!(
        "{:<8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>8} {:>9} {:>9} {:>6} {:>6} {:>6}\n",
        "NAME",
        "DATA",
        "COMPR",
        "TOTAL",
        "RATIO",
        "READS/s",
        "WRITES/s",
        "READ/s",
        "WRITE/s",
        "ROUNDS",
        "RECOMP",
        "WB"
    );
    let count = |v: f64| format!("{v:.0}");
    let bytes = |v: f64| size(v as u64);
    for d in devices {
        let old = before.iter().find(|b| b.name == d.name);
        let was = |read: fn(&DeviceStat) -> u64| old.map(read);
        let (r, p) = (&d.requests, &d.policy.stats);
        out.push_str(&format!(
            "{:<8} {:>8} {:>8} {:>8} {:>6.2} {:>8} {:>8} {:>9} {:>9} {:>6} {:>6} {:>6}\n",
            d.name,
            size(d.data),
            size(d.compr),
            size(d.total),
            d.ratio,
            rate(r.reads, was(|b| b.requests.reads), elapsed, count),
            rate(r.writes, was(|b| b.requests.writes), elapsed, count),
            rate(r.read_bytes, was(|b| b.requests.read_bytes), elapsed, bytes),
            rate(
                r.written_bytes,
                was(|b| b.requests.written_bytes),
                elapsed,
                bytes
            ),
            delta(p.rounds, was(|b| b.policy.stats.rounds)),
            delta(p.recompressed, was(|b| b.policy.stats.recompressed)),
            delta(
                p.written_back_pages,
                was(|b| b.policy.stats.written_back_pages)
            ),
        ));
    }
    out
}

/// Runs `zramd top`.
pub fn run(a: &Args) -> anyhow::Result<()> {
    let path = a.control.clone().unwrap_or_else(control::default_path);
    let redraw = std::io::stdout().is_terminal();
    let mut before: Option<(Instant, Vec<DeviceStat>)> = None;
    let mut done = 0u64;
    while a.iterations.is_none_or(|n| done < n) {
        if done > 0 {
            std::thread::sleep(a.interval);
        }
        let now = Instant::now();
        let devices = devices(&path)?;
        let (elapsed, old) = match &before {
            Some((then, old)) => (now.duration_since(*then), old.as_slice()),
            None => (Duration::ZERO, &[][..]),
        };
        let mut text = String::new();
        if redraw {
            // Home, clear the screen, then a title line.
            text.push_str("\x1b[H\x1b[2J");
            text.push_str(&format!(
                "zramd top: {} device(s), every {:.1}s; Ctrl-C to stop\n\n",
                devices.len(),
                a.interval.as_secs_f64()
            ));
        } else if done > 0 {
            text.push('\n');
        }
        text.push_str(&table(&devices, old, elapsed));
        let mut out = std::io::stdout().lock();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => {}
            // The reader went away (`zramd top | head`): done.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(e).context("write the table"),
        }
        before = Some((now, devices));
        done += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals() {
        assert_eq!(interval("0.2"), Ok(Duration::from_millis(200)));
        assert_eq!(interval("2"), Ok(Duration::from_secs(2)));
        for bad in ["0", "-1", "nan", "inf", "1e9", "x", ""] {
            assert!(interval(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rates_and_deltas() {
        assert_eq!(
            rate(300, Some(100), Duration::from_secs(2), |v| format!(
                "{v:.0}"
            )),
            "100"
        );
        assert_eq!(
            rate(300, None, Duration::from_secs(2), |v| format!("{v:.0}")),
            "-"
        );
        // A counter that went back (the device was reset) is no negative rate.
        assert_eq!(
            rate(5, Some(100), Duration::from_secs(1), |v| format!("{v:.0}")),
            "0"
        );
        assert_eq!(delta(7, Some(3)), "4");
        assert_eq!(delta(7, None), "-");
    }
}
