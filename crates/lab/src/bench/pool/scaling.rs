//! The pool bench's scaling run: the same churn (free a random object, allocate and write a
//! new one, read another) by each thread count asked for, beside the same churn without an
//! allocator (plain copies into preallocated slots), which is what the machine itself
//! allows.

use std::sync::Barrier;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use zsmalloc::{Allocator, Backend};

use super::dist::{SizeDist, fill, open, payload};

/// What the scaling run is asked to do.
#[derive(Debug, Clone)]
pub struct Params {
    /// Objects each thread keeps live.
    pub working_set: usize,
    /// Churn operations per thread.
    pub ops: usize,
    /// zsmalloc's chain size and shards per class (0: the default, 16).
    pub chain_size: usize,
    pub shards: usize,
    /// Rounds over every thread count; medians are reported.
    pub repeat: usize,
    /// The thread counts, in order; ratios are to the first.
    pub threads: Vec<usize>,
}

/// The scaling figures: the 1-against-2-thread pair (when both counts were asked for, as by
/// default) and the whole curve.
#[derive(Debug, Serialize)]
pub struct Scaling {
    pub chain_size: Option<usize>,
    pub ops_per_thread: usize,
    /// Ops/s of 1 and 2 threads and their ratio (0 when a count was not asked for).
    pub one_thread_ops_s: f64,
    pub two_threads_ops_s: f64,
    pub ratio: f64,
    /// Every round's 2/1 ratio, sorted.
    pub ratios: Vec<String>,
    /// The same churn without an allocator (plain copies): the machine's own 2/1 ratio.
    pub ceiling_ratio: f64,
    /// One point per thread count asked for.
    pub curve: Vec<Point>,
}

/// One thread count's figures (medians over the rounds).
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub threads: usize,
    pub ops_s: f64,
    /// Ops/s over the first count's, in the same round.
    pub ratio: f64,
    /// Every round's ratio, sorted.
    pub ratios: Vec<String>,
    /// Plain copies' ratio at this count.
    pub ceiling_ratio: f64,
    /// Plain copies' ops/s at this count.
    pub ceiling_ops_s: f64,
}

/// Runs the churn at every thread count, `repeat` rounds (each round every count once, in
/// order, so drift in what else the machine does hits them alike).
pub fn scaling(args: &Params, allocator: Allocator, dist: &SizeDist) -> anyhow::Result<Scaling> {
    let rounds = args.repeat.max(1);
    // Per count: (ratio, ops/s, plain copies' ratio, their ops/s) of every round.
    let mut figures: Vec<Vec<(f64, f64, f64, f64)>> = vec![Vec::new(); args.threads.len()];
    for _ in 0..rounds {
        let mut first = None;
        for (i, &threads) in args.threads.iter().enumerate() {
            let ops = throughput(args, allocator, dist, threads)?;
            let ceiling = ceiling_throughput(args, dist, threads);
            let (ops0, ceiling0) = *first.get_or_insert((ops, ceiling));
            figures[i].push((ops / ops0, ops, ceiling / ceiling0, ceiling));
        }
    }
    let curve: Vec<Point> = args
        .threads
        .iter()
        .zip(figures)
        .map(|(&threads, mut rounds)| {
            // By ratio (the first count's are all 1: then by ops/s, for its median).
            rounds.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
            let ratios = rounds.iter().map(|r| format!("{:.2}", r.0)).collect();
            let (ratio, ops_s, _, _) = rounds[rounds.len() / 2];
            let mut ceilings = rounds.clone();
            ceilings.sort_by(|a, b| a.2.total_cmp(&b.2));
            let (_, _, ceiling_ratio, ceiling_ops_s) = ceilings[ceilings.len() / 2];
            Point {
                threads,
                ops_s,
                ratio,
                ratios,
                ceiling_ratio,
                ceiling_ops_s,
            }
        })
        .collect();
    let at = |t: usize| curve.iter().find(|p| p.threads == t);
    let (one, two) = match (at(1), at(2)) {
        (Some(_), Some(two)) if args.threads.first() == Some(&1) => {
            // The 1-thread figure of the round whose 2/1 ratio is the median.
            let one = Point {
                threads: 1,
                ops_s: two.ops_s / two.ratio,
                ratio: 1.0,
                ratios: Vec::new(),
                ceiling_ratio: 1.0,
                ceiling_ops_s: 0.0,
            };
            (one, two.clone())
        }
        _ => {
            let none = Point {
                threads: 0,
                ops_s: 0.0,
                ratio: 0.0,
                ratios: Vec::new(),
                ceiling_ratio: 0.0,
                ceiling_ops_s: 0.0,
            };
            (none.clone(), none)
        }
    };
    Ok(Scaling {
        chain_size: (allocator == Allocator::Zsmalloc).then_some(args.chain_size),
        ops_per_thread: args.ops,
        one_thread_ops_s: one.ops_s,
        two_threads_ops_s: two.ops_s,
        ratio: two.ratio,
        ratios: two.ratios,
        ceiling_ratio: two.ceiling_ratio,
        curve,
    })
}

/// The curve as a table: one row per thread count.
pub fn curve_table(s: &Scaling) -> String {
    let mut out = format!(
        "{:>7} {:>12} {:>8} {:>14} {:>8} {:>10}\n",
        "threads", "ops/s", "x first", "plain ops/s", "plain x", "of plain"
    );
    for p in &s.curve {
        out.push_str(&format!(
            "{:>7} {:>12.0} {:>7.2}x {:>14.0} {:>7.2}x {:>9.2}x\n",
            p.threads,
            p.ops_s,
            p.ratio,
            p.ceiling_ops_s,
            p.ceiling_ratio,
            p.ops_s / p.ceiling_ops_s
        ));
    }
    out
}

/// One thread's churn: fill a working set, wait at the barrier, churn, wait again, free.
fn churn(
    pool: &dyn Backend,
    dist: &SizeDist,
    args: &Params,
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
    args: &Params,
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
fn ceiling_throughput(args: &Params, dist: &SizeDist, threads: usize) -> f64 {
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
