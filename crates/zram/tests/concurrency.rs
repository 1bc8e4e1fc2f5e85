//! Concurrency: four threads each own a region and write, read, discard and zero it at any
//! offset and length, checking every read against their own model, while all four also
//! write whole pages of self-identifying patterns to a shared set of pages and read them
//! back; a fifth thread compacts the pool all the while (and auto-compaction runs too).
//! Every read of a shared page must be exactly one writer's pattern — the last write to a
//! page wins whole, never a mix — and owned regions must always read back exactly.
//!
//! The same run with 64 KiB compression units (16 pages): the shared pages are a unit and a
//! half, so the shared unit and every boundary between two owners' regions are units that
//! two threads read-modify-write at once; a lost update shows as an owned read that differs
//! from its owner's model.

#[expect(
    dead_code,
    reason = "the concurrency test draws its own page patterns from xorshift"
)]
mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use common::xorshift;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use zram::compact::AutoCompact;
use zram::slot::Flags;
use zram::{Algorithm, AlgorithmParams, PAGE_SIZE, Size, Zram, ZramConfig};

const THREADS: usize = 4;
const SHARED: usize = 24;
const OWNED: usize = 96;
const PAGES: usize = SHARED + THREADS * OWNED;
const P: u64 = PAGE_SIZE as u64;

/// The tag a shared write carries: writer (1-based) in the high half, its counter below.
fn tag(thread: usize, counter: u64) -> u64 {
    ((thread as u64 + 1) << 32) | counter
}

/// The whole page a shared write of `tag` stores. The counter picks the kind, so the
/// device sees same-filled, incompressible and compressible pages; every byte depends on
/// the tag, and the tag sits in the first 8 bytes.
fn pattern(tag: u64) -> Vec<u8> {
    let mut page = Vec::with_capacity(PAGE_SIZE + 16);
    page.extend_from_slice(&tag.to_ne_bytes());
    let mut s = tag.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    match (tag & 0xFFFF_FFFF) % 3 {
        0 => page = tag.to_ne_bytes().repeat(PAGE_SIZE / 8),
        1 => {
            while page.len() < PAGE_SIZE {
                page.extend_from_slice(&xorshift(&mut s).to_ne_bytes());
            }
        }
        _ => {
            const WORDS: [&str; 4] = ["shared ", "page ", "pattern ", "wins\n"];
            while page.len() < PAGE_SIZE {
                page.extend_from_slice(WORDS[(xorshift(&mut s) % 4) as usize].as_bytes());
                page.extend_from_slice(&(xorshift(&mut s) as u8).to_ne_bytes());
            }
        }
    }
    page.truncate(PAGE_SIZE);
    page
}

/// Checks that a shared page read back is one whole pattern (or never written).
fn check_shared(page: &[u8], started: &[AtomicU64], what: &str) {
    let t = u64::from_ne_bytes(page[..8].try_into().unwrap());
    if t == 0 {
        assert!(
            page.iter().all(|&b| b == 0),
            "{what}: torn page with a zero tag"
        );
        return;
    }
    let writer = (t >> 32) as usize;
    assert!((1..=THREADS).contains(&writer), "{what}: bad tag {t:#x}");
    let counter = t & 0xFFFF_FFFF;
    assert!(
        counter < started[writer - 1].load(Ordering::Acquire),
        "{what}: tag {t:#x} was never written"
    );
    assert!(page == pattern(t), "{what}: page mixes writes (tag {t:#x})");
}

/// Bytes for an owned write.
fn owned_bytes(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    match rng.gen_range(0..4) {
        0 => vec![0; len],
        1 => vec![rng.r#gen::<u8>(); len],
        2 => {
            let mut v = vec![0u8; len];
            rng.fill(&mut v[..]);
            v
        }
        _ => (0..len)
            .map(|i| b"owned region text "[i % 18] ^ u8::from(rng.gen_range(0..50) == 0))
            .collect(),
    }
}

fn worker(zram: &Zram, me: usize, started: &[AtomicU64], iterations: usize) -> u64 {
    let mut rng = SmallRng::seed_from_u64(0xC0FFEE + me as u64);
    let base = ((SHARED + me * OWNED) * PAGE_SIZE) as u64;
    let region = OWNED * PAGE_SIZE;
    let mut model = vec![0u8; region];
    let mut shared_reads = 0;
    for it in 0..iterations {
        // One operation in the owned region.
        let off = rng.gen_range(0..region);
        let len = rng.gen_range(1..=(3 * PAGE_SIZE).min(region - off));
        let what = format!("thread {me} iteration {it}");
        match rng.gen_range(0..10) {
            0..=4 => {
                let data = owned_bytes(&mut rng, len);
                zram.write(base + off as u64, &data).expect("owned write");
                model[off..off + len].copy_from_slice(&data);
            }
            5..=7 => {
                let mut buf = vec![0xA5; len];
                zram.read(base + off as u64, &mut buf).expect("owned read");
                assert!(
                    buf == model[off..off + len],
                    "{what}: owned read at {off}+{len}"
                );
            }
            8 => {
                zram.discard(base + off as u64, len as u64)
                    .expect("discard");
                for p in off.div_ceil(PAGE_SIZE)..(off + len) / PAGE_SIZE {
                    model[p * PAGE_SIZE..(p + 1) * PAGE_SIZE].fill(0);
                }
            }
            _ => {
                zram.write_zeroes(base + off as u64, len as u64)
                    .expect("write_zeroes");
                model[off..off + len].fill(0);
            }
        }

        // One operation on the shared pages.
        let page = rng.gen_range(0..SHARED) as u64;
        match rng.gen_range(0..3) {
            0 => {
                let counter = started[me].fetch_add(1, Ordering::AcqRel);
                zram.write(page * P, &pattern(tag(me, counter)))
                    .expect("shared write");
            }
            1 => {
                let mut buf = vec![0u8; PAGE_SIZE];
                zram.read(page * P, &mut buf).expect("shared read");
                check_shared(&buf, started, &format!("{what}: shared page {page}"));
                shared_reads += 1;
            }
            _ => {
                // Several shared pages in one request: each page is whole on its own.
                let n = rng.gen_range(1..=4).min(SHARED - page as usize);
                let mut buf = vec![0u8; n * PAGE_SIZE];
                zram.read(page * P, &mut buf).expect("shared span read");
                for (i, chunk) in buf.chunks_exact(PAGE_SIZE).enumerate() {
                    let what = format!("{what}: shared page {} of a span", page as usize + i);
                    check_shared(chunk, started, &what);
                }
                shared_reads += n as u64;
            }
        }
    }
    // The region reads back exactly, in one request.
    let mut all = vec![0u8; region];
    zram.read(base, &mut all).expect("region read");
    for p in 0..OWNED {
        let r = p * PAGE_SIZE..(p + 1) * PAGE_SIZE;
        assert!(all[r.clone()] == model[r], "thread {me}: final page {p}");
    }
    shared_reads
}

/// Counts a worker out when it ends, by return or by panic.
struct Finished<'a>(&'a AtomicUsize);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[test]
fn owners_read_back_exactly_and_shared_pages_are_never_torn() {
    run(Algorithm::Lz4, PAGE_SIZE, 20000);
}

#[test]
fn with_64k_units_neighbours_sharing_a_unit_never_lose_writes() {
    run(Algorithm::Zstd, 64 * 1024, 4000);
}

/// Waits (bounded) until the background compactor is done with what the workers left: it
/// would not compact on its next look even with the pool quiet (which counts more than a
/// growing pool's look), and the pool's pages and compaction count held still over three
/// looks 25 policy intervals apart. The pool must be still for
/// `check_invariants` and for the figures to be compared with the pool's own.
fn settle(zram: &Zram, policy: AutoCompact) {
    let pool = zram.pool();
    let look = || {
        let idle = !policy.due(pool, true);
        (idle, pool.total_pages(), pool.pages_compacted())
    };
    let mut last = look();
    let mut still = 0;
    for _ in 0..400 {
        std::thread::sleep(policy.interval * 25);
        let now = look();
        still = if now.0 && now == last { still + 1 } else { 0 };
        if still == 2 {
            return;
        }
        last = now;
    }
    panic!("the background compactor never settled: {last:?}");
}

fn run(algorithm: Algorithm, unit_size: usize, iterations: usize) {
    let policy = AutoCompact {
        min_pages: 1,
        per_mille: 1,
        interval: Duration::from_millis(2),
    };
    let zram = Zram::new(ZramConfig {
        disksize: (PAGES * PAGE_SIZE) as u64,
        algorithm,
        unit_size: Size(unit_size as u64),
        params: AlgorithmParams::default(),
        auto_compact: Some(policy),
        ..ZramConfig::default()
    })
    .expect("device");
    let started: Vec<AtomicU64> = (0..THREADS).map(|_| AtomicU64::new(0)).collect();
    // Workers still running; each worker's guard counts itself out even when it panics, so
    // a failing worker cannot leave the compactor spinning.
    let running = AtomicUsize::new(THREADS);

    let (shared_reads, compactions) = std::thread::scope(|s| {
        let compactor = s.spawn(|| {
            let mut rounds = 0u64;
            let mut freed = 0;
            while running.load(Ordering::Acquire) > 0 {
                freed += zram.compact();
                // Stats and pool walks race with everything too.
                let _ = (zram.mm_stat(), zram.pool().freeable_pages());
                rounds += 1;
                std::thread::yield_now();
            }
            (rounds, freed)
        });
        let workers: Vec<_> = (0..THREADS)
            .map(|me| {
                let (zram, started, running) = (&zram, &started, &running);
                s.spawn(move || {
                    let _out = Finished(running);
                    worker(zram, me, started, iterations)
                })
            })
            .collect();
        let reads: u64 = workers.into_iter().map(|w| w.join().unwrap()).sum();
        (reads, compactor.join().unwrap())
    });

    settle(&zram, policy);
    zram.pool().check_invariants().expect("pool invariants");
    let writes: u64 = started.iter().map(|c| c.load(Ordering::Acquire)).sum();
    assert!(
        writes > 1000 && shared_reads > 1000,
        "{writes} {shared_reads}"
    );
    assert!(compactions.0 > 0);

    // The shared pages hold whole patterns; the counters match the slot table.
    let mut buf = vec![0u8; SHARED * PAGE_SIZE];
    zram.read(0, &mut buf).unwrap();
    for (i, page) in buf.chunks_exact(PAGE_SIZE).enumerate() {
        check_shared(page, &started, &format!("final shared page {i}"));
    }
    // Slots are units; a unit counts its pages.
    let per_slot = (unit_size / PAGE_SIZE) as u64;
    let (mut allocated, mut same, mut huge, mut lens) = (0, 0, 0, 0);
    for i in 0..PAGES.div_ceil(unit_size / PAGE_SIZE) {
        let e = zram.slot(i).unwrap();
        let pages = per_slot.min((PAGES as u64) - i as u64 * per_slot);
        allocated += pages * u64::from(e.is_allocated());
        same += pages * u64::from(e.flags.contains(Flags::SAME));
        huge += pages * u64::from(e.flags.contains(Flags::HUGE));
        lens += e.len as u64;
    }
    let m = zram.mm_stat();
    assert_eq!(m.orig_data_size, allocated * P, "{m:?}");
    assert_eq!((m.same_pages, m.huge_pages), (same, huge), "{m:?}");
    assert_eq!(m.compr_data_size, lens, "{m:?}");
    assert_eq!(m.mem_used_total, zram.pool().total_pages() as u64 * P);
    assert!(
        m.pages_compacted >= compactions.1 as u64,
        "{m:?} {compactions:?}"
    );
    println!(
        "{writes} shared writes, {shared_reads} shared page reads, {} compaction rounds \
         freeing {} pages (pages_compacted {})",
        compactions.0, compactions.1, m.pages_compacted
    );
}
