//! The seed's workloads on a `uswap::Region`: worker threads, each on its own part of the
//! region, touching every page of it once per round (in order or in a random order), with
//! CPU work on each page; the first touch of each page is timed as the program sees it.
//! One run switches readahead on and off between its rounds ([`run`]).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use serde::Serialize;
use uswap::histogram::{Histogram, Snapshot, Summary};
use uswap::{FaultMode, Part, ReadaheadConfig, Region, RegionConfig, RegionStats};
use zram::{Algorithm, ZramConfig};

use super::source::{Source, write_back_all};

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
    /// Pages written to the backing file in the run, both settings (written-back source).
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

/// The page order of one round.
fn order(pages: usize, random: bool, rng: &mut SmallRng) -> Vec<usize> {
    let mut v: Vec<usize> = (0..pages).collect();
    if random {
        v.shuffle(rng);
    }
    v
}

/// Where a round's first touches go.
enum Sink<'a> {
    /// A measured worker's round: all into the histogram of the round's setting.
    Round(&'a Touches),
    /// A background worker: into the histogram of the setting `current` holds at each
    /// touch, until `stop` is set. Each touch holds `gate` for reading, so that the
    /// settings switch between touches and a fault's counts fall in one setting.
    Background {
        hists: &'a [Touches; 2],
        current: &'a AtomicUsize,
        stop: &'a AtomicBool,
        gate: &'a RwLock<()>,
    },
}

/// One round over `part`: each page's first touch (one word written) timed into `sink`,
/// then the CPU work.
fn round(
    part: &mut Part<'_>,
    pages: &[usize],
    stamp: u64,
    work_us: u64,
    sink: &Sink<'_>,
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; PAGE];
    for &p in pages {
        let (hist, touching) = match sink {
            Sink::Round(h) => (*h, None),
            Sink::Background { stop, .. } if stop.load(Ordering::Relaxed) => break,
            Sink::Background {
                hists,
                current,
                gate,
                ..
            } => {
                let touching = gate.read().unwrap_or_else(|p| p.into_inner());
                (&hists[current.load(Ordering::Relaxed)], Some(touching))
            }
        };
        let off = p * PAGE + 8;
        let t = Instant::now();
        part.write(off, &stamp.to_le_bytes())?;
        hist.record(t.elapsed());
        drop(touching);
        work(part, p * PAGE, &mut buf, work_us)?;
    }
    Ok(())
}

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
        self.written_back_pages += other.written_back_pages;
        self.bd_reads += other.bd_reads;
        self.seconds += other.seconds;
        self.rounds += other.rounds;
        self.runs += other.runs;
    }
}

/// The readahead setting's place in per-setting arrays: on first.
fn idx(ra: bool) -> usize {
    usize::from(!ra)
}

/// What the leader of the measured workers keeps between rounds, per setting.
struct Book {
    counts: [Counts; 2],
    /// The handler's time per fault over the setting's first round.
    fault: [Option<Summary>; 2],
    seconds: [f64; 2],
    bd_reads: [u64; 2],
    written_back: u64,
    last: RegionStats,
    last_bd_reads: u64,
    since: Instant,
}

/// A timed round is done in this many segments (each a measured worker's share of the
/// round's pages, in the round's order), and readahead may change between any two.
pub const SEGMENTS: usize = 8;

/// Runs `w` on one region, its timed rounds' segments with readahead as `schedule` says
/// (one setting per segment, [`SEGMENTS`] segments a round, switched while every measured
/// worker waits); returns one [`Run`] per setting the schedule has, readahead on first.
///
/// Switching within a run, rather than running each setting on a region of its own, puts
/// both settings in the same stretch of the machine's life: the random workload's p90 moved
/// by up to 13% between separate runs (the VM's noisy stretches), more than the 5% the
/// comparison asks, and still by up to 6% when the setting changed only between whole
/// rounds (about 2 s each).
///
/// With a `backing` file, the pages are written back as [`Source::WrittenBack`] says (the
/// device reads each page on its own, without its read-back cache of neighbours, so that
/// readahead is the region's alone).
pub fn run(
    s: &Settings,
    w: Workload,
    schedule: &[bool],
    backing: Option<&Path>,
) -> anyhow::Result<Vec<Run>> {
    anyhow::ensure!(!schedule.is_empty(), "no timed segment to run");
    let noise = if w == Workload::Combined {
        s.noise_threads
    } else {
        0
    };
    let nparts = s.threads + noise;
    let cfg = |ra| ReadaheadConfig::new(ra, s.max_order);
    let mut device = s.device();
    if let Some(file) = backing {
        device.backing_dev = Some(file.to_path_buf());
        device.readback_readahead = false;
    }
    let mut region = region(s, nparts, cfg(schedule[0]), device)?;
    let monitor = region.monitor();
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

    let written_back = match backing {
        Some(_) => write_back_all(region.device())?,
        None => 0,
    };
    region.reset_latency();
    let book = Mutex::new(Book {
        counts: [Counts::default(); 2],
        fault: [None, None],
        seconds: [0.0; 2],
        bd_reads: [0; 2],
        written_back,
        last: region.stats(),
        last_bd_reads: region.device().bd_stat().bd_reads,
        since: Instant::now(),
    });
    let hists = [Touches::default(), Touches::default()];
    let noise_hists = [Touches::default(), Touches::default()];
    // The setting of the round in progress, for the background workers.
    let current = AtomicUsize::new(idx(schedule[0]));
    let stop = AtomicBool::new(false);
    // A measured worker failed: the others skip their remaining rounds but still meet at
    // every barrier, so that none waits for ever.
    let failed = AtomicBool::new(false);
    let barrier = Barrier::new(s.threads);
    let gate = RwLock::new(());
    let mut parts = region.parts_mut();
    let pages = parts[0].len() / PAGE;
    std::thread::scope(|sc| -> anyhow::Result<()> {
        let (hists, noise_hists, stop, failed, current) =
            (&hists, &noise_hists, &stop, &failed, &current);
        let (barrier, book, monitor, gate) = (&barrier, &book, &monitor, &gate);
        let mut measured = Vec::new();
        let mut background = Vec::new();
        for (i, part) in parts.iter_mut().enumerate() {
            let bg = i >= s.threads;
            let h = sc.spawn(move || -> anyhow::Result<()> {
                let mut rng = SmallRng::seed_from_u64(0x5eed ^ i as u64);
                if bg {
                    for r in 1.. {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let o = order(pages, true, &mut rng);
                        let sink = Sink::Background {
                            hists: noise_hists,
                            current,
                            stop,
                            gate,
                        };
                        round(part, &o, r, s.work_us, &sink)?;
                    }
                    return Ok(());
                }
                let mut res = Ok(());
                let mut o = Vec::new();
                for (i, &ra) in schedule.iter().enumerate() {
                    let (r, seg) = (i / SEGMENTS, i % SEGMENTS);
                    if seg == 0 {
                        o = order(pages, random, &mut rng);
                    }
                    if res.is_ok() && !failed.load(Ordering::Relaxed) {
                        let o = &o[seg * pages / SEGMENTS..(seg + 1) * pages / SEGMENTS];
                        let sink = Sink::Round(&hists[idx(ra)]);
                        res = round(part, o, r as u64 + 1, s.work_us, &sink);
                        if res.is_err() {
                            failed.store(true, Ordering::Relaxed);
                        }
                    }
                    if barrier.wait().is_leader() {
                        // No background touch is in flight while the setting changes.
                        let _switching = gate.write().unwrap_or_else(|p| p.into_inner());
                        let mut b = book.lock().unwrap_or_else(|p| p.into_inner());
                        let now = monitor.stats();
                        let k = idx(ra);
                        let c = Counts::between(&b.last, &now);
                        b.counts[k] += c;
                        b.fault[k].get_or_insert(now.fault_latency);
                        b.seconds[k] += b.since.elapsed().as_secs_f64();
                        let bd_reads = monitor.device().bd_stat().bd_reads;
                        b.bd_reads[k] += bd_reads - b.last_bd_reads;
                        if let Some(&next) = schedule.get(i + 1) {
                            monitor.set_readahead(cfg(next));
                            current.store(idx(next), Ordering::Relaxed);
                            // Before each round (the rounds after the first), so that
                            // its faults read pages evicted in the round before from the file.
                            if backing.is_some() && (i + 1).is_multiple_of(SEGMENTS) {
                                match write_back_all(monitor.device()) {
                                    Ok(n) => b.written_back += n,
                                    Err(e) => {
                                        res = res.and(Err(e));
                                        failed.store(true, Ordering::Relaxed);
                                    }
                                }
                            }
                        }
                        monitor.reset_latency();
                        b.last = monitor.stats();
                        b.last_bd_reads = monitor.device().bd_stat().bd_reads;
                        b.since = Instant::now();
                    }
                    barrier.wait();
                }
                res
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
    drop(parts);
    let after = region.stats();
    if let Some(f) = &after.failed {
        anyhow::bail!("the region failed: {f}");
    }
    let book = book.into_inner().unwrap_or_else(|p| p.into_inner());
    let runs = [true, false]
        .into_iter()
        .filter(|ra| schedule.contains(ra))
        .map(|ra| {
            let k = idx(ra);
            let touches = hists[k].hist.snapshot();
            let noise_touches = (noise > 0).then(|| noise_hists[k].hist.snapshot());
            Run {
                workload: w,
                source: if backing.is_some() {
                    Source::WrittenBack
                } else {
                    Source::Compressed
                },
                readahead: ra,
                vma_ra_max_order: s.max_order,
                pages_per_thread: pages,
                measured_threads: s.threads,
                noise_threads: noise,
                rounds: schedule.iter().filter(|&&x| x == ra).count() / SEGMENTS,
                seconds: book.seconds[k],
                latency: touches.summary(),
                waited: hists[k].waited(),
                noise_latency: noise_touches.as_ref().map(Snapshot::summary),
                touches,
                noise_touches,
                runs: 1,
                counts: book.counts[k],
                written_back_pages: book.written_back,
                bd_reads: book.bd_reads[k],
                fault_latency: book.fault[k].unwrap_or_default(),
                resident_pages: after.resident_pages,
                budget_pages: after.budget_pages,
            }
        })
        .collect();
    Ok(runs)
}
