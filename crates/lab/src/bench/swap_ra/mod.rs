//! `zramd bench uswap`: seed 002's workloads (VMA-based swap readahead) on a
//! `uswap::Region` (issue 14), with readahead on and off, and the fault latency of the
//! compressed and written-back tiers.
//!
//! - **sequential**: `--threads` workers, each walking its own part of the region (its own
//!   readahead window, as the seed's processes each have their own VMA) page by page;
//! - **random**: the same, pages in a random order each round;
//! - **combined**: sequential workers plus `--noise-threads` random workers on other parts of
//!   the same region (same budget); latencies of the sequential workers only, as the seed's;
//! - **fault**: one thread, no CPU work, readahead off, every page evicted before each round
//!   (every access a major fault): from the compressed pool with the budget in force (the
//!   evictor stores a page for each one faulted in), from it with room for every page (the
//!   fault service alone), then from a backing file after `idle all` + `writeback idle`.
//!
//! The three workloads read evicted pages back from the compressed pool, or (`--tier
//! written-back`, and in `--workload all`) from the device's backing file, every page it
//! holds written back before each timed round, as the seed's swap-ins read a disk.
//!
//! Each run of a workload switches readahead every eighth of a timed round (a segment,
//! about a quarter of a second with the defaults): on, off, off, on, ... within a round, the
//! next round starting with the other setting, and the next run too, after an untimed
//! warm-up run of the same workload. Each setting's segments are merged: every place in a
//! round has each setting equally often, so that none favours a setting, and both settings
//! see the same stretches of the machine's life.
//!
//! The region is several times the resident budget; the first round writes every page (the
//! region evicts as it goes), the `--rounds` per setting after it are timed: each page's
//! first touch in a round (one word written) is timed as the program sees it, then
//! `--work-us` of CPU work is done on the page.

mod floor;
mod print;
pub mod segments;
pub mod source;
pub mod tier;
pub mod workload;

use std::path::PathBuf;

use anyhow::Context as _;
use serde::Serialize;
use zram::{Algorithm, Size};

use source::Source;
use tier::{Tier, TierRun};
use uswap::histogram::Summary;
use workload::{Run, Settings, Workload};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Region size (K/M/G suffixes).
    #[arg(long, default_value_t = Size(256 << 20))]
    size: Size,
    /// Resident budget (K/M/G suffixes).
    #[arg(long, default_value_t = Size(64 << 20))]
    budget: Size,
    /// Timed rounds per readahead setting in each run, after the untimed round that writes
    /// every page; a run switches readahead every eighth of a round (on, off, off, on, ...).
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Runs of each workload, each on a fresh region, their rounds merged per setting.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    runs: u32,
    /// Measured worker threads, each on its own part of the region (default: half the CPUs,
    /// at least 1: the seed ran 4 sequential processes, 12 with the noise, on 72 hardware
    /// threads, leaving the rest to the swap-in work that readahead overlaps).
    #[arg(long)]
    threads: Option<usize>,
    /// Random background workers of the combined workload (default: a quarter of the CPUs,
    /// at least 1).
    #[arg(long)]
    noise_threads: Option<usize>,
    /// CPU work per page touched, microseconds (the seed's 24).
    #[arg(long, default_value_t = 24)]
    work_us: u64,
    /// The device's compression algorithm.
    #[arg(long, default_value_t = Algorithm::Lz4)]
    algorithm: Algorithm,
    /// `vma_ra_max_order` of the readahead-on runs (window of at most 2^N pages).
    #[arg(long, default_value_t = uswap::readahead::DEFAULT_MAX_ORDER)]
    max_order: u32,
    /// Which workload to run.
    #[arg(long, value_enum, default_value_t = Which::All)]
    workload: Which,
    /// Where the workloads' faults read pages back from: the compressed pool, the backing
    /// file (every page the device holds written back before each timed round, as the
    /// seed's swap-ins read a disk), or each in turn
    /// (default: both for `--workload all`, compressed for one workload).
    #[arg(long, value_enum)]
    tier: Option<Tiers>,
    /// For the workloads' written-back source: the device's read-back cache of neighbouring
    /// written-back pages (on by default in a device, off here, so that faults read the
    /// file page by page and readahead's saving is the region's alone).
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    readback_readahead: bool,
    /// Where the regions' faults are served: `in-thread` (the faulting thread, from
    /// SIGBUS; the default) or `handlers` (handler threads). The fault workload also runs its
    /// compressed tiers in the other mode, side by side.
    #[arg(long, default_value = "in-thread")]
    faults: uswap::FaultMode,
    /// Backing file of the written-back tier and of the workloads' written-back source
    /// (default: a file in the temporary directory,
    /// removed afterwards).
    #[arg(long)]
    backing_dev: Option<PathBuf>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Tiers {
    Compressed,
    WrittenBack,
    Both,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Which {
    Sequential,
    Random,
    Combined,
    Fault,
    /// A bare userfaultfd round trip per way of waiting (the floor under a fault).
    Floor,
    All,
}

/// A target of issue 14 and whether this run meets it.
#[derive(Debug, Serialize)]
pub struct Target {
    /// What is compared.
    pub name: String,
    /// The figure measured.
    pub value: f64,
    /// The target, in words.
    pub target: &'static str,
    /// Whether the figure meets it.
    pub met: bool,
}

/// Everything one `bench uswap` measured.
#[derive(Debug, Serialize)]
pub struct Report {
    /// The settings every run used.
    pub settings: Settings,
    /// One per workload, source and readahead setting (each setting's segments of all the
    /// runs merged).
    pub runs: Vec<Run>,
    /// The fault tiers.
    pub tiers: Vec<TierRun>,
    /// The bare userfaultfd round trips (`--workload floor`).
    pub floors: Vec<floor::FloorRun>,
    /// Issue 14's targets.
    pub targets: Vec<Target>,
}

/// The settings `args` asks for.
fn settings(args: &Args) -> anyhow::Result<Settings> {
    Ok(Settings {
        size: usize::try_from(args.size.bytes())?,
        budget: usize::try_from(args.budget.bytes())?,
        rounds: args.rounds,
        runs: args.runs as usize,
        threads: args.threads.unwrap_or(cpus() / 2).max(1),
        noise_threads: args.noise_threads.unwrap_or((cpus() / 4).max(1)),
        work_us: args.work_us,
        algorithm: args.algorithm,
        max_order: args.max_order,
        faults: args.faults,
        readback_readahead: args.readback_readahead,
    })
}

/// Measures what `args` asks for and returns the figures (printing only progress); an
/// error that [`unavailable`] recognises means userfaultfd cannot be used here.
pub fn figures(args: &Args) -> anyhow::Result<Report> {
    measure(args, &settings(args)?)
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    match figures(args) {
        Err(e) => match unavailable(&e) {
            Some(why) => anyhow::bail!(
                "zramd bench uswap needs userfaultfd, which this process cannot use: {why} \
                 (run it as root, or allow unprivileged users with the sysctl \
                 vm.unprivileged_userfaultfd=1)"
            ),
            None => Err(e),
        },
        Ok(report) => {
            if args.json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print::report(&report);
            }
            Ok(())
        }
    }
}

/// Why userfaultfd is unavailable, if that is what `e` says.
pub fn unavailable(e: &anyhow::Error) -> Option<String> {
    e.chain()
        .find_map(|c| match c.downcast_ref::<uswap::Error>() {
            Some(uswap::Error::Unavailable(why)) => Some(why.clone()),
            _ => None,
        })
}

fn measure(args: &Args, s: &Settings) -> anyhow::Result<Report> {
    let workloads: &[Workload] = match args.workload {
        Which::Sequential => &[Workload::Sequential],
        Which::Random => &[Workload::Random],
        Which::Combined => &[Workload::Combined],
        Which::Fault | Which::Floor => &[],
        Which::All => &[Workload::Sequential, Workload::Random, Workload::Combined],
    };
    let sources: &[Source] = match args.tier {
        Some(Tiers::Compressed) => &[Source::Compressed],
        Some(Tiers::WrittenBack) => &[Source::WrittenBack],
        Some(Tiers::Both) => &[Source::Compressed, Source::WrittenBack],
        None if args.workload == Which::All => &[Source::Compressed, Source::WrittenBack],
        None => &[Source::Compressed],
    };
    let mut runs = Vec::new();
    // A step per run: the warm-up and the timed runs per workload, five fault tiers.
    let fault = matches!(args.workload, Which::Fault | Which::All);
    let floor = args.workload == Which::Floor;
    let steps = workloads.len() * sources.len() * (1 + s.runs)
        + if fault { 5 } else { 0 }
        + if floor { 3 } else { 0 };
    let _bar = crate::progress::bar("uswap", steps as u64);
    let needs_file = fault || sources.contains(&Source::WrittenBack);
    let (file, _remove) = match &args.backing_dev {
        Some(f) => (Some(f.clone()), None),
        None if needs_file => {
            let f =
                std::env::temp_dir().join(format!("zramd-bench-uswap-{}.img", std::process::id()));
            std::fs::File::create(&f).with_context(|| format!("create {}", f.display()))?;
            (Some(f.clone()), Some(Remove(f)))
        }
        None => (None, None),
    };
    for (&w, &source) in workloads
        .iter()
        .flat_map(|w| sources.iter().map(move |src| (w, src)))
    {
        let backing = match source {
            Source::Compressed => None,
            Source::WrittenBack => file.as_deref(),
        };
        // The first run of a workload is slower than the same run later (allocator arenas,
        // the page cache, frequencies settling): an untimed one goes first.
        if !args.json {
            let line = format!("warming up {}, {}", w.name(), source.name());
            crate::progress::print(|| eprintln!("{line}"));
        }
        segments::run(s, w, &[true; segments::SEGMENTS], backing)?;
        crate::progress::tick("");
        let mut pair: [Option<workload::Run>; 2] = [None, None];
        for i in 0..s.runs {
            let schedule = schedule(s.rounds, segments::SEGMENTS, i);
            if !args.json {
                let line = format!(
                    "running {}, {}, readahead switched between segments ({} a round): {}, ...",
                    w.name(),
                    source.name(),
                    segments::SEGMENTS,
                    sequence(&schedule[..4.min(schedule.len())])
                );
                crate::progress::print(|| eprintln!("{line}"));
            }
            for r in segments::run(s, w, &schedule, backing)? {
                match &mut pair[workload::idx(r.readahead)] {
                    Some(have) => have.merge(r),
                    slot => *slot = Some(r),
                }
            }
            crate::progress::tick("");
        }
        runs.extend(pair.into_iter().flatten());
    }
    let mut tiers = Vec::new();
    if fault {
        if !args.json {
            crate::progress::print(|| eprintln!("running the fault tiers"));
        }
        // The compressed tiers in both fault modes, the chosen one first.
        for faults in [s.faults, s.faults.other()] {
            let s = &Settings {
                faults,
                ..s.clone()
            };
            tiers.push(tier::run(s, Tier::Compressed, None)?);
            crate::progress::tick("");
            tiers.push(tier::run(s, Tier::CompressedAlone, None)?);
            crate::progress::tick("");
        }
        tiers.push(tier::run(s, Tier::WrittenBack, file.as_deref())?);
        crate::progress::tick("");
    }
    let mut floors = Vec::new();
    if floor {
        for wait in [
            floor::Wait::Spin,
            floor::Wait::Poll,
            floor::Wait::PollSameCpu,
        ] {
            floors.push(floor::run(s.size / workload::PAGE, s.rounds, wait)?);
            crate::progress::tick("");
        }
    }
    let targets = targets(&runs, &tiers, s.faults);
    Ok(Report {
        settings: s.clone(),
        runs,
        tiers,
        floors,
        targets,
    })
}

/// The readahead setting of each segment of run `run`: `rounds` rounds per setting, so
/// `2 * rounds` rounds of `segments` (even) segments. Within a round the settings go on,
/// off, off, on, ...; each round starts with the other setting than the one before it, so
/// that every place in a round (the first after a write-back, say) has each setting equally
/// often within the run; odd runs start off.
fn schedule(rounds: usize, segments: usize, run: usize) -> Vec<bool> {
    (0..2 * rounds)
        .flat_map(|r| {
            (0..segments / 2).flat_map(move |p| {
                let on_first = (p + r + run).is_multiple_of(2);
                [on_first, !on_first]
            })
        })
        .collect()
}

/// `schedule` in words: `on, off, off, on`.
fn sequence(schedule: &[bool]) -> String {
    let words: Vec<&str> = schedule.iter().map(|&ra| workload::on_off(ra)).collect();
    words.join(", ")
}

/// CPUs this process may run on.
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Issue 14's targets, the fault tiers' in the mode `faults` the run chose.
fn targets(runs: &[Run], tiers: &[TierRun], faults: uswap::FaultMode) -> Vec<Target> {
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let mut out = Vec::new();
    type Stat = fn(&Summary) -> f64;
    type Met = fn(f64) -> bool;
    let p90: Stat = |s| s.p90_us;
    let avg: Stat = |s| s.avg_us;
    let within_5: Met = |v| (v - 1.0).abs() <= 0.05;
    let on_off: [(Workload, &str, Stat, &str, Met); 4] = [
        (
            Workload::Sequential,
            "sequential p90 on/off",
            p90,
            "<= 0.1",
            |v| v <= 0.1,
        ),
        (
            Workload::Random,
            "random p90 on/off",
            p90,
            "within 5% of 1",
            within_5,
        ),
        (
            Workload::Random,
            "random avg on/off",
            avg,
            "within 5% of 1",
            within_5,
        ),
        (
            Workload::Combined,
            "combined p90 on/off",
            p90,
            "<= 0.5",
            |v| v <= 0.5,
        ),
    ];
    for source in [Source::Compressed, Source::WrittenBack] {
        for &(w, what, stat, target, met) in &on_off {
            let get = |ra| Run::find(runs, w.name(), source, ra);
            if let (Some(on), Some(off)) = (get(true), get(false)) {
                let value = ratio(stat(&on.latency), stat(&off.latency));
                out.push(Target {
                    name: match source {
                        Source::Compressed => what.to_owned(),
                        Source::WrittenBack => format!("written back: {what}"),
                    },
                    value,
                    target,
                    met: met(value),
                });
            }
        }
    }
    for (tier, p50, p99) in [
        (
            Tier::Compressed,
            "compressed-tier fault p50 (us)",
            "compressed-tier fault p99 (us)",
        ),
        (
            Tier::CompressedAlone,
            "compressed, no eviction: p50 (us)",
            "compressed, no eviction: p99 (us)",
        ),
    ] {
        if let Some(t) = tiers.iter().find(|t| t.tier == tier && t.faults == faults) {
            out.push(Target {
                name: p50.to_owned(),
                value: t.latency.p50_us,
                target: "<= 10",
                met: t.latency.p50_us <= 10.0,
            });
            out.push(Target {
                name: p99.to_owned(),
                value: t.latency.p99_us,
                target: "<= 40",
                met: t.latency.p99_us <= 40.0,
            });
        }
    }
    out
}

/// Removes the temporary backing file when the bench ends, however it ends.
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_setting_has_each_place_in_a_round_equally_often_within_a_run() {
        let (on, off) = (true, false);
        let seq = super::schedule(1, 4, 0);
        assert_eq!(
            seq,
            [on, off, off, on, off, on, on, off],
            "on, off, off, on, ..."
        );
        assert_eq!(super::sequence(&seq[..3]), "on, off, off");
        assert_eq!(super::schedule(1, 2, 0), [on, off, off, on]);
        assert_eq!(
            super::schedule(1, 2, 1),
            [off, on, on, off],
            "odd runs start off"
        );
        for rounds in 1..=5 {
            for segments in [2, 4, 8] {
                for run in 0..2 {
                    let seq = super::schedule(rounds, segments, run);
                    assert_eq!(seq.len(), 2 * rounds * segments);
                    assert_eq!(seq[0], run == 0);
                    for place in 0..segments {
                        let on = seq.iter().skip(place).step_by(segments).filter(|&&x| x);
                        assert_eq!(on.count(), rounds, "{rounds} {segments} {run} {place}");
                    }
                }
            }
        }
    }
}
