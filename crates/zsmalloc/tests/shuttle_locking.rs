//! Model-checks the locking protocol with `shuttle`: malloc, write, read and free racing with
//! compaction on a small pool, and folding racing with `free_shared`, `share`,
//! `malloc_dedup`, compaction and readers, under many thread interleavings. Every read must
//! return what its thread wrote and the pool's identities must hold at the end.
//!
//! Built only with `--cfg shuttle` (the crate's `sync` shim then uses shuttle's locks):
//! `RUSTFLAGS="--cfg shuttle" cargo test -p zsmalloc --release --test shuttle_locking`.
#![cfg(shuttle)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use shuttle::thread;
use zsmalloc::{Handle, Pool, PoolConfig};

/// With chain 4, 2700-byte objects (2708 without the header) live in class 168 (2720 bytes):
/// 3 objects per 2 pages, so a handful of objects spread over several zspages, compaction has
/// work to do, and a zspage left with one object can be shortened to one page.
const BIG: usize = 2700;
const SMALL: usize = 40;

/// Explored schedules in which compaction freed pages, i.e. moved an object while the other
/// threads were using the pool (plain std atomics: outside the model, only counted).
static COMPACTED: AtomicUsize = AtomicUsize::new(0);
static RUNS: AtomicUsize = AtomicUsize::new(0);

fn fill(h: Handle, tag: u8, len: usize) -> Vec<u8> {
    let seed = h.to_raw() as u8 ^ tag;
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

fn check(pool: &Pool, h: Handle, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    pool.read(h, &mut got).unwrap();
    assert!(got == want, "handle {h}: read back different bytes");
}

/// In the seed kernel's layout: the handle in every object.
fn scenario() {
    scenario_with(PoolConfig::seed(4));
}

/// In the zram device's layout (the default): objects without the handle header, so 8 bytes
/// more of caller data land in the same class.
fn scenario_device() {
    scenario_with(PoolConfig {
        chain_size: 4,
        ..PoolConfig::default()
    });
}

fn scenario_with(config: PoolConfig) {
    let big = BIG + 8 - config.header.bytes();
    let pool = Arc::new(
        Pool::with_config(PoolConfig {
            populate: false,
            shards: 1,
            ..config
        })
        .unwrap(),
    );
    let class = pool.lookup_class(big).unwrap();
    assert_eq!((class.pages_per_zspage, class.objs_per_zspage), (2, 3));

    // Nine objects in three zspages; free four so that two zspages hold one object each:
    // compaction can then move one object and free a zspage.
    let mut objs: Vec<(Handle, Vec<u8>)> = (0..9)
        .map(|_| {
            let h = pool.malloc(big).unwrap();
            let data = fill(h, 0, big);
            pool.write(h, &data).unwrap();
            (h, data)
        })
        .collect();
    for i in [4, 3, 1, 0] {
        let (h, _) = objs.remove(i);
        pool.free(h).unwrap();
    }
    assert!(pool.freeable_pages() > 0);
    pool.check_invariants().unwrap();
    // objs: [a, b, c, d, e]; thread 1 owns a and b, thread 2 owns e, c and d are shared.
    let [a, b, c, d, e]: [(Handle, Vec<u8>); 5] = objs.try_into().unwrap();
    let shared = Arc::new([c, d]);

    let compactor = {
        let pool = Arc::clone(&pool);
        thread::spawn(move || {
            let freed = pool.compact();
            pool.compact() + freed
        })
    };
    let t1 = {
        let pool = Arc::clone(&pool);
        let shared = Arc::clone(&shared);
        thread::spawn(move || {
            check(&pool, a.0, &a.1);
            let a2 = fill(a.0, 1, big);
            pool.write(a.0, &a2).unwrap();
            check(&pool, shared[0].0, &shared[0].1);
            let h = pool.malloc(big).unwrap();
            let data = fill(h, 2, big);
            pool.write(h, &data).unwrap();
            check(&pool, a.0, &a2);
            check(&pool, b.0, &b.1);
            check(&pool, h, &data);
            pool.free(h).unwrap();
            vec![(a.0, a2), b]
        })
    };
    let t2 = {
        let pool = Arc::clone(&pool);
        let shared = Arc::clone(&shared);
        thread::spawn(move || {
            check(&pool, e.0, &e.1);
            pool.free(e.0).unwrap();
            let h = pool.malloc(SMALL).unwrap();
            let data = fill(h, 3, SMALL);
            pool.write(h, &data).unwrap();
            check(&pool, shared[1].0, &shared[1].1);
            assert!(
                pool.with_object(shared[0].0, big, |bytes| bytes == &shared[0].1[..])
                    .unwrap()
            );
            check(&pool, h, &data);
            assert!(pool.free(e.0).is_err(), "double free accepted");
            vec![(h, data)]
        })
    };

    let freed = compactor.join().unwrap();
    RUNS.fetch_add(1, Ordering::Relaxed);
    if freed > 0 {
        COMPACTED.fetch_add(1, Ordering::Relaxed);
    }
    let mut live = t1.join().unwrap();
    live.extend(t2.join().unwrap());
    live.extend(shared.iter().cloned());

    pool.check_invariants().unwrap();
    assert_eq!(pool.stats().obj_used, live.len());
    assert_eq!(pool.stats().pages_compacted, freed as u64);
    for (h, data) in &live {
        check(&pool, *h, data);
    }
    pool.compact();
    assert_eq!(pool.freeable_pages(), 0);
    for (h, data) in live {
        check(&pool, h, &data);
        pool.free(h).unwrap();
    }
    pool.check_invariants().unwrap();
    assert_eq!(pool.total_pages(), 0);
}

/// Both strategies, and both layouts, in one test, so that the counters see only this
/// scenario.
#[test]
fn malloc_write_read_free_race_compaction() {
    shuttle::check_random(scenario, 20_000);
    shuttle::check_pct(scenario, 20_000, 3);
    shuttle::check_random(scenario_device, 10_000);
    let (runs, compacted) = (
        RUNS.load(Ordering::Relaxed),
        COMPACTED.load(Ordering::Relaxed),
    );
    println!("{runs} schedules, compaction moved objects in {compacted}");
    assert_eq!(runs, 50_000);
    assert!(compacted > 0, "compaction never had work to do");
}

/// Many small operations per thread on one class: malloc/free churn racing with compaction
/// (in the default layout, the device's; the layout does not touch the locking).
#[test]
fn churn_random_schedules() {
    shuttle::check_random(
        || {
            let pool = Arc::new(
                Pool::with_config(PoolConfig {
                    chain_size: 1,
                    populate: false,
                    shards: 1,
                    ..PoolConfig::default()
                })
                .unwrap(),
            );
            // 1500-byte objects: 2 per one-page zspage with chain 1.
            let threads: Vec<_> = (0..2u8)
                .map(|t| {
                    let pool = Arc::clone(&pool);
                    thread::spawn(move || {
                        let mut mine = Vec::new();
                        for i in 0..4u8 {
                            let h = pool.malloc(1500).unwrap();
                            let data = fill(h, t * 16 + i, 1500);
                            pool.write(h, &data).unwrap();
                            mine.push((h, data));
                        }
                        for (h, _) in mine.drain(..2) {
                            pool.free(h).unwrap();
                        }
                        pool.compact();
                        for (h, data) in &mine {
                            check(&pool, *h, data);
                        }
                        mine
                    })
                })
                .collect();
            let live: Vec<_> = threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect();
            pool.check_invariants().unwrap();
            for (h, data) in live {
                check(&pool, h, &data);
                pool.free(h).unwrap();
            }
            assert_eq!(pool.total_pages(), 0);
        },
        20_000,
    );
}

/// Schedules of the folding scenario, and those in which the racing `fold` folded.
static FOLD_RUNS: AtomicUsize = AtomicUsize::new(0);
static FOLDED: AtomicUsize = AtomicUsize::new(0);

/// Content `tag` of `len` bytes, the same for every object that holds it.
fn content(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| tag.wrapping_mul(41) ^ i as u8).collect()
}

/// Folding while handles are freed, shared and deduplicated, objects compacted and read.
fn fold_scenario_with(config: PoolConfig) {
    let big = BIG + 8 - config.header.bytes();
    let pool = Arc::new(
        Pool::with_config(PoolConfig {
            populate: false,
            shards: 1,
            ..config
        })
        .unwrap(),
    );
    let (a, b) = (content(1, big), content(2, big));
    // Contents A B A B A B: two zspages of three objects; B's second copy goes, so
    // compaction has a hole to fill; one B handle is shared.
    let hs: Vec<Handle> = [&a, &b, &a, &b, &a, &b]
        .iter()
        .map(|data| {
            let h = pool.malloc(big).unwrap();
            pool.write(h, data).unwrap();
            h
        })
        .collect();
    let [a0, b0, a1, b1, a2, b2]: [Handle; 6] = hs.try_into().unwrap();
    pool.free(b1).unwrap();
    let b3 = pool.share(b0).unwrap();
    pool.check_invariants().unwrap();

    let folder = {
        let pool = Arc::clone(&pool);
        thread::spawn(move || pool.fold())
    };
    let compactor = {
        let pool = Arc::clone(&pool);
        thread::spawn(move || pool.compact())
    };
    let freer = {
        let pool = Arc::clone(&pool);
        let a = a.clone();
        thread::spawn(move || {
            // Other handles name B's object and (folded or not) A's copies stay.
            assert!(!pool.free_shared(b3).unwrap());
            pool.free_shared(a1).unwrap();
            assert!(pool.free_shared(a1).is_err(), "double free accepted");
            // A copy of A that the racing fold may be folding right now.
            let a4 = pool.share(a2).unwrap();
            let (a3, _) = pool.malloc_dedup(&a).unwrap();
            check(&pool, a3, &a);
            vec![a4, a3]
        })
    };
    let reader = {
        let pool = Arc::clone(&pool);
        let (a, b) = (a.clone(), b.clone());
        thread::spawn(move || {
            check(&pool, a0, &a);
            check(&pool, b0, &b);
            assert!(pool.with_object(a2, big, |bytes| bytes == &a[..]).unwrap());
            check(&pool, b2, &b);
        })
    };

    let report = folder.join().unwrap();
    compactor.join().unwrap();
    reader.join().unwrap();
    let mut live = vec![(a0, &a), (a2, &a), (b0, &b), (b2, &b)];
    let [a4, a3]: [Handle; 2] = freer.join().unwrap().try_into().unwrap();
    live.extend([(a4, &a), (a3, &a)]);
    FOLD_RUNS.fetch_add(1, Ordering::Relaxed);
    if report.objects_folded > 0 {
        FOLDED.fetch_add(1, Ordering::Relaxed);
    }
    assert_eq!(pool.pages_folded(), report.pages_freed);

    pool.check_invariants().unwrap();
    for &(h, data) in &live {
        check(&pool, h, data);
    }
    // Once more without racing: one object per content is left, but where two objects
    // of a content were both shared already (anchors are never folded into each other).
    pool.fold();
    pool.check_invariants().unwrap();
    for content in [&a, &b] {
        let of: Vec<Handle> = live
            .iter()
            .filter(|(_, d)| *d == content)
            .map(|&(h, _)| h)
            .collect();
        let mut ids: Vec<u64> = of.iter().map(|&h| pool.object_id(h).unwrap()).collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.len() > 1 {
            for &h in &of {
                assert!(
                    pool.write(h, content).is_err(),
                    "an unshared duplicate was left"
                );
            }
        }
    }
    assert!((2..=3).contains(&pool.stats().obj_used));
    for &(h, data) in &live {
        check(&pool, h, data);
    }
    for (h, _) in live {
        pool.free_shared(h).unwrap();
    }
    pool.check_invariants().unwrap();
    assert_eq!(pool.total_pages(), 0);
}

#[test]
fn fold_races_free_share_dedup_compaction_and_readers() {
    shuttle::check_random(|| fold_scenario_with(PoolConfig::seed(4)), 20_000);
    shuttle::check_pct(|| fold_scenario_with(PoolConfig::seed(4)), 20_000, 3);
    shuttle::check_random(
        || {
            fold_scenario_with(PoolConfig {
                chain_size: 4,
                ..PoolConfig::default()
            })
        },
        10_000,
    );
    let (runs, folded) = (
        FOLD_RUNS.load(Ordering::Relaxed),
        FOLDED.load(Ordering::Relaxed),
    );
    println!("{runs} schedules, the racing fold folded in {folded}");
    assert_eq!(runs, 50_000);
    assert!(folded > 0, "the racing fold never folded");
}
