//! The seed's workloads on a `uswap::Region`: worker threads, each on its own part of the
//! region, touching every page of it once per round (in order or in a random order), with
//! CPU work on each page; the first touch of each page is timed as the program sees it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use serde::Serialize;
use uswap::histogram::{Histogram, Snapshot, Summary};
use uswap::{FaultMode, Part, ReadaheadConfig, Region, RegionConfig, RegionStats};
use zram::{Algorithm, ZramConfig};

pub const PAGE: usize = uswap::sys::PAGE_SIZE;

/// What every run shares (from the command line).
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Region bytes.
    pub size: usize,
    /// Resident budget, bytes.
    pub budget: usize,
    /// Timed rounds (after the untimed first round that writes every page).
    pub rounds: usize,
    /// Runs of each workload per readahead setting.
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
    /// Region counters over the timed rounds (all workers).
    pub counts: Counts,
    /// The handler's own time per fault over the timed rounds (all workers).
    pub fault_latency: Summary,
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

/// The page order of one round.
fn order(pages: usize, random: bool, rng: &mut SmallRng) -> Vec<usize> {
    let mut v: Vec<usize> = (0..pages).collect();
    if random {
        v.shuffle(rng);
    }
    v
}

/// One round over `part`: each page's first touch (one word written) timed into `hist`,
/// then the CPU work; stops early when `stop` is set.
fn round(
    part: &mut Part<'_>,
    pages: &[usize],
    stamp: u64,
    work_us: u64,
    hist: &Touches,
    stop: Option<&AtomicBool>,
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; PAGE];
    for &p in pages {
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            break;
        }
        let off = p * PAGE + 8;
        let t = Instant::now();
        part.write(off, &stamp.to_le_bytes())?;
        hist.record(t.elapsed());
        work(part, p * PAGE, &mut buf, work_us)?;
    }
    Ok(())
}

/// Runs `w` with readahead on or off.
impl Run {
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
        self.seconds += other.seconds;
        self.rounds += other.rounds;
        self.runs += other.runs;
    }
}

pub fn run(s: &Settings, w: Workload, ra: bool) -> anyhow::Result<Run> {
    let noise = if w == Workload::Combined {
        s.noise_threads
    } else {
        0
    };
    let nparts = s.threads + noise;
    let mut region = region(s, nparts, ReadaheadConfig::new(ra, s.max_order), s.device())?;
    let random = w == Workload::Random;

    // Round 0: every page written whole, untimed; the region evicts as it goes.
    std::thread::scope(|sc| -> anyhow::Result<()> {
        let handles: Vec<_> = region
            .parts_mut()
            .into_iter()
            .enumerate()
            .map(|(i, mut part)| sc.spawn(move || fill(&mut part, i as u64)))
            .collect();
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("a worker panicked"))??;
        }
        Ok(())
    })?;

    let before = region.stats();
    region.reset_latency();
    let hist = Touches::default();
    let noise_hist = Touches::default();
    let stop = AtomicBool::new(false);
    let start = Instant::now();
    let mut parts = region.parts_mut();
    let pages = parts[0].len() / PAGE;
    std::thread::scope(|sc| -> anyhow::Result<()> {
        let (hist, noise_hist, stop) = (&hist, &noise_hist, &stop);
        let mut measured = Vec::new();
        let mut background = Vec::new();
        for (i, part) in parts.iter_mut().enumerate() {
            let bg = i >= s.threads;
            let h = sc.spawn(move || -> anyhow::Result<()> {
                let mut rng = SmallRng::seed_from_u64(0x5eed ^ i as u64);
                for r in 1.. {
                    if bg && stop.load(Ordering::Relaxed) || !bg && r > s.rounds {
                        break;
                    }
                    let o = order(pages, random || bg, &mut rng);
                    if bg {
                        round(part, &o, r as u64, s.work_us, noise_hist, Some(stop))?;
                    } else {
                        round(part, &o, r as u64, s.work_us, hist, None)?;
                    }
                }
                Ok(())
            });
            if bg {
                background.push(h);
            } else {
                measured.push(h);
            }
        }
        let mut res = Ok(());
        for h in measured {
            let r = h.join().map_err(|_| anyhow::anyhow!("a worker panicked"));
            res = res.and(r.and_then(|r| r));
        }
        stop.store(true, Ordering::Relaxed);
        for h in background {
            let r = h.join().map_err(|_| anyhow::anyhow!("a worker panicked"));
            res = res.and(r.and_then(|r| r));
        }
        res
    })?;
    let seconds = start.elapsed().as_secs_f64();
    drop(parts);
    let after = region.stats();
    if let Some(f) = &after.failed {
        anyhow::bail!("the region failed: {f}");
    }
    Ok(Run {
        workload: w,
        readahead: ra,
        vma_ra_max_order: after.vma_ra_max_order,
        pages_per_thread: pages,
        measured_threads: s.threads,
        noise_threads: noise,
        rounds: s.rounds,
        seconds,
        latency: hist.hist.snapshot().summary(),
        waited: hist.waited(),
        noise_latency: (noise > 0).then(|| noise_hist.hist.snapshot().summary()),
        touches: hist.hist.snapshot(),
        noise_touches: (noise > 0).then(|| noise_hist.hist.snapshot()),
        runs: 1,
        counts: Counts::between(&before, &after),
        fault_latency: after.fault_latency,
        resident_pages: after.resident_pages,
        budget_pages: after.budget_pages,
    })
}
