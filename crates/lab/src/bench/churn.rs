//! `zramd bench churn`: writeback on a backing store of fixed room while the data changes.
//!
//! A device of `--pages` pages holds pages of a corpus (the Linux source tar, say) and writes
//! them all back to a backing store of fixed room: a block device (`--backing /dev/loopN`),
//! or a regular file bounded to `--room` MiB (the process's file-size limit, as a block
//! device's size bounds it). Then each round rewrites `--rewrite-percent` of the pages, at
//! random, with other pages of the corpus, marks everything idle and writes the idle slots
//! back. Rewritten pages free their old objects wherever they lie, so segments go sparse;
//! cleaning (`zram::clean`) moves the live objects out of them when an append finds the
//! store full.
//!
//! Per round: whether the writeback passed (or its errno), the pages on the file, the live
//! and used bytes of the store, the bytes moved by cleaning so far, `mem_used_total` (what
//! writeback was there to free) and the pass's time. Then the totals: failed rounds, the
//! bytes written to the store against the bytes of the slots written back (the cleaning's
//! write amplification), and the pages the room holds against the kernel's format (one 4 KiB
//! block per page). At the end every page is read back and checked.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context as _, bail};
use rand::rngs::SmallRng;
use rand::{Rng as _, SeedableRng as _};
use zram::{IdleRequest, Mode, WritebackRequest, Zram, ZramConfig};

const PAGE: usize = 4096;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The corpus file (e.g. the Linux source tar); pages are taken from it.
    #[arg(long)]
    input: PathBuf,
    /// The backing store: a block device, or a regular file (emptied) bounded by `--room`.
    #[arg(long)]
    backing: PathBuf,
    /// MiB a regular backing file may take (this process's file-size limit); 0: unbounded.
    #[arg(long, default_value_t = 64)]
    room: u64,
    /// Pages of the device.
    #[arg(long, default_value_t = 24_576)]
    pages: usize,
    /// Rounds after the first writeback.
    #[arg(long, default_value_t = 30)]
    rounds: usize,
    /// Pages rewritten per round, in percent of the device.
    #[arg(long, default_value_t = 12)]
    rewrite_percent: usize,
}

/// Runs the measurement.
pub fn run(args: &Args) -> anyhow::Result<()> {
    let corpus =
        std::fs::read(&args.input).with_context(|| format!("read {}", args.input.display()))?;
    let corpus_pages = corpus.len() / PAGE;
    if corpus_pages == 0 || args.pages == 0 {
        bail!("need a corpus of at least a page and a device of at least a page");
    }
    let block = std::fs::metadata(&args.backing)
        .map(|m| std::os::unix::fs::FileTypeExt::is_block_device(&m.file_type()))
        .unwrap_or(false);
    if !block {
        std::fs::File::create(&args.backing)
            .with_context(|| format!("create {}", args.backing.display()))?;
        if args.room > 0 {
            let mut limit = rustix::process::getrlimit(rustix::process::Resource::Fsize);
            limit.current = Some(args.room << 20);
            rustix::process::setrlimit(rustix::process::Resource::Fsize, limit)
                .context("bound the backing file (RLIMIT_FSIZE)")?;
        }
    }
    let page = |i: usize, v: usize| {
        let at = (i * 7 + v * 131) % corpus_pages;
        &corpus[at * PAGE..(at + 1) * PAGE]
    };
    let zram = Zram::new(ZramConfig {
        disksize: (args.pages * PAGE) as u64,
        backing_dev: Some(args.backing.clone()),
        auto_compact: None,
        ..ZramConfig::default()
    })?;
    let mut version = vec![0usize; args.pages];
    for i in 0..args.pages {
        zram.write((i * PAGE) as u64, page(i, 0))?;
    }
    let room = match block {
        true => std::fs::File::open(&args.backing)
            .and_then(|mut f| std::io::Seek::seek(&mut f, std::io::SeekFrom::End(0)))?,
        false => args.room << 20,
    };
    println!(
        "churn: {} pages of {} on {} ({} MiB of room), {}% rewritten per round",
        args.pages,
        args.input.display(),
        args.backing.display(),
        room >> 20,
        args.rewrite_percent
    );
    let mib = |b: u64| b as f64 / 1048576.0;
    let mut rng = SmallRng::seed_from_u64(0x1234_5678_9abc_def1);
    let (mut failed, mut slot_bytes, mut secs_total) = (0, 0u64, 0.0);
    for round in 0..=args.rounds {
        if round > 0 {
            for _ in 0..args.pages * args.rewrite_percent / 100 {
                let i = rng.gen_range(0..args.pages);
                version[i] += 1;
                zram.write((i * PAGE) as u64, page(i, version[i]))?;
            }
        }
        zram.mark_idle(IdleRequest::All);
        let t = Instant::now();
        let result = zram.writeback(&WritebackRequest::mode(Mode::Idle));
        let secs = t.elapsed().as_secs_f64();
        secs_total += secs;
        let outcome = match &result {
            Ok(r) => {
                slot_bytes += r.bytes;
                format!("ok {:>6} pages", r.pages)
            }
            Err(e) => {
                failed += 1;
                format!("errno {:<10}", e.errno())
            }
        };
        let b = zram.backing_stats().context("no backing store")?;
        println!(
            "round {round:>3}: {outcome}  on file {:>7} pages  live {:6.1} MiB  used {:6.1} MiB  moved {:7.1} MiB  mem_used {:6.1} MiB  {:5.2} s",
            zram.bd_stat().bd_count,
            mib(b.live_bytes),
            mib(b.file_bytes),
            mib(b.moved_bytes),
            mib(zram.mm_stat().mem_used_total),
            secs
        );
    }
    let b = zram.backing_stats().context("no backing store")?;
    let kernel_pages = room / PAGE as u64;
    println!(
        "failed writebacks: {failed} of {}; writeback {:.2} s per round",
        args.rounds + 1,
        secs_total / (args.rounds + 1) as f64
    );
    println!(
        "written to the store {:.1} MiB for {:.1} MiB of slots written back: {:.2}x (moved {:.1} MiB)",
        mib(b.bytes_written),
        mib(slot_bytes),
        b.bytes_written as f64 / slot_bytes.max(1) as f64,
        mib(b.moved_bytes)
    );
    println!(
        "on the file: {} pages; the kernel's format (a 4 KiB block per page) holds {} in this room: {:.2}x",
        zram.bd_stat().bd_count,
        kernel_pages,
        zram.bd_stat().bd_count as f64 / kernel_pages.max(1) as f64
    );
    let mut out = vec![0u8; PAGE];
    for (i, &v) in version.iter().enumerate() {
        zram.read((i * PAGE) as u64, &mut out)?;
        if out != page(i, v) {
            bail!("page {i} read back wrong bytes");
        }
    }
    println!("all {} pages read back right", args.pages);
    Ok(())
}
