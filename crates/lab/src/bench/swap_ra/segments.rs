//! One run of a workload: the region filled, then its timed rounds in segments, readahead
//! switched between segments as a schedule says, while every measured worker waits.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use uswap::histogram::{Snapshot, Summary};
use uswap::{Monitor, Part, ReadaheadConfig, RegionStats};

use super::source::{self, Source, write_back_all};
use super::workload::{Counts, PAGE, Run, Settings, Touches, Workload, fill, idx, region, work};

/// The page order of one round.
fn order(pages: usize, random: bool, rng: &mut SmallRng) -> Vec<usize> {
    let mut v: Vec<usize> = (0..pages).collect();
    if random {
        v.shuffle(rng);
    }
    v
}

/// Where a segment's (or a background round's) first touches go.
enum Sink<'a> {
    /// A measured worker's segment: all into the histogram of the segment's setting.
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

/// One pass over `pages` of `part` (a measured worker's segment, a background worker's
/// round): each page's first touch (one word written) timed into `sink`, then the CPU work.
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

/// What the leader of the measured workers keeps between segments, per setting.
struct Book {
    counts: [Counts; 2],
    /// The handler's time per fault over the setting's first segment.
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

/// How long a switch waits for pages still on their way in or out (with handler threads,
/// a page read ahead after the program was woken) before it books the segment.
const QUIET_WAIT: Duration = Duration::from_secs(1);

/// What the workers of one run share.
struct Runner<'a> {
    schedule: &'a [bool],
    monitor: &'a Monitor,
    max_order: u32,
    /// Written-back source: pages go to the file before each timed round.
    backing: bool,
    pages: usize,
    random: bool,
    work_us: u64,
    book: Mutex<Book>,
    hists: [Touches; 2],
    noise_hists: [Touches; 2],
    /// The setting of the segment in progress, for the background workers.
    current: AtomicUsize,
    /// Set after the last segment: the background workers stop.
    stop: AtomicBool,
    /// Held for reading by each background touch, for writing by a switch.
    gate: RwLock<()>,
    /// Every measured worker meets the others here after each segment.
    barrier: Barrier,
    /// A measured worker failed: the others skip their remaining segments but still meet
    /// at every barrier, so that none waits for ever.
    failed: AtomicBool,
}

impl Runner<'_> {
    /// A measured worker: the schedule's segments in turn, meeting the others after each;
    /// the barrier's leader switches the setting.
    fn measured(&self, part: &mut Part<'_>, rng: &mut SmallRng) -> anyhow::Result<()> {
        let (pages, mut res, mut o) = (self.pages, Ok(()), Vec::new());
        for (i, &ra) in self.schedule.iter().enumerate() {
            let (r, seg) = (i / SEGMENTS, i % SEGMENTS);
            if seg == 0 {
                o = order(pages, self.random, rng);
            }
            if res.is_ok() && !self.failed.load(Ordering::Relaxed) {
                let o = &o[seg * pages / SEGMENTS..(seg + 1) * pages / SEGMENTS];
                let sink = Sink::Round(&self.hists[idx(ra)]);
                res = unwound(|| round(part, o, r as u64 + 1, self.work_us, &sink));
                if res.is_err() {
                    self.failed.store(true, Ordering::Relaxed);
                }
            }
            if self.barrier.wait().is_leader()
                && let Err(e) = unwound(|| self.switch(i))
            {
                res = res.and(Err(e));
                self.failed.store(true, Ordering::Relaxed);
            }
            self.barrier.wait();
        }
        res
    }

    /// A background worker: random rounds until the last segment ends.
    fn background(&self, part: &mut Part<'_>, rng: &mut SmallRng) -> anyhow::Result<()> {
        let sink = Sink::Background {
            hists: &self.noise_hists,
            current: &self.current,
            stop: &self.stop,
            gate: &self.gate,
        };
        for r in 1.. {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            let o = order(self.pages, true, rng);
            round(part, &o, r, self.work_us, &sink)?;
        }
        Ok(())
    }

    /// After segment `i`, every measured worker waiting: books the segment to its setting,
    /// switches to the next segment's, writes the pages back before a new round (written-back
    /// source), and stops the background workers after the last segment.
    fn switch(&self, i: usize) -> anyhow::Result<()> {
        // No background touch is in flight, and no page on its way in or out.
        let _switching = self.gate.write().unwrap_or_else(PoisonError::into_inner);
        self.monitor.wait_quiet(QUIET_WAIT);
        let mut b = self.book.lock().unwrap_or_else(PoisonError::into_inner);
        let now = self.monitor.stats();
        let bd_reads = self.monitor.device().bd_stat().bd_reads;
        let k = idx(self.schedule[i]);
        let c = Counts::between(&b.last, &now);
        b.counts[k] += c;
        b.fault[k].get_or_insert(now.fault_latency);
        b.seconds[k] += b.since.elapsed().as_secs_f64();
        b.bd_reads[k] += bd_reads - b.last_bd_reads;
        // What the region does from here on (the evictor catching up) is the next
        // segment's.
        b.last = now;
        b.last_bd_reads = bd_reads;
        let result = match self.schedule.get(i + 1) {
            None => {
                self.stop.store(true, Ordering::Relaxed);
                Ok(())
            }
            Some(&next) => {
                self.monitor
                    .set_readahead(ReadaheadConfig::new(next, self.max_order));
                self.current.store(idx(next), Ordering::Relaxed);
                // Before each new round, so that its faults read from the file the pages
                // evicted in the round before.
                if self.backing && (i + 1).is_multiple_of(SEGMENTS) {
                    write_back_all(self.monitor.device()).map(|n| b.written_back += n)
                } else {
                    Ok(())
                }
            }
        };
        self.monitor.reset_latency();
        b.since = Instant::now();
        result
    }
}

/// Runs `f`, a panic in it becoming an error (a measured worker must reach every barrier).
fn unwound<T>(f: impl FnOnce() -> anyhow::Result<T>) -> anyhow::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err(anyhow::anyhow!("a worker panicked")))
}

/// A worker's result, a panic as an error.
fn joined(h: std::thread::ScopedJoinHandle<'_, anyhow::Result<()>>) -> anyhow::Result<()> {
    h.join()
        .map_err(|_| anyhow::anyhow!("a worker panicked"))
        .and_then(|r| r)
}

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
/// With a `backing` file, the pages are written back as [`Source::WrittenBack`] says.
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
    let ra = ReadaheadConfig::new(schedule[0], s.max_order);
    let device = source::device(s.device(), backing, s.readback_readahead);
    let mut region = region(s, s.threads + noise, ra, device)?;
    let monitor = region.monitor();

    // Round 0: every page written whole, untimed; the region evicts as it goes.
    std::thread::scope(|sc| -> anyhow::Result<()> {
        let handles: Vec<_> = region
            .parts_mut()
            .into_iter()
            .enumerate()
            .map(|(i, mut part)| sc.spawn(move || fill(&mut part, i as u64)))
            .collect();
        handles.into_iter().try_for_each(joined)
    })?;

    let written_back = match backing {
        Some(_) => write_back_all(region.device())?,
        None => 0,
    };
    region.reset_latency();
    let mut parts = region.parts_mut();
    let runner = Runner {
        schedule,
        monitor: &monitor,
        max_order: s.max_order,
        backing: backing.is_some(),
        pages: parts[0].len() / PAGE,
        random: w == Workload::Random,
        work_us: s.work_us,
        book: Mutex::new(Book {
            counts: [Counts::default(); 2],
            fault: [None, None],
            seconds: [0.0; 2],
            bd_reads: [0; 2],
            written_back,
            last: monitor.stats(),
            last_bd_reads: monitor.device().bd_stat().bd_reads,
            since: Instant::now(),
        }),
        hists: Default::default(),
        noise_hists: Default::default(),
        current: AtomicUsize::new(idx(schedule[0])),
        stop: AtomicBool::new(false),
        gate: RwLock::new(()),
        barrier: Barrier::new(s.threads),
        failed: AtomicBool::new(false),
    };
    std::thread::scope(|sc| -> anyhow::Result<()> {
        let runner = &runner;
        let mut measured = Vec::new();
        let mut background = Vec::new();
        for (i, part) in parts.iter_mut().enumerate() {
            let bg = i >= s.threads;
            let h = sc.spawn(move || {
                let mut rng = SmallRng::seed_from_u64(0x5eed ^ i as u64);
                if bg {
                    runner.background(part, &mut rng)
                } else {
                    runner.measured(part, &mut rng)
                }
            });
            if bg {
                background.push(h);
            } else {
                measured.push(h);
            }
        }
        let res = measured.into_iter().map(joined).fold(Ok(()), Result::and);
        // Set by the last switch already, unless a measured worker died without one.
        runner.stop.store(true, Ordering::Relaxed);
        background.into_iter().map(joined).fold(res, Result::and)
    })?;
    drop(parts);
    let after = region.stats();
    if let Some(f) = &after.failed {
        anyhow::bail!("the region failed: {f}");
    }
    let Runner {
        book,
        hists,
        noise_hists,
        pages,
        ..
    } = runner;
    let book = book.into_inner().unwrap_or_else(PoisonError::into_inner);
    let runs = [true, false]
        .into_iter()
        .filter(|ra| schedule.contains(ra))
        .map(|ra| {
            let k = idx(ra);
            let touches = hists[k].hist.snapshot();
            let noise_touches = (noise > 0).then(|| noise_hists[k].hist.snapshot());
            Run {
                workload: w,
                source: Source::of(backing),
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
