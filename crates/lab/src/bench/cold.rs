//! `zramd bench cold`: what the policy engine does with memory gone cold, on a corpus (a
//! file such as the Linux source tar) and on an anonymous-memory-like image made here.
//!
//! Per corpus, on one device (lz4, with zstd as the secondary algorithm and a backing file):
//! 1. store the corpus; `mem_used_total` is lz4 alone;
//! 2. `idle all`, then read a hot tenth (every tenth page) once and then `--hot-rounds`
//!    times more, timed: the hot pages' read latencies;
//! 3. let the clock pass an hour, read the hot tenth again, and run a policy round that
//!    recompresses slots idle for half an hour while the hot tenth is read in a loop on
//!    this thread: the hot latencies under a running policy, and `mem_used_total` after
//!    recompression (the round compacts after it);
//! 4. read a sample of recompressed pages: their latencies;
//! 5. `writeback idle` (then `compact`): bytes written to the file against what one 4 KiB block per page
//!    writes for the same pages (the kernel's format, with or without
//!    `compressed_writeback`), and the file's resident pages (`fincore`);
//! 6. read the written-back pages in file order, with readahead on read-back and without
//!    (the read-back cache emptied in between): their latencies.
//!
//! Latencies are of single 4 KiB `Zram::read` calls, timed one by one.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context as _, bail};
use serde::Serialize;
use zram::backing::{Backing, FileBacking, FileOptions};
use zram::slot::Flags;
use zram::{
    Algorithm, AlgorithmParams, IdleRequest, Mode, Policy, RecompAlgorithm, WritebackRequest, Zram,
    ZramConfig,
};

const PAGE: usize = 4096;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The corpus file (e.g. the Linux source tar).
    #[arg(long)]
    input: PathBuf,
    /// MiB of the anonymous-memory-like image (0: none).
    #[arg(long, default_value_t = 256)]
    anon_mib: usize,
    /// zstd level of the secondary algorithm.
    #[arg(long, default_value_t = 9)]
    level: i32,
    /// Directory for the backing file (a real disk: the page cache must be left).
    #[arg(long)]
    backing_dir: Option<PathBuf>,
    /// Timed rounds of reading the hot tenth (after one untimed round).
    #[arg(long, default_value_t = 10)]
    hot_rounds: usize,
    /// Written-back pages read back per readahead setting (0: all).
    #[arg(long, default_value_t = 50_000)]
    readback_pages: usize,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Serialize)]
struct Lat {
    n: usize,
    p50: f64,
    p90: f64,
    p99: f64,
}

impl Lat {
    fn of(mut ns: Vec<u64>) -> Self {
        ns.sort_unstable();
        let at = |q: f64| {
            ns.get(((ns.len() as f64 * q) as usize).min(ns.len().saturating_sub(1)))
                .map_or(0.0, |&v| v as f64 / 1000.0)
        };
        Self {
            n: ns.len(),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
        }
    }
}

#[derive(Debug, Serialize)]
struct Corpus {
    name: String,
    bytes: u64,
    mem_lz4: u64,
    mem_recompressed: u64,
    recompressed_slots: u64,
    hot: Lat,
    hot_under_policy: Lat,
    recompressed: Lat,
    written_back_pages: u64,
    backing_bytes: u64,
    page_per_block_bytes: u64,
    mem_after_writeback: u64,
    backing_resident_bytes: Option<u64>,
    readback_readahead: Lat,
    readback_plain: Lat,
    cache_hits: u64,
}

pub fn run(args: &Args) -> anyhow::Result<()> {
    let tar =
        std::fs::read(&args.input).with_context(|| format!("read {}", args.input.display()))?;
    if tar.is_empty() {
        bail!("{} is empty", args.input.display());
    }
    let mut corpora = vec![(args.input.display().to_string(), tar)];
    if args.anon_mib > 0 {
        corpora.push(("anonymous image".into(), anon_image(args.anon_mib << 20)));
    }
    let mut out = Vec::new();
    let bar = crate::progress::bar("cold", corpora.len() as u64);
    for (name, data) in corpora {
        crate::progress::doing(&name);
        let c = corpus(args, name, data)?;
        crate::progress::tick("");
        if !args.json {
            crate::progress::print(|| print(&c));
        }
        out.push(c);
    }
    drop(bar);
    if args.json {
        println!("{}", serde_json::to_string(&out)?);
    }
    Ok(())
}

fn print(c: &Corpus) {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!("{} ({:.1} MiB)", c.name, mib(c.bytes));
    println!(
        "  mem_used_total: lz4 {:.1} MiB, after recompressing {} idle slots with zstd {:.1} MiB ({:.3}x), after writeback {:.1} MiB",
        mib(c.mem_lz4),
        c.recompressed_slots,
        mib(c.mem_recompressed),
        c.mem_recompressed as f64 / c.mem_lz4 as f64,
        mib(c.mem_after_writeback)
    );
    println!(
        "  writeback: {} pages, {:.1} MiB to the file vs {:.1} MiB a block per page ({:.3}x); file resident after: {}",
        c.written_back_pages,
        mib(c.backing_bytes),
        mib(c.page_per_block_bytes),
        c.backing_bytes as f64 / c.page_per_block_bytes.max(1) as f64,
        c.backing_resident_bytes
            .map_or_else(|| "fincore unavailable".into(), |b| format!("{b} bytes")),
    );
    let line = |what: &str, l: &Lat| {
        println!(
            "  read {what:<34} n {:>7}  p50 {:>8.1} us  p90 {:>8.1} us  p99 {:>8.1} us",
            l.n, l.p50, l.p90, l.p99
        );
    };
    line("hot", &c.hot);
    line("hot while a policy round runs", &c.hot_under_policy);
    line("recompressed", &c.recompressed);
    line("written back, readahead", &c.readback_readahead);
    line("written back, no readahead", &c.readback_plain);
    println!(
        "  hot under policy / hot: p50 {:.3}x p99 {:.3}x; read-back p99 readahead / none: {:.3}x ({} cache hits)",
        c.hot_under_policy.p50 / c.hot.p50.max(1e-9),
        c.hot_under_policy.p99 / c.hot.p99.max(1e-9),
        c.readback_readahead.p99 / c.readback_plain.p99.max(1e-9),
        c.cache_hits
    );
}

/// Pages that look like a process's anonymous memory: zero pages, heap pages of pointers
/// and small integers, arrays of floats, text fragments and some random (already
/// compressed or encrypted) pages, in a fixed mix.
fn anon_image(len: usize) -> Vec<u8> {
    let mut s: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    };
    let mut out = vec![0u8; len / PAGE * PAGE];
    for page in out.chunks_mut(PAGE) {
        match next() % 20 {
            0..=5 => {} // zero
            6..=11 => {
                // heap: pointers near a base, lengths, flags
                let base = 0x7f00_0000_0000u64 + (next() % 4096) * 4096;
                for w in page.chunks_mut(8) {
                    let v = match next() % 4 {
                        0 => base + (next() % 65536) * 16,
                        1 => next() % 256,
                        2 => 0,
                        _ => base + 64,
                    };
                    w.copy_from_slice(&v.to_le_bytes());
                }
            }
            12..=14 => {
                let mut x = (next() % 1000) as f32;
                for w in page.chunks_mut(4) {
                    x += 0.25;
                    w.copy_from_slice(&x.to_le_bytes());
                }
            }
            15..=17 => {
                let words: [&[u8]; 6] = [
                    b"malloc ",
                    b"free ",
                    b"GET /index.html ",
                    b"200 OK ",
                    b"user_id=",
                    b"\n",
                ];
                let mut at = 0;
                while at < PAGE {
                    let w = words[(next() % 6) as usize];
                    let n = w.len().min(PAGE - at);
                    page[at..at + n].copy_from_slice(&w[..n]);
                    at += n;
                }
            }
            _ => {
                for w in page.chunks_mut(8) {
                    w.copy_from_slice(&next().to_le_bytes());
                }
            }
        }
    }
    out
}

fn read_page(dev: &Zram, p: usize, buf: &mut [u8]) -> anyhow::Result<u64> {
    let t = Instant::now();
    dev.read((p * PAGE) as u64, buf)?;
    Ok(t.elapsed().as_nanos() as u64)
}

fn corpus(args: &Args, name: String, mut data: Vec<u8>) -> anyhow::Result<Corpus> {
    data.resize(data.len().next_multiple_of(PAGE), 0);
    let pages = data.len() / PAGE;
    let dir = args.backing_dir.clone().unwrap_or_else(std::env::temp_dir);
    let file = dir.join(format!("zramd-bench-cold-{}.img", std::process::id()));
    std::fs::File::create(&file).with_context(|| format!("create {}", file.display()))?;
    let _remove = Remove(file.clone());
    let backing = Arc::new(FileBacking::open(&file, FileOptions::default())?);
    let config = ZramConfig {
        disksize: data.len() as u64,
        algorithm: Algorithm::Lz4,
        recomp_algorithm: vec![RecompAlgorithm {
            priority: 1,
            algorithm: Algorithm::Zstd,
            params: AlgorithmParams {
                level: Some(args.level),
                dictionary: None,
            },
        }],
        auto_compact: None,
        ..ZramConfig::default()
    };
    let dev = Zram::with_backing(config, Some(Arc::clone(&backing) as Arc<dyn Backing>))?;
    for (p, page) in data.chunks(PAGE).enumerate() {
        dev.write((p * PAGE) as u64, page)?;
    }
    let mem_lz4 = dev.mm_stat().mem_used_total;
    let hot_pages: Vec<usize> = (0..pages).step_by(10).collect();
    let mut buf = vec![0u8; PAGE];

    // 2. Idle all, then the hot tenth.
    dev.mark_idle(IdleRequest::All);
    let mut hot = Vec::new();
    for round in 0..=args.hot_rounds {
        for &p in &hot_pages {
            let ns = read_page(&dev, p, &mut buf)?;
            if round > 0 {
                hot.push(ns);
            }
        }
    }

    // 3. An hour later, a policy round recompresses what was not read for half an hour
    // while the hot tenth keeps being read.
    dev.skew_clock(3600);
    for &p in &hot_pages {
        dev.read((p * PAGE) as u64, &mut buf)?;
    }
    dev.set_policy(Policy {
        recompress_age: Some(1800),
        ..Policy::default()
    })?;
    let mut hot_policy = Vec::new();
    let stats = std::thread::scope(|s| -> anyhow::Result<_> {
        let round = s.spawn(|| dev.run_policy_round());
        while !round.is_finished() {
            for &p in &hot_pages {
                hot_policy.push(read_page(&dev, p, &mut buf)?);
                if round.is_finished() {
                    break;
                }
            }
        }
        round
            .join()
            .map_err(|_| anyhow::anyhow!("policy round panicked"))
    })?;
    let mem_recompressed = dev.mm_stat().mem_used_total;

    // 4. A sample of recompressed pages.
    let recompressed_pages: Vec<usize> = (0..pages)
        .filter(|&p| dev.slot(p).is_some_and(|e| e.prio == 1))
        .step_by(50)
        .collect();
    let mut recompressed = Vec::new();
    for &p in &recompressed_pages {
        recompressed.push(read_page(&dev, p, &mut buf)?);
    }

    // 5. Writeback of the idle slots.
    let r = dev.writeback(&WritebackRequest::mode(Mode::Idle))?;
    dev.compact();
    let resident = fincore(&file);
    let mem_after_writeback = dev.mm_stat().mem_used_total;

    // 6. Read-back in file order, with readahead and without.
    let mut order: Vec<(u64, usize)> = (0..pages)
        .filter_map(|p| {
            dev.slot(p)
                .filter(|e| e.flags.contains(Flags::WB))
                .map(|e| (e.handle, p))
        })
        .collect();
    order.sort_unstable();
    if args.readback_pages != 0 {
        order.truncate(args.readback_pages);
    }
    let mut readback = |on: bool| -> anyhow::Result<Vec<u64>> {
        backing.set_readahead(on);
        let mut ns = Vec::with_capacity(order.len());
        for &(_, p) in &order {
            ns.push(read_page(&dev, p, &mut buf)?);
            if buf != data[p * PAGE..(p + 1) * PAGE] {
                bail!("page {p} read back differs");
            }
        }
        Ok(ns)
    };
    let hits_before = backing.stats().cache_hits;
    let with = readback(true)?;
    let cache_hits = backing.stats().cache_hits - hits_before;
    let without = readback(false)?;

    // Everything reads back as it was written.
    for (p, page) in data.chunks(PAGE).enumerate() {
        dev.inspect((p * PAGE) as u64, &mut buf)?;
        if buf != page {
            bail!("page {p} differs after the run");
        }
    }
    Ok(Corpus {
        name,
        bytes: data.len() as u64,
        mem_lz4,
        mem_recompressed,
        recompressed_slots: stats.recompressed,
        hot: Lat::of(hot),
        hot_under_policy: Lat::of(hot_policy),
        recompressed: Lat::of(recompressed),
        written_back_pages: r.pages,
        backing_bytes: r.bytes,
        page_per_block_bytes: r.pages * PAGE as u64,
        mem_after_writeback,
        backing_resident_bytes: resident,
        readback_readahead: Lat::of(with),
        readback_plain: Lat::of(without),
        cache_hits,
    })
}

/// Resident bytes of `file` in the page cache, from util-linux's `fincore`.
fn fincore(file: &std::path::Path) -> Option<u64> {
    let out = std::process::Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(file)
        .output()
        .ok()?;
    String::from_utf8(out.stdout).ok()?.trim().parse().ok()
}

/// Removes the backing file when the bench ends, however it ends.
struct Remove(PathBuf);

impl Drop for Remove {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
