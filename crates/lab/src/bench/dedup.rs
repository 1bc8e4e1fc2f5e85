//! `zramd bench dedup --input FILE`: what inline deduplication and folding (seed 004) cost
//! and save, on in-process devices sized to the file, side by side in one run:
//!
//! - **once**: the file written once with dedup off and on: the write speeds (on/off; only
//!   the duplicates the data itself has are shared);
//! - **twice**: the file written twice (the second copy at offset = its size, on a device
//!   twice as big) with dedup off and on: `mem_used_total` (on/off);
//! - **fold**: with dedup off, the file twice, then `fold()`: `mem_used_total` after and
//!   before, `pages_folded`, and the pass's CPU seconds, per GB stored (`orig_data_size`).
//!   The data is read back and compared after the fold.
//!
//! Each measurement runs `--repeat` times, off and on alternating (which goes first
//! alternates too); the run with the median speed (the median CPU time for the fold) is
//! reported. Memory is what the process holds: its RSS, and RSS less what it was just
//! before the device was made (the input's copy in memory is in both), next to
//! `mem_used_total` and the metadata (slot table, allocator bookkeeping, the content index)
//! that `mem_used_total` leaves out.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, bail};
use serde::Serialize;
use zram::{FoldReport, FoldStats, Zram, ZramConfig};

use crate::rss::process_rss_bytes;
use crate::sys::process_cpu_seconds;

const PAGE: usize = 4096;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The file to store (e.g. a tarball); it is held in memory.
    #[arg(long)]
    input: PathBuf,
    /// The devices' settings, as `zramd serve` takes them (their size is the input's; the
    /// bench sets `dedup` itself: both settings are measured).
    #[command(flatten)]
    device: ZramConfig,
    /// Runs of each measurement; the median run is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// One device after a scenario's writes.
#[derive(Debug, Clone, Serialize)]
pub struct Side {
    /// Inline deduplication on?
    dedup: bool,
    /// Copies of the file written.
    copies: usize,
    /// Write speed over all copies, MB/s.
    write_mb_s: f64,
    /// The device's `mm_stat` fields (the kernel's nine, `pages_folded`, ours).
    mm_stat: Vec<u64>,
    /// `mem_used_total`, bytes.
    mem_used: u64,
    /// Process RSS after the writes, bytes.
    rss: u64,
    /// RSS after the writes less RSS just before the device was made, bytes.
    rss_delta: i64,
    /// The device's folding and deduplication figures.
    fold_stats: FoldStats,
}

/// A measurement with dedup off and on.
#[derive(Debug, Clone, Serialize)]
struct Pair {
    off: Side,
    on: Side,
    /// on/off of the figure the measurement is about (write speed, or memory).
    ratio: f64,
}

/// The fold measurement: the file twice with dedup off, then `fold()`.
#[derive(Debug, Clone, Serialize)]
struct FoldRun {
    /// Before the fold.
    before: Side,
    /// `mm_stat` after the fold.
    mm_stat_after: Vec<u64>,
    /// `mem_used_total` after the fold, bytes.
    mem_used_after: u64,
    /// After/before.
    mem_used_ratio: f64,
    /// Process RSS after the fold, bytes.
    rss_after: u64,
    /// RSS after the fold less RSS just before the device was made, bytes.
    rss_delta_after: i64,
    /// What the pass said it did.
    report: FoldReport,
    /// `mm_stat`'s `pages_folded` after the pass.
    pages_folded: u64,
    /// CPU seconds the process used during the pass (all threads).
    cpu_s: f64,
    /// Wall seconds of the pass.
    wall_s: f64,
    /// CPU seconds per GB stored (`orig_data_size`).
    cpu_s_per_gb: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    input: String,
    /// Bytes of the input (padded to whole pages when stored).
    bytes: u64,
    algorithm: String,
    repeat: usize,
    once: Pair,
    twice: Pair,
    fold: FoldRun,
}

/// Process RSS in bytes (0 where it cannot be read).
fn rss() -> u64 {
    process_rss_bytes().unwrap_or(0)
}

/// A device of `copies` times the data's size, with dedup `on`, and the data written into
/// it `copies` times one after the other, page by page; its figures, and the device.
fn written(args: &Args, data: &[u8], copies: usize, on: bool) -> anyhow::Result<(Zram, Side)> {
    let base = rss();
    let dev = Zram::new(ZramConfig {
        disksize: (data.len() * copies) as u64,
        dedup: on,
        ..args.device.clone()
    })?;
    let start = Instant::now();
    for copy in 0..copies {
        let at = copy * data.len();
        for (p, page) in data.chunks(PAGE).enumerate() {
            dev.write((at + p * PAGE) as u64, page)?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let mm = dev.mm_stat();
    let after = rss();
    let side = Side {
        dedup: on,
        copies,
        write_mb_s: (data.len() * copies) as f64 / 1e6 / secs,
        mm_stat: mm.fields().to_vec(),
        mem_used: mm.mem_used_total,
        rss: after,
        rss_delta: after as i64 - base as i64,
        fold_stats: dev.fold_stats(),
    };
    Ok((dev, side))
}

/// Reads every copy back and compares it with the data.
fn verify(dev: &Zram, data: &[u8], copies: usize) -> anyhow::Result<()> {
    let mut buf = vec![0u8; PAGE];
    for copy in 0..copies {
        let at = copy * data.len();
        for (p, page) in data.chunks(PAGE).enumerate() {
            dev.read((at + p * PAGE) as u64, &mut buf)?;
            if buf != page {
                bail!(
                    "copy {} page {p} reads back different after the fold",
                    copy + 1
                );
            }
        }
    }
    Ok(())
}

/// The file twice with dedup off, folded; the data checked after.
fn fold_run(args: &Args, data: &[u8]) -> anyhow::Result<FoldRun> {
    let (dev, before) = written(args, data, 2, false)?;
    // RSS just before the device was made, as `written` measured it.
    let base = before.rss as i64 - before.rss_delta;
    let cpu0 = process_cpu_seconds().context("getrusage")?;
    let start = Instant::now();
    let report = dev.fold()?;
    let wall_s = start.elapsed().as_secs_f64();
    let cpu_s = process_cpu_seconds().context("getrusage")? - cpu0;
    let mm = dev.mm_stat();
    let rss_after = rss();
    verify(&dev, data, 2)?;
    let stored_gb = before.mm_stat[0] as f64 / 1e9;
    Ok(FoldRun {
        mm_stat_after: mm.fields().to_vec(),
        mem_used_after: mm.mem_used_total,
        mem_used_ratio: ratio(mm.mem_used_total as f64, before.mem_used as f64),
        rss_after,
        rss_delta_after: rss_after as i64 - base,
        report,
        pages_folded: mm.pages_folded,
        cpu_s,
        wall_s,
        cpu_s_per_gb: if stored_gb > 0.0 {
            cpu_s / stored_gb
        } else {
            0.0
        },
        before,
    })
}

/// `a / b`, 0 when `b` is 0.
fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

/// The run whose `key` is the median.
fn median_by<T>(mut runs: Vec<T>, key: impl Fn(&T) -> f64) -> anyhow::Result<T> {
    runs.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let mid = runs.len() / 2;
    if runs.is_empty() {
        bail!("no runs");
    }
    Ok(runs.swap_remove(mid))
}

/// Runs `f(false)` and `f(true)`, the one first that `i` says (off first when even).
fn alternating<T>(
    i: usize,
    mut f: impl FnMut(bool) -> anyhow::Result<T>,
) -> anyhow::Result<(T, T)> {
    if i.is_multiple_of(2) {
        let off = f(false)?;
        Ok((off, f(true)?))
    } else {
        let on = f(true)?;
        Ok((f(false)?, on))
    }
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let raw =
        std::fs::read(&args.input).with_context(|| format!("read {}", args.input.display()))?;
    if raw.is_empty() {
        bail!("{} is empty", args.input.display());
    }
    let bytes = raw.len() as u64;
    let mut data = raw;
    data.resize(data.len().next_multiple_of(PAGE), 0);
    let repeat = args.repeat.max(1);
    let (mut once_off, mut once_on, mut twice_on, mut folds) = (vec![], vec![], vec![], vec![]);
    let bar = crate::progress::bar("dedup", repeat as u64);
    for i in 0..repeat {
        let (off, on) = alternating(i, |on| written(args, &data, 1, on).map(|(_, s)| s))?;
        once_off.push(off);
        once_on.push(on);
        if i.is_multiple_of(2) {
            folds.push(fold_run(args, &data)?);
            twice_on.push(written(args, &data, 2, true)?.1);
        } else {
            twice_on.push(written(args, &data, 2, true)?.1);
            folds.push(fold_run(args, &data)?);
        }
        crate::progress::tick("");
    }
    drop(bar);
    let speed = |s: &Side| s.write_mb_s;
    let (off, on) = (median_by(once_off, speed)?, median_by(once_on, speed)?);
    let once = Pair {
        ratio: ratio(on.write_mb_s, off.write_mb_s),
        off,
        on,
    };
    let fold = median_by(folds, |f| f.cpu_s)?;
    let on = median_by(twice_on, speed)?;
    let twice = Pair {
        ratio: ratio(on.mem_used as f64, fold.before.mem_used as f64),
        off: fold.before.clone(),
        on,
    };
    let report = Report {
        input: args.input.display().to_string(),
        bytes,
        algorithm: args.device.algorithm.to_string(),
        repeat,
        once,
        twice,
        fold,
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_report(&report, args);
    }
    Ok(())
}

/// Bytes in MiB.
fn mib(bytes: f64) -> f64 {
    bytes / 1048576.0
}

fn print_side(what: &str, s: &Side) {
    println!(
        "{what:<14} {:>5} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>11} {:>8}",
        if s.dedup { "on" } else { "off" },
        s.write_mb_s,
        mib(s.mem_used as f64),
        mib(s.mm_stat[10] as f64),
        mib(s.rss_delta as f64),
        mib(s.rss as f64),
        s.fold_stats.dedup_pages,
        s.mm_stat[9]
    );
}

fn print_report(r: &Report, args: &Args) {
    println!(
        "input {} ({:.1} MB), {}, chain {}, median of {} runs each",
        r.input,
        r.bytes as f64 / 1e6,
        r.algorithm,
        args.device.pool.chain_size,
        r.repeat
    );
    println!(
        "{:<14} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10} {:>11} {:>8}",
        "scenario",
        "dedup",
        "write MB/s",
        "mem_used",
        "metadata",
        "RSS delta",
        "RSS",
        "dedup_pages",
        "folded"
    );
    println!(
        "{:<14} {:>5} {:>10} {:>10} {:>10} {:>10} {:>10}",
        "", "", "", "MiB", "MiB", "MiB", "MiB"
    );
    print_side("once", &r.once.off);
    print_side("once", &r.once.on);
    print_side("twice", &r.twice.off);
    print_side("twice", &r.twice.on);
    let f = &r.fold;
    println!(
        "{:<14} {:>5} {:>10} {:>10.1} {:>10.1} {:>10.1} {:>10.1} {:>11} {:>8}",
        "twice, folded",
        "off",
        "-",
        mib(f.mem_used_after as f64),
        mib(f.mm_stat_after[10] as f64),
        mib(f.rss_delta_after as f64),
        mib(f.rss_after as f64),
        "-",
        f.pages_folded
    );
    println!(
        "dedup on/off: write speed {:.3}x (file once), mem_used_total {:.3}x (file twice)",
        r.once.ratio, r.twice.ratio
    );
    println!(
        "fold: mem_used_total after/before {:.3}x; {} pages folded, {} of {} objects folded; \
         {:.3} CPU s ({:.3} s wall), {:.3} CPU s per GB stored; data verified",
        f.mem_used_ratio,
        f.pages_folded,
        f.report.objects_folded,
        f.report.objects_scanned,
        f.cpu_s,
        f.wall_s,
        f.cpu_s_per_gb
    );
}
