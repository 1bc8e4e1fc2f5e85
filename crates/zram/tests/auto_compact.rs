//! Automatic compaction: after many pages are written and most are discarded at random,
//! the background thread brings `freeable_pages()` below its policy's threshold by itself
//! (`pages_compacted` > 0, bounded wait); with `auto_compact: None`, or a threshold never
//! reached, the freeable pages stay until `compact()` is called. The surviving pages read
//! back exactly throughout.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use zram::compact::AutoCompact;
use zram::{Algorithm, AlgorithmParams, PAGE_SIZE, Zram, ZramConfig};

const PAGES: usize = 6000;
const P: u64 = PAGE_SIZE as u64;

const POLICY: AutoCompact = AutoCompact {
    min_pages: 16,
    per_mille: 5,
    interval: Duration::from_millis(20),
};

fn device(auto_compact: Option<AutoCompact>) -> Zram {
    Zram::new(ZramConfig {
        disksize: (PAGES * PAGE_SIZE) as u64,
        algorithm: Algorithm::Lz4,
        params: AlgorithmParams::default(),
        auto_compact,
        ..ZramConfig::default()
    })
    .expect("device")
}

/// Page `i`: a random prefix of a length picked by `i` (so objects spread over many size
/// classes), then zeroes.
fn page(i: usize) -> Vec<u8> {
    let mut rng = SmallRng::seed_from_u64(i as u64);
    let mut p = vec![0u8; PAGE_SIZE];
    let len = rng.gen_range(16..3000);
    rng.fill(&mut p[..len]);
    p
}

/// Writes every page, discards 85% of them at random (one discard per page, as a file
/// system's trims would arrive) and returns the survivors.
fn fill_and_discard(zram: &Zram) -> Vec<usize> {
    for i in 0..PAGES {
        zram.write(i as u64 * P, &page(i)).unwrap();
    }
    let mut order: Vec<usize> = (0..PAGES).collect();
    order.shuffle(&mut SmallRng::seed_from_u64(99));
    let (gone, kept) = order.split_at(PAGES * 85 / 100);
    for &i in gone {
        zram.discard(i as u64 * P, P).unwrap();
    }
    let mut kept = kept.to_vec();
    kept.sort_unstable();
    kept
}

fn above_threshold(zram: &Zram, policy: AutoCompact) -> bool {
    policy.due(zram.pool(), true)
}

fn check_survivors(zram: &Zram, kept: &[usize]) {
    let mut buf = vec![0u8; PAGE_SIZE];
    for &i in kept {
        zram.read(i as u64 * P, &mut buf).unwrap();
        assert!(buf == page(i), "page {i}");
    }
    assert_eq!(zram.mm_stat().orig_data_size, kept.len() as u64 * P);
    zram.pool().check_invariants().expect("pool invariants");
}

#[test]
fn the_background_thread_compacts_below_its_threshold() {
    let zram = device(Some(POLICY));
    let kept = fill_and_discard(&zram);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let m = zram.mm_stat();
        if !above_threshold(&zram, POLICY) && m.pages_compacted > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no automatic compaction within 10 s: freeable {} of {} pages, {m:?}",
            zram.pool().freeable_pages(),
            zram.pool().total_pages()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let m = zram.mm_stat();
    println!(
        "auto: {} pages compacted, {} freeable of {} left",
        m.pages_compacted,
        zram.pool().freeable_pages(),
        zram.pool().total_pages()
    );
    check_survivors(&zram, &kept);
}

#[test]
fn without_auto_compaction_freeable_pages_stay_until_compact() {
    check_nothing_happens_until_compact(None);
}

#[test]
fn a_threshold_never_reached_never_compacts() {
    check_nothing_happens_until_compact(Some(AutoCompact {
        min_pages: usize::MAX / 1000,
        ..POLICY
    }));
}

fn check_nothing_happens_until_compact(auto_compact: Option<AutoCompact>) {
    let zram = device(auto_compact);
    let kept = fill_and_discard(&zram);
    // The same workload leaves plenty to compact: the other test's thread has real work.
    let freeable = zram.pool().freeable_pages();
    let total = zram.pool().total_pages();
    assert!(above_threshold(&zram, POLICY), "{freeable} of {total}");
    // Ten policy intervals (and a nudge per discard) pass; nothing may move.
    std::thread::sleep(POLICY.interval * 10);
    assert_eq!(zram.pool().freeable_pages(), freeable);
    assert_eq!(zram.pool().total_pages(), total);
    assert_eq!(zram.mm_stat().pages_compacted, 0);
    check_survivors(&zram, &kept);

    let freed = zram.compact();
    assert!(freed > 0);
    assert!(!above_threshold(&zram, POLICY));
    assert_eq!(zram.mm_stat().pages_compacted, freed as u64);
    assert_eq!(zram.pool().total_pages(), total - freed);
    check_survivors(&zram, &kept);
}

const THREADS: usize = 16;

/// A device whose pool has a shard per writer thread.
fn sharded(auto_compact: Option<AutoCompact>) -> Zram {
    let mut config = ZramConfig {
        disksize: (PAGES * PAGE_SIZE) as u64,
        algorithm: Algorithm::Lz4,
        auto_compact,
        ..ZramConfig::default()
    };
    config.pool.shards = THREADS;
    Zram::new(config).expect("device")
}

/// Writes every page from [`THREADS`] threads, each pinned to its own shard and joined.
fn spread_fill(zram: &Zram) {
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn(move || {
                    zsmalloc::pin_malloc_shard(Some(t));
                    for i in (t..PAGES).step_by(THREADS) {
                        zram.write(i as u64 * P, &page(i)).unwrap();
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("writer");
        }
    });
}

/// `mem_used_total` of one thread's writes of every page, compacted; and of the spread
/// fill, on a device without automatic compaction. Asserts the spread fill costs more
/// than the slack the merge tests allow.
fn one_and_spread() -> (u64, u64) {
    let one = sharded(None);
    for i in 0..PAGES {
        one.write(i as u64 * P, &page(i)).unwrap();
    }
    one.compact();
    let one_used = one.mm_stat().mem_used_total;
    let spread = sharded(None);
    spread_fill(&spread);
    let spread_used = spread.mm_stat().mem_used_total;
    assert!(
        spread_used > one_used + SLACK,
        "the spread fill cost nothing"
    );
    (one_used, spread_used)
}

/// A page per size class in use is rounding; the spread fill holds far more.
const SLACK: u64 = 128 * P;

/// Waits, bounded by `limit`, until `zram` holds no more than one thread's writes of the
/// same pages, compacted, plus [`SLACK`]; checks every page.
fn wait_merged(zram: &Zram, (one_used, spread): (u64, u64), limit: Duration) {
    let deadline = Instant::now() + limit;
    while zram.mm_stat().mem_used_total > one_used + SLACK {
        assert!(
            Instant::now() < deadline,
            "not merged: {} bytes, one thread's {one_used}, spread {spread}",
            zram.mm_stat().mem_used_total
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "spread {spread} bytes, merged {}, one thread {one_used}",
        zram.mm_stat().mem_used_total
    );
    let all: Vec<usize> = (0..PAGES).collect();
    check_survivors(zram, &all);
}

/// Threads that each wrote into their own shards of the pool's classes leave a partly used
/// zspage per class per shard; once the writes stop, the background thread merges the
/// shards (zsmalloc's `merge.rs`) by itself, down to what one thread's writes of the same
/// pages hold once compacted (bounded wait).
#[test]
fn the_background_thread_merges_what_threads_spread() {
    let figures = one_and_spread();
    let zram = sharded(Some(POLICY));
    spread_fill(&zram);
    wait_merged(&zram, figures, Duration::from_secs(60));
}

/// Writers that end need no quiet interval: the thread merges what they spread at its next
/// look (every 50 ms while the pool grows), here with an interval of an hour, which the
/// wait (20 s) never reaches. Without the count of ended shard threads
/// (`zsmalloc::shard_thread_exits`) nothing would merge before the pool stood still for the
/// interval.
#[test]
fn what_ended_writers_spread_merges_without_waiting_an_interval() {
    let figures = one_and_spread();
    let zram = sharded(Some(AutoCompact {
        interval: Duration::from_secs(3600),
        ..POLICY
    }));
    spread_fill(&zram);
    wait_merged(&zram, figures, Duration::from_secs(20));
}
