//! The seed's workloads on a `uswap::Region`: worker threads, each on its own part of the
//! region, touching every page of it once per round (in order or in a random order), with
//! CPU work on each page; the first touch of each page is timed as the program sees it.
//! A run of one is `segments::run`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use uswap::histogram::{Histogram, Snapshot, Summary};
use uswap::{FaultMode, Part, ReadaheadConfig, Region, RegionConfig, RegionStats};
use zram::{Algorithm, ZramConfig};

use super::source::Source;

pub const PAGE: usize = uswap::sys::PAGE_SIZE;

/// What every run shares (from the command line).
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Region bytes.
    pub size: usize,
    /// Resident budget, bytes.
    pub budget: usize,
    /// Timed rounds per readahead setting in a run (after the untimed first round that
    /// writes every page).
    pub rounds: usize,
    /// Runs of each workload, each on a fresh region.
    pub runs: usize,
    /// Measured worker threads.
    pub threads: usize,
    /// Random background workers of the combined workload.
    pub noise_threads: usize,
    /// CPU work per page, microseconds.
    pub work_us: u64,
    /// The device's compression algorithm.
    pub algorithm: Algorithm,
    /// `vma_ra_max_order` of the readahead-on runs.
    pub max_order: u32,
    /// Where the regions' faults are served.
    pub faults: FaultMode,
    /// Whether the workloads' devices keep a read-back cache of neighbouring written-back
    /// pages (zram's `readback_readahead`, beyond the kernel).
    pub readback_readahead: bool,
}

impl Settings {
    /// The zram device of every region.
    pub fn device(&self) -> ZramConfig {
        ZramConfig {
            algorithm: self.algorithm,
            ..ZramConfig::default()
        }
    }
}

/// The seed's three workloads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// Each worker walks its part page by page.
    Sequential,
    /// Each worker touches its part's pages in a random order each round.
    Random,
    /// Sequential workers plus random background workers on other parts.
    Combined,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Self::Sequential => "sequential",
            Self::Random => "random",
            Self::Combined => "combined",
        }
    }
}

/// The region's counters over the timed rounds (the kernel's `/proc/vmstat` names).
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Counts {
    pub pgfault: u64,
    pub pgmajfault: u64,
    pub swap_ra: u64,
    pub swap_ra_hit: u64,
    pub pswpin: u64,
    pub pswpout: u64,
    pub wp_faults: u64,
}

impl Counts {
    /// `after - before`.
    pub fn between(before: &RegionStats, after: &RegionStats) -> Self {
        Self {
            pgfault: after.pgfault - before.pgfault,
            pgmajfault: after.pgmajfault - before.pgmajfault,
            swap_ra: after.swap_ra - before.swap_ra,
            swap_ra_hit: after.swap_ra_hit - before.swap_ra_hit,
            pswpin: after.pswpin - before.pswpin,
            pswpout: after.pswpout - before.pswpout,
            wp_faults: after.wp_faults - before.wp_faults,
        }
    }
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, o: Self) {
        self.pgfault += o.pgfault;
        self.pgmajfault += o.pgmajfault;
        self.swap_ra += o.swap_ra;
        self.swap_ra_hit += o.swap_ra_hit;
        self.pswpin += o.pswpin;
        self.pswpout += o.pswpout;
        self.wp_faults += o.wp_faults;
    }
}

/// One workload with readahead on or off.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub workload: Workload,
    /// Where faults read pages back from.
    pub source: Source,
    pub readahead: bool,
    pub vma_ra_max_order: u32,
    /// Pages per part (each worker's part).
    pub pages_per_thread: usize,
    /// Workers whose latencies are reported.
    pub measured_threads: usize,
    /// Random background workers (combined only).
    pub noise_threads: usize,
    pub rounds: usize,
    /// Wall time of the timed rounds, seconds.
    pub seconds: f64,
    /// Program-observed latency of each page's first touch per round, measured workers.
    pub latency: Summary,
    /// Of those, the touches that took at least [`WAITED`] (faults of any kind, pages still
    /// being read ahead).
    pub waited: u64,
    /// The same for the background workers (combined only; not a target).
    pub noise_latency: Option<Summary>,
    /// Region counters over this setting's timed rounds (all workers; taken as the
    /// setting switches, with no touch in flight).
    pub counts: Counts,
    /// The handler's own time per fault over this setting's first timed segment (all
    /// workers).
    pub fault_latency: Summary,
    /// Pages written to the backing file in the runs merged here, both settings
    /// (written-back source).
    pub written_back_pages: u64,
    /// Pages read back from the backing file in this setting's segments (`bd_stat`).
    pub bd_reads: u64,
    /// Pages resident after the run, and the budget.
    pub resident_pages: u64,
    pub budget_pages: u64,
    /// The measured touches, for merging runs.
    #[serde(skip)]
    pub touches: Snapshot,
    /// The background touches, for merging runs.
    #[serde(skip)]
    pub noise_touches: Option<Snapshot>,
    /// How many runs were merged into this one.
    pub runs: usize,
}

/// A region for `s` on `device`, split into `parts` parts of equal size.
pub fn region(
    s: &Settings,
    parts: usize,
    ra: ReadaheadConfig,
    device: ZramConfig,
) -> anyhow::Result<Region> {
    let range_pages = (s.size / PAGE / parts).max(1);
    let config = RegionConfig {
        resident_budget: s.budget,
        device,
        readahead: ra,
        range_len: range_pages * PAGE,
        faults: s.faults,
        ..RegionConfig::default()
    };
    Region::new(range_pages * parts * PAGE, config).context("making the region")
}

/// A page of bytes that compress about as anonymous memory does (2–3x with lz4): words
/// around a base with a random low byte, runs of small integers.
pub fn pattern(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut page = vec![0u8; PAGE];
    for (i, w) in page.chunks_exact_mut(8).enumerate() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let v = if i % 4 == 3 {
            i as u64
        } else {
            0x7f00_0000_0000 | (seed << 12) | (x & 0xff)
        };
        w.copy_from_slice(&v.to_le_bytes());
    }
    page
}

/// `work_us` of CPU work on the page at `off`: reads it, then folds its words until the
/// time is up.
pub fn work(part: &Part<'_>, off: usize, buf: &mut [u8], work_us: u64) -> anyhow::Result<()> {
    if work_us == 0 {
        return Ok(());
    }
    let end = Instant::now() + Duration::from_micros(work_us);
    part.read(off, buf)?;
    let mut acc = 0u64;
    loop {
        for w in buf.chunks_exact(8) {
            acc = acc.rotate_left(5) ^ u64::from_le_bytes(w.try_into().expect("8 bytes"));
        }
        if Instant::now() >= end {
            break;
        }
    }
    std::hint::black_box(acc);
    Ok(())
}

/// Writes every page of `part` whole (the first round: the region fills and evicts).
pub fn fill(part: &mut Part<'_>, seed: u64) -> anyhow::Result<()> {
    for p in 0..part.len() / PAGE {
        part.write(p * PAGE, &pattern(seed << 24 | p as u64))?;
    }
    Ok(())
}

/// A first touch at least this long waited for something (a fault of any kind, a page
/// still being read ahead, a write-protected page): a resident page takes well under 1 us.
pub const WAITED: Duration = Duration::from_micros(2);

/// Where first-touch latencies go: the histogram and how many waited.
#[derive(Debug, Default)]
pub struct Touches {
    pub hist: Histogram,
    pub waited: AtomicU64,
}

impl Touches {
    pub fn record(&self, d: Duration) {
        self.hist.record(d);
        if d >= WAITED {
            self.waited.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub fn waited(&self) -> u64 {
        self.waited.load(Ordering::Relaxed)
    }
}

impl Run {
    /// The run's name in tables and plots: `random ra on`, `random, written back, ra on`.
    pub fn label(&self) -> String {
        let ra = on_off(self.readahead);
        match self.source {
            Source::Compressed => format!("{} ra {ra}", self.workload.name()),
            Source::WrittenBack => format!("{}, written back, ra {ra}", self.workload.name()),
        }
    }

    /// The run of workload `name` from `source` with readahead `ra` among `runs`.
    pub fn find<'a>(runs: &'a [Run], name: &str, source: Source, ra: bool) -> Option<&'a Run> {
        runs.iter()
            .find(|r| r.workload.name() == name && r.source == source && r.readahead == ra)
    }

    /// Adds another run of the same workload and setting: touches, counts and seconds are
    /// summed; the handler's time is the first run's.
    pub fn merge(&mut self, other: Run) {
        self.touches.merge(&other.touches);
        self.latency = self.touches.summary();
        if let (Some(a), Some(b)) = (&mut self.noise_touches, &other.noise_touches) {
            a.merge(b);
            self.noise_latency = Some(a.summary());
        }
        self.waited += other.waited;
        self.counts += other.counts;
        self.written_back_pages += other.written_back_pages;
        self.bd_reads += other.bd_reads;
        self.seconds += other.seconds;
        self.rounds += other.rounds;
        self.runs += other.runs;
    }
}

/// `on` or `off`.
pub fn on_off(ra: bool) -> &'static str {
    if ra { "on" } else { "off" }
}

/// The readahead setting's place in per-setting arrays: on first.
pub fn idx(ra: bool) -> usize {
    usize::from(!ra)
}
