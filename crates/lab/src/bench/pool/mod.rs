//! `zramd bench pool`: the allocator alone.
//!
//! Object sizes follow a real zram workload: the object distribution seed 000 published for
//! an ext4-on-zram kernel untar+build with lzo-rle and 8-page zspages (its "Order 3" table of
//! `obj_used` per class). A size is drawn by class weight, then uniformly among the sizes
//! that class serves.
//!
//! Figures, for each `--allocator` (zsmalloc, afmalloc, zbud, malloc; built through
//! `zsmalloc::open` and used only through the `Backend` trait): throughput of each
//! `--threads` count (1 and 2 by default) doing the same churn (free a random object,
//! allocate and write a new one, read another) and their ratios to the first (`scaling`);
//! compaction throughput after freeing half the objects at
//! random; memory overhead (`total_pages * 4096` over bytes stored, with and without
//! metadata, and after freeing half and compacting) — for chain sizes 4, 8 and 16 on
//! zsmalloc, one row for the others. Then one table comparing the allocators.

mod dist;
mod scaling;

use std::time::Instant;

use anyhow::Context as _;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use zsmalloc::Allocator;

use self::dist::{SizeDist, fill, open};
use self::scaling::{Params, Scaling, curve_table, scaling};
use crate::outln;

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
    /// Rounds of the scaling run (each round runs every thread count once); the median
    /// ratios are reported.
    #[arg(long, default_value_t = 5)]
    repeat: usize,
    /// Thread counts of the scaling run, a comma-separated list (`1,2,4,8,16`); ratios are
    /// to the first count's throughput.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    threads: Vec<usize>,
    /// Shards per size class (0 = the default: zsmalloc 16, made as threads use them;
    /// afmalloc and malloc one per CPU).
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

    /// The scaling run's thread counts, in order.
    pub fn thread_counts(&self) -> &[usize] {
        &self.threads
    }

    /// The scaling run's parameters.
    fn params(&self) -> Params {
        Params {
            working_set: self.working_set,
            ops: self.ops,
            chain_size: self.chain_size,
            shards: self.shards,
            repeat: self.repeat,
            threads: self.threads.clone(),
        }
    }
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
    if args.threads.is_empty() || args.threads.contains(&0) {
        anyhow::bail!("--threads must be at least 1 (or a list of such counts: 1,2,4)");
    }
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
    let scaling = scaling(&args.params(), allocator, dist)?;
    if !args.json && scaling.one_thread_ops_s > 0.0 {
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
    if !args.json && args.threads != [1, 2] {
        outln!(
            "{allocator}: scaling curve ({}{chain_label}, {} ops/thread, working set {}, median of {} rounds):\n{}",
            allocator,
            scaling.ops_per_thread,
            args.working_set,
            args.repeat.max(1),
            curve_table(&scaling).trim_end()
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
