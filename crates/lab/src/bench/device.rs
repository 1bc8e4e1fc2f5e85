//! `zramd bench --input FILE`: a file written through a device page by page, read back and
//! verified, on zramd and — when root and the kernel offers the algorithm — on a hot-added
//! kernel zram device with direct I/O and the same number of streams, side by side; with a
//! list of stream counts (`--threads 1,2,4`), each count in turn and then the scaling curve
//! as a table, one row per count.
//!
//! Memory is read twice on each side: right after the read-back (`mm_stat`), and at rest,
//! once `mem_used_total` has not changed for a while ([`settled`]). zramd's automatic
//! compaction merges what a write burst spread over class shards as the writer threads end
//! (each ending writer nudges it; they are joined before the read-back starts), or, with threads
//! that live on, a quarter second after the pool stops growing; and shortens the last
//! partly used zspages once it has stood still for that quarter second. The kernel's zram
//! compacts only when told, so its figure at rest is its figure after the read-back, read
//! again.

use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde::Serialize;
use zram::{Zram, ZramConfig};

use crate::kernel::{AlignedBuf, KernelZram, unavailable_reason};

const PAGE: usize = 4096;
/// The longest wait for rest; a side still changing then is read as it is.
const SETTLE_MAX: Duration = Duration::from_secs(5);

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The file to store (e.g. the Linux source tarball).
    #[arg(long)]
    input: Option<PathBuf>,
    /// The device's settings, as `zramd serve` takes them (its size is the input's).
    #[command(flatten)]
    device: ZramConfig,
    /// The device's allocator (seed 003): zsmalloc, afmalloc, zbud or malloc; the kernel's
    /// side is always zsmalloc.
    #[arg(long, value_enum, default_value_t = zram::Allocator::Zsmalloc)]
    allocator: zram::Allocator,
    /// Streams (threads) writing and reading at once; a comma-separated list (`1,2,4,8,16`)
    /// measures each count in turn and prints the scaling curve, one row per count.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    threads: Vec<usize>,
    /// Turn zramd's automatic compaction off (the kernel has none): what its merges after a
    /// burst cost the burst's writers, and what memory the shards hold without them.
    #[arg(long)]
    no_auto_compact: bool,
    /// Runs of each side, alternating zramd and kernel; the median speeds are reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
pub struct Run {
    write_mb_s: f64,
    read_mb_s: f64,
    mm_stat: Vec<u64>,
    /// `mem_used_total` at rest (see the module's comment), bytes.
    mem_at_rest: u64,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    zramd: &'a Run,
    kernel: Option<&'a Run>,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let Some(input) = &args.input else {
        bail!("bench needs --input FILE (or a subcommand: pool)");
    };
    if args.threads.is_empty() || args.threads.contains(&0) {
        bail!("--threads must be at least 1 (or a list of such counts: 1,2,4)");
    }
    let raw = std::fs::read(input).with_context(|| format!("read {}", input.display()))?;
    if raw.is_empty() {
        bail!("{} is empty", input.display());
    }
    let mut data = AlignedBuf::zeroed(raw.len().next_multiple_of(PAGE));
    data.bytes_mut()[..raw.len()].copy_from_slice(&raw);
    drop(raw);
    let data = data;

    let kernel_ok = match unavailable_reason(args.device.algorithm.name(), args.device.params.level)
    {
        None => true,
        Some(why) => {
            if !args.json {
                println!("kernel zram: skipped ({why})");
            }
            false
        }
    };
    let sides = if kernel_ok { 2 } else { 1 };
    let runs = args.repeat.max(1) * args.threads.len();
    let bar = crate::progress::bar("bench", runs as u64 * sides);
    let mut points = Vec::new();
    for &threads in &args.threads {
        let mut our_runs = Vec::new();
        let mut kernel_runs = Vec::new();
        for _ in 0..args.repeat.max(1) {
            crate::progress::doing(&format!("zramd, {threads} thread(s)"));
            our_runs.push(run_zramd(args, threads, data.bytes())?);
            if kernel_ok {
                crate::progress::tick(&format!("kernel zram, {threads} thread(s)"));
                kernel_runs.push(run_kernel(args, threads, data.bytes())?);
            }
            crate::progress::tick("");
        }
        points.push(Point {
            threads,
            zramd: median(our_runs),
            kernel: (!kernel_runs.is_empty()).then(|| median(kernel_runs)),
        });
    }
    drop(bar);
    if args.json {
        let json = match points.as_slice() {
            // One count: the report as it always was.
            [one] => serde_json::to_string(&Report {
                zramd: &one.zramd,
                kernel: one.kernel.as_ref(),
            })?,
            _ => serde_json::to_string(&points)?,
        };
        println!("{json}");
        return Ok(());
    }
    let mb = data.bytes().len() as f64 / 1e6;
    let counts: Vec<String> = args.threads.iter().map(usize::to_string).collect();
    println!(
        "input {} ({:.1} MB), {}, {} (chain {}), {} stream(s), median of {} runs each",
        input.display(),
        mb,
        args.device.algorithm,
        args.allocator,
        args.device.pool.chain_size,
        counts.join(","),
        args.repeat.max(1)
    );
    for p in &points {
        let label = |side: &str| {
            if points.len() > 1 {
                format!("{side} {:2}t", p.threads)
            } else {
                side.to_owned()
            }
        };
        print_run(&label("zramd "), &p.zramd);
        if let Some(k) = &p.kernel {
            print_run(&label("kernel"), k);
            println!(
                "zramd/kernel: write {:.2}x, read {:.2}x, mem_used_total {:.3}x (at rest {} against {}: {:.3}x), compr_data_size {:.3}x",
                p.zramd.write_mb_s / k.write_mb_s,
                p.zramd.read_mb_s / k.read_mb_s,
                p.zramd.mm_stat[2] as f64 / k.mm_stat[2] as f64,
                p.zramd.mem_at_rest,
                k.mem_at_rest,
                p.zramd.mem_at_rest as f64 / k.mem_at_rest as f64,
                p.zramd.mm_stat[1] as f64 / k.mm_stat[1] as f64
            );
        }
    }
    if points.len() > 1 {
        print!("{}", curve(&points));
    }
    Ok(())
}

/// One thread count's figures: the median runs of each side.
#[derive(Debug, Serialize)]
struct Point {
    threads: usize,
    zramd: Run,
    kernel: Option<Run>,
}

/// The scaling curve: one row per thread count, zramd beside the kernel.
fn curve(points: &[Point]) -> String {
    let mut out = format!(
        "{:>7} {:>10} {:>10} {:>6} {:>10} {:>10} {:>6} {:>14} {:>14} {:>7} {:>7}\n",
        "threads",
        "zramd w",
        "kernel w",
        "w x",
        "zramd r",
        "kernel r",
        "r x",
        "zramd mem_used",
        "kernel mem_used",
        "mem x",
        "rest x"
    );
    for p in points {
        let z = &p.zramd;
        let (kw, kr, km, krest) = p.kernel.as_ref().map_or((None, None, None, None), |k| {
            (
                Some(k.write_mb_s),
                Some(k.read_mb_s),
                Some(k.mm_stat[2]),
                Some(k.mem_at_rest as f64),
            )
        });
        let num = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"));
        let ratio = |ours: f64, theirs: Option<f64>| {
            theirs.map_or_else(|| "-".to_owned(), |t| format!("{:.3}x", ours / t))
        };
        out.push_str(&format!(
            "{:>7} {:>10.1} {:>10} {:>6} {:>10.1} {:>10} {:>6} {:>14} {:>14} {:>7} {:>7}\n",
            p.threads,
            z.write_mb_s,
            num(kw),
            ratio(z.write_mb_s, kw),
            z.read_mb_s,
            num(kr),
            ratio(z.read_mb_s, kr),
            z.mm_stat[2],
            km.map_or_else(|| "-".to_owned(), |m| m.to_string()),
            ratio(z.mm_stat[2] as f64, km.map(|m| m as f64)),
            ratio(z.mem_at_rest as f64, krest),
        ));
    }
    out
}

/// The median write and read speeds of several runs (the figures of the last run).
fn median(mut runs: Vec<Run>) -> Run {
    let mid = runs.len() / 2;
    let mut writes: Vec<f64> = runs.iter().map(|r| r.write_mb_s).collect();
    let mut reads: Vec<f64> = runs.iter().map(|r| r.read_mb_s).collect();
    writes.sort_by(f64::total_cmp);
    reads.sort_by(f64::total_cmp);
    let mut last = runs.pop().unwrap_or(Run {
        write_mb_s: 0.0,
        read_mb_s: 0.0,
        mm_stat: vec![0; 9],
        mem_at_rest: 0,
    });
    last.write_mb_s = writes.get(mid).copied().unwrap_or(0.0);
    last.read_mb_s = reads.get(mid).copied().unwrap_or(0.0);
    last
}

fn print_run(name: &str, r: &Run) {
    let ratio = r.mm_stat[0] as f64 / r.mm_stat[2].max(1) as f64;
    let line: Vec<String> = r.mm_stat.iter().map(|v| format!("{v:8}")).collect();
    println!(
        "{name}: write {:8.1} MB/s  read {:8.1} MB/s  ratio {:.3}  mm_stat {}",
        r.write_mb_s,
        r.read_mb_s,
        ratio,
        line.join(" ")
    );
}

/// Splits `pages` pages into `threads` contiguous ranges.
fn ranges(pages: usize, threads: usize) -> Vec<std::ops::Range<usize>> {
    let per = pages.div_ceil(threads);
    (0..threads)
        .map(|t| (t * per).min(pages)..((t + 1) * per).min(pages))
        .collect()
}

/// Runs `f(range)` on one thread per range; returns the wall time in seconds.
fn timed(
    pages: usize,
    threads: usize,
    f: impl Fn(std::ops::Range<usize>) -> anyhow::Result<()> + Sync,
) -> anyhow::Result<f64> {
    let start = Instant::now();
    std::thread::scope(|s| {
        let hs: Vec<_> = ranges(pages, threads)
            .into_iter()
            .map(|r| {
                let f = &f;
                s.spawn(move || f(r))
            })
            .collect();
        hs.into_iter().try_for_each(|h| {
            h.join()
                .map_err(|_| anyhow::anyhow!("bench thread panicked"))?
        })
    })?;
    Ok(start.elapsed().as_secs_f64())
}

fn run_zramd(args: &Args, threads: usize, data: &[u8]) -> anyhow::Result<Run> {
    let pages = data.len() / PAGE;
    let mut config = ZramConfig {
        disksize: data.len() as u64,
        ..args.device.clone()
    };
    config.pool.allocator = args.allocator;
    if args.no_auto_compact {
        config.auto_compact = None;
    }
    let dev = Zram::new(config)?;
    let write = timed(pages, threads, |r| {
        for p in r {
            dev.write((p * PAGE) as u64, &data[p * PAGE..(p + 1) * PAGE])?;
        }
        Ok(())
    })?;
    let read = timed(pages, threads, |r| {
        let mut buf = vec![0u8; PAGE];
        for p in r {
            dev.read((p * PAGE) as u64, &mut buf)?;
            if buf != data[p * PAGE..(p + 1) * PAGE] {
                bail!("zramd: page {p} read back differs");
            }
        }
        Ok(())
    })?;
    let mm = dev.mm_stat();
    let mem_at_rest = at_rest(settled(args), || Ok(dev.mm_stat().mem_used_total))?;
    Ok(Run {
        write_mb_s: data.len() as f64 / 1e6 / write,
        read_mb_s: data.len() as f64 / 1e6 / read,
        mm_stat: mm.fields().to_vec(),
        mem_at_rest,
    })
}

fn run_kernel(args: &Args, threads: usize, data: &[u8]) -> anyhow::Result<Run> {
    let pages = data.len() / PAGE;
    let dev = KernelZram::with(
        args.device.algorithm.name(),
        args.device.params.level,
        data.len() as u64,
    )?;
    let open = || {
        dev.open_direct()
            .with_context(|| format!("open {} with O_DIRECT", dev.dev_path().display()))
    };
    let write = timed(pages, threads, |r| {
        let f = open()?;
        for p in r {
            f.write_all_at(&data[p * PAGE..(p + 1) * PAGE], (p * PAGE) as u64)?;
        }
        Ok(())
    })?;
    let read = timed(pages, threads, |r| {
        let f = open()?;
        let mut buf = AlignedBuf::zeroed(PAGE);
        for p in r {
            f.read_exact_at(buf.bytes_mut(), (p * PAGE) as u64)?;
            if buf.bytes() != &data[p * PAGE..(p + 1) * PAGE] {
                bail!("kernel zram: page {p} read back differs");
            }
        }
        Ok(())
    })?;
    let mm_stat = dev.mm_stat()?;
    let mem_at_rest = at_rest(settled(args), || Ok(dev.mm_stat()?[2]))?;
    Ok(Run {
        write_mb_s: data.len() as f64 / 1e6 / write,
        read_mb_s: data.len() as f64 / 1e6 / read,
        mm_stat,
        mem_at_rest,
    })
}

/// How long `mem_used_total` must stay unchanged to count as at rest, on both sides: twice
/// what zramd's automatic compaction, as the device is set, needs to see a burst end (its
/// interval, then its look while the pool grows): 600 ms by default.
fn settled(args: &Args) -> Duration {
    let interval = args
        .device
        .auto_compact
        .map_or(Duration::ZERO, |ac| ac.interval);
    2 * (interval + zram::compact::GROWING_GAP)
}

/// `mem_used_total` once `read` has given the same figure for `settled` (or when
/// [`SETTLE_MAX`] has passed), polling every 50 ms.
fn at_rest(settled: Duration, read: impl Fn() -> anyhow::Result<u64>) -> anyhow::Result<u64> {
    let start = Instant::now();
    let mut last = read()?;
    let mut since = Instant::now();
    while since.elapsed() < settled && start.elapsed() < SETTLE_MAX {
        std::thread::sleep(Duration::from_millis(50));
        let now = read()?;
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    Ok(last)
}
