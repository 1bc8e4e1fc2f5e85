//! `zramd bench pool`: the allocator alone.
//!
//! Object sizes follow a real zram workload: the object distribution seed 000 published for
//! an ext4-on-zram kernel untar+build with lzo-rle and 8-page zspages (its "Order 3" table of
//! `obj_used` per class). A size is drawn by class weight, then uniformly among the sizes
//! that class serves.
//!
//! Figures, for each `--allocator` (zsmalloc, afmalloc, zbud, malloc; built through
//! `zsmalloc::open` and used only through the `Backend` trait): throughput of 1 and 2
//! threads doing the same churn (free a random object, allocate and write a new one, read
//! another) and their ratio; compaction throughput after freeing half the objects at
//! random; memory overhead (`total_pages * 4096` over bytes stored, with and without
//! metadata, and after freeing half and compacting) — for chain sizes 4, 8 and 16 on
//! zsmalloc, one row for the others. Then one table comparing the allocators.

use std::sync::{Arc, Barrier};
use std::time::Instant;

use anyhow::Context as _;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use zsmalloc::{Allocator, Backend, Handle, PoolConfig};

use crate::outln;

/// (class size, obj_used) from seed 000's "Order 3" object distribution table.
const SEED_ORDER3_DISTRIBUTION: &[(usize, usize)] = &[
    (1168, 2994),
    (1184, 1609),
    (1200, 1442),
    (1216, 1510),
    (1232, 1479),
    (1248, 1451),
    (1280, 3033),
    (1296, 1571),
    (1360, 6375),
    (1376, 1796),
    (1424, 6006),
    (1440, 2101),
    (1456, 2064),
    (1488, 4159),
    (1504, 2007),
    (1536, 3900),
    (1552, 1873),
    (1568, 1958),
    (1584, 1974),
    (1632, 6187),
    (1680, 6477),
    (1696, 2253),
    (1712, 2340),
    (1744, 4696),
    (1792, 7734),
    (1808, 2649),
    (1856, 8365),
    (1888, 5862),
    (1904, 2942),
    (1920, 2997),
    (2048, 25276),
    (2080, 6052),
    (2096, 3080),
    (2176, 14830),
    (2192, 2758),
    (2224, 5077),
    (2272, 7232),
    (2336, 8423),
    (2384, 5313),
    (2448, 5443),
    (2512, 4121),
    (2560, 2205),
    (2592, 1133),
    (2720, 2712),
    (2864, 1098),
    (2912, 183),
    (2976, 166),
    (3072, 252),
    (3184, 192),
    (3264, 96),
    (3408, 208),
    (3504, 94),
    (3584, 104),
    (3632, 50),
    (4096, 33591),
];

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Objects each thread keeps live during the scaling run.
    #[arg(long, default_value_t = 20_000)]
    working_set: usize,
    /// Churn operations per thread in the scaling run.
    #[arg(long, default_value_t = 400_000)]
    ops: usize,
    /// Objects stored for the overhead and compaction figures.
    #[arg(long, default_value_t = 100_000)]
    objects: usize,
    /// Chain size for the scaling and compaction runs.
    #[arg(long, default_value_t = zsmalloc::class::DEFAULT_CHAIN_SIZE)]
    chain_size: usize,
    /// Paired 1- and 2-thread runs for the scaling figure; the median ratio is reported.
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Shards per size class (0 = one per CPU).
    #[arg(long, default_value_t = 0)]
    shards: usize,
    /// The allocators to measure, one after the other (a comma-separated list).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "zsmalloc")]
    allocator: Vec<Allocator>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

impl Args {
    /// The allocators measured, in order.
    pub fn allocators(&self) -> &[Allocator] {
        &self.allocator
    }
}

/// A pool of `allocator` with `chain_size` (zsmalloc's; the others ignore it) and `shards`.
fn open(
    allocator: Allocator,
    chain_size: usize,
    shards: usize,
) -> anyhow::Result<Arc<dyn Backend>> {
    zsmalloc::open(PoolConfig {
        allocator,
        chain_size,
        shards,
        ..PoolConfig::default()
    })
    .with_context(|| format!("open the {allocator} pool"))
}

/// Draws object sizes from the seed's distribution.
#[derive(Debug)]
struct SizeDist {
    /// (cumulative weight, lowest size, highest size) — sizes are caller bytes.
    table: Vec<(usize, usize, usize)>,
    total: usize,
}

impl SizeDist {
    fn seed() -> Self {
        let mut table = Vec::new();
        let mut total = 0;
        let mut prev = SEED_ORDER3_DISTRIBUTION[0].0 - 16;
        for &(size, used) in SEED_ORDER3_DISTRIBUTION {
            total += used;
            let (lo, hi) = if size == 4096 {
                (4096, 4096)
            } else {
                (prev + 1 - 8, size - 8)
            };
            table.push((total, lo, hi));
            prev = size;
        }
        Self { table, total }
    }

    fn sample(&self, rng: &mut SmallRng) -> usize {
        let w = rng.gen_range(0..self.total);
        let i = self.table.partition_point(|&(cum, _, _)| cum <= w);
        let (_, lo, hi) = self.table[i];
        rng.gen_range(lo..=hi)
    }
}

#[derive(Debug, Serialize)]
struct Scaling {
    chain_size: Option<usize>,
    ops_per_thread: usize,
    one_thread_ops_s: f64,
    two_threads_ops_s: f64,
    ratio: f64,
    /// Every pair's ratio, sorted.
    ratios: Vec<String>,
    /// The same churn without an allocator (plain copies): the machine's own ratio.
    ceiling_ratio: f64,
}

#[derive(Debug, Serialize)]
struct Compaction {
    chain_size: Option<usize>,
    pages_before: usize,
    pages_freed: usize,
    millis: f64,
    freed_mib_s: f64,
}

#[derive(Debug, Serialize)]
struct Overhead {
    /// zsmalloc's chain size (none for the other allocators).
    chain_size: Option<usize>,
    objects: usize,
    bytes_stored: usize,
    pages_used: usize,
    metadata_bytes: usize,
    overhead: f64,
    overhead_with_metadata: f64,
    after_churn_overhead: f64,
}

/// One allocator's figures.
#[derive(Debug, Serialize)]
struct Report {
    allocator: Allocator,
    scaling: Scaling,
    compaction: Compaction,
    overhead: Vec<Overhead>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let dist = SizeDist::seed();
    let mut reports = Vec::new();
    let mut skipped = Vec::new();
    let bar = crate::progress::bar("pool", args.allocator.len() as u64);
    for &allocator in &args.allocator {
        crate::progress::doing(allocator.name());
        // An allocator this build cannot open is reported, not fatal: the others still run.
        if let Err(e) = open(allocator, args.chain_size, args.shards) {
            crate::progress::tick("");
            if !args.json {
                outln!("{allocator}: skipped ({e:#})");
            }
            skipped.push(Skipped {
                allocator,
                reason: format!("{e:#}"),
            });
            continue;
        }
        reports.push(measure(args, allocator, &dist)?);
        crate::progress::tick("");
    }
    drop(bar);
    if args.json {
        println!(
            "{}",
            serde_json::to_string(&serde_json::json!({
                "allocators": reports,
                "skipped": skipped,
            }))?
        );
    } else {
        print!("{}", table(&reports, &skipped));
    }
    Ok(())
}

#[derive(Debug, Serialize)]
struct Skipped {
    allocator: Allocator,
    reason: String,
}

/// One allocator's figures, printed as they come unless `--json`.
fn measure(args: &Args, allocator: Allocator, dist: &SizeDist) -> anyhow::Result<Report> {
    let chain = (allocator == Allocator::Zsmalloc).then_some(args.chain_size);
    let chain_label = chain.map_or_else(String::new, |c| format!(" chain {c}"));
    let scaling = scaling(args, allocator, dist)?;
    if !args.json {
        outln!(
            "{allocator}: scaling ({}{chain_label}, {} ops/thread, working set {}, median of {} pairs): 1 thread {:.0} ops/s, 2 threads {:.0} ops/s, ratio {:.2}x (all: {}; plain copies without an allocator: {:.2}x)",
            allocator,
            scaling.ops_per_thread,
            args.working_set,
            scaling.ratios.len(),
            scaling.one_thread_ops_s,
            scaling.two_threads_ops_s,
            scaling.ratio,
            scaling.ratios.join(" "),
            scaling.ceiling_ratio
        );
    }
    let compaction = compaction(args, allocator, dist)?;
    if !args.json {
        outln!(
            "{allocator}: compaction{chain_label}: {} of {} pages freed in {:.1} ms, {:.0} MiB/s freed",
            compaction.pages_freed,
            compaction.pages_before,
            compaction.millis,
            compaction.freed_mib_s
        );
    }
    let chains: Vec<Option<usize>> = match chain {
        Some(_) => vec![Some(4), Some(8), Some(16)],
        None => vec![None],
    };
    let mut overhead = Vec::new();
    for chain in chains {
        let o = overhead_for(allocator, chain, args.objects, dist)?;
        if !args.json {
            outln!(
                "{allocator}: overhead{}: {} objects, {:.1} MiB stored in {} pages: {:.4}x ({:.4}x with {} KiB metadata); after freeing half and compacting: {:.4}x",
                o.chain_size
                    .map_or_else(String::new, |c| format!(" (chain {c:2})")),
                o.objects,
                o.bytes_stored as f64 / 1048576.0,
                o.pages_used,
                o.overhead,
                o.overhead_with_metadata,
                o.metadata_bytes / 1024,
                o.after_churn_overhead
            );
        }
        overhead.push(o);
    }
    Ok(Report {
        allocator,
        scaling,
        compaction,
        overhead,
    })
}

/// The allocators side by side: one line per allocator and chain size, then one per
/// allocator skipped.
fn table(reports: &[Report], skipped: &[Skipped]) -> String {
    let mut out = format!(
        "{:10} {:>5} {:>12} {:>12} {:>6} {:>12} {:>10} {:>9} {:>9} {:>9}\n",
        "allocator",
        "chain",
        "1 thr ops/s",
        "2 thr ops/s",
        "2/1",
        "compact MiB/s",
        "freed",
        "overhead",
        "+meta",
        "churned"
    );
    for r in reports {
        for o in &r.overhead {
            let chain = o
                .chain_size
                .map_or_else(|| "-".to_owned(), |c| c.to_string());
            // Throughput and compaction ran at one chain size: shown on its row.
            let timed = o.chain_size == r.scaling.chain_size;
            let (one, two, ratio, mib, freed) = if timed {
                (
                    format!("{:.0}", r.scaling.one_thread_ops_s),
                    format!("{:.0}", r.scaling.two_threads_ops_s),
                    format!("{:.2}x", r.scaling.ratio),
                    format!("{:.0}", r.compaction.freed_mib_s),
                    format!("{}/{}", r.compaction.pages_freed, r.compaction.pages_before),
                )
            } else {
                let dash = || "".to_owned();
                (dash(), dash(), dash(), dash(), dash())
            };
            out.push_str(&format!(
                "{:10} {chain:>5} {one:>12} {two:>12} {ratio:>6} {mib:>12} {freed:>10} {:>8.4}x {:>8.4}x {:>8.4}x\n",
                r.allocator.name(),
                o.overhead,
                o.overhead_with_metadata,
                o.after_churn_overhead
            ));
        }
    }
    for s in skipped {
        out.push_str(&format!(
            "{:10} skipped: {}\n",
            s.allocator.name(),
            s.reason
        ));
    }
    out
}

fn fill(
    pool: &dyn Backend,
    dist: &SizeDist,
    n: usize,
    rng: &mut SmallRng,
) -> anyhow::Result<Vec<(Handle, usize)>> {
    let data = payload();
    (0..n)
        .map(|_| {
            let size = dist.sample(rng);
            let h = pool.malloc(size)?;
            pool.write(h, &data[..size])?;
            Ok((h, size))
        })
        .collect()
}

fn payload() -> Vec<u8> {
    (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}

/// One thread's churn: fill a working set, wait at the barrier, churn, wait again, free.
fn churn(
    pool: &dyn Backend,
    dist: &SizeDist,
    args: &Args,
    seed: u64,
    barrier: &Barrier,
) -> anyhow::Result<()> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let filled = fill(pool, dist, args.working_set, &mut rng);
    barrier.wait();
    let mut live = filled?;
    let data = payload();
    let mut buf = vec![0u8; 4096];
    let mut result = Ok(());
    for _ in 0..args.ops {
        let i = rng.gen_range(0..live.len());
        if let Err(e) = pool.free(live[i].0) {
            result = Err(e.into());
            break;
        }
        let size = dist.sample(&mut rng);
        let stored = pool
            .malloc(size)
            .and_then(|h| pool.write(h, &data[..size]).map(|()| h));
        match stored {
            Ok(h) => live[i] = (h, size),
            Err(e) => {
                result = Err(e.into());
                break;
            }
        }
        let (h, size) = live[rng.gen_range(0..live.len())];
        if let Err(e) = pool.read(h, &mut buf[..size]) {
            result = Err(e.into());
            break;
        }
    }
    barrier.wait();
    for (h, _) in live {
        pool.free(h)?;
    }
    result
}

/// Operations per second of `threads` threads churning one pool (timed between barriers,
/// so filling and emptying the working sets are not counted).
fn throughput(
    args: &Args,
    allocator: Allocator,
    dist: &SizeDist,
    threads: usize,
) -> anyhow::Result<f64> {
    let pool = open(allocator, args.chain_size, args.shards)?;
    let barrier = Barrier::new(threads + 1);
    let secs = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (pool, barrier) = (&*pool, &barrier);
                s.spawn(move || churn(pool, dist, args, 42 + t as u64, barrier))
            })
            .collect();
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        let secs = start.elapsed().as_secs_f64();
        for h in handles {
            h.join()
                .map_err(|_| anyhow::anyhow!("bench thread panicked"))??;
        }
        anyhow::Ok(secs)
    })?;
    Ok((threads * args.ops) as f64 / secs)
}

/// The same churn with no allocator: each thread copies the same sizes in and out of its
/// own preallocated slots. Its 2/1-thread ratio is what this machine's memory allows.
fn ceiling_throughput(args: &Args, dist: &SizeDist, threads: usize) -> f64 {
    let barrier = Barrier::new(threads + 1);
    let run = |seed: u64| {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut slots = vec![1u8; args.working_set * 4096];
        let data = payload();
        let mut buf = vec![0u8; 4096];
        let mut sizes: Vec<usize> = (0..args.working_set)
            .map(|_| dist.sample(&mut rng))
            .collect();
        barrier.wait();
        for _ in 0..args.ops {
            let i = rng.gen_range(0..sizes.len());
            let size = dist.sample(&mut rng);
            slots[i * 4096..i * 4096 + size].copy_from_slice(&data[..size]);
            sizes[i] = size;
            let j = rng.gen_range(0..sizes.len());
            buf[..sizes[j]].copy_from_slice(&slots[j * 4096..j * 4096 + sizes[j]]);
        }
        barrier.wait();
        std::hint::black_box(&buf);
    };
    std::thread::scope(|s| {
        for t in 0..threads {
            let run = &run;
            s.spawn(move || run(42 + t as u64));
        }
        barrier.wait();
        let start = Instant::now();
        barrier.wait();
        (threads * args.ops) as f64 / start.elapsed().as_secs_f64()
    })
}

fn scaling(args: &Args, allocator: Allocator, dist: &SizeDist) -> anyhow::Result<Scaling> {
    // Pairs of runs, each 1-thread run next to its 2-thread run, so that drift in what else
    // the machine does hits both; the pair with the median ratio is reported.
    let mut pairs = Vec::new();
    for _ in 0..args.repeat.max(1) {
        let one = throughput(args, allocator, dist, 1)?;
        let two = throughput(args, allocator, dist, 2)?;
        let ceiling = ceiling_throughput(args, dist, 2) / ceiling_throughput(args, dist, 1);
        pairs.push((two / one, one, two, ceiling));
    }
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let ratios: Vec<String> = pairs.iter().map(|p| format!("{:.2}", p.0)).collect();
    let mut ceilings: Vec<f64> = pairs.iter().map(|p| p.3).collect();
    ceilings.sort_by(f64::total_cmp);
    let (ratio, one, two, _) = pairs[pairs.len() / 2];
    Ok(Scaling {
        chain_size: (allocator == Allocator::Zsmalloc).then_some(args.chain_size),
        ops_per_thread: args.ops,
        one_thread_ops_s: one,
        two_threads_ops_s: two,
        ratio,
        ratios,
        ceiling_ratio: ceilings[ceilings.len() / 2],
    })
}

fn compaction(args: &Args, allocator: Allocator, dist: &SizeDist) -> anyhow::Result<Compaction> {
    let pool = open(allocator, args.chain_size, 0)?;
    let mut rng = SmallRng::seed_from_u64(7);
    let live = fill(&*pool, dist, args.objects, &mut rng)?;
    for &(h, _) in live.iter().filter(|_| rng.gen_bool(0.5)) {
        pool.free(h)?;
    }
    let pages_before = pool.total_pages();
    let start = Instant::now();
    let pages_freed = pool.compact();
    let secs = start.elapsed().as_secs_f64();
    pool.check_invariants()
        .map_err(anyhow::Error::msg)
        .context("pool invariants after compaction")?;
    Ok(Compaction {
        chain_size: (allocator == Allocator::Zsmalloc).then_some(args.chain_size),
        pages_before,
        pages_freed,
        millis: secs * 1000.0,
        freed_mib_s: pages_freed as f64 * 4096.0 / 1048576.0 / secs,
    })
}

fn overhead_for(
    allocator: Allocator,
    chain_size: Option<usize>,
    objects: usize,
    dist: &SizeDist,
) -> anyhow::Result<Overhead> {
    let chain = chain_size.unwrap_or(zsmalloc::class::DEFAULT_CHAIN_SIZE);
    let pool = open(allocator, chain, 0)?;
    let mut rng = SmallRng::seed_from_u64(99);
    let live = fill(&*pool, dist, objects, &mut rng)?;
    let bytes_stored: usize = live.iter().map(|&(_, s)| s).sum();
    let pages_used = pool.total_pages();
    let metadata_bytes = pool.metadata_bytes();
    let mut kept = 0;
    for &(h, size) in &live {
        if rng.gen_bool(0.5) {
            pool.free(h)?;
        } else {
            kept += size;
        }
    }
    pool.compact();
    Ok(Overhead {
        chain_size,
        objects,
        bytes_stored,
        pages_used,
        metadata_bytes,
        overhead: (pages_used * 4096) as f64 / bytes_stored as f64,
        overhead_with_metadata: (pages_used * 4096 + metadata_bytes) as f64 / bytes_stored as f64,
        after_churn_overhead: (pool.total_pages() * 4096) as f64 / kept as f64,
    })
}
