//! Model-checks the locking protocol with `shuttle`: malloc, write, read and free racing with
//! compaction on a small pool, and folding racing with `free_shared`, `share`,
//! `malloc_dedup`, compaction and readers, under many thread interleavings — also on a class
//! of two shards, where handles in one shard name objects in the other (remote aliases) and
//! folding and `malloc_dedup` work across the shards. Every read must return what its
//! thread wrote and the pool's identities must hold at the end.
//!
//! Built only with `--cfg shuttle` (the crate's `sync` shim then uses shuttle's locks):
//! `RUSTFLAGS="--cfg shuttle" cargo test -p zsmalloc --release --test shuttle_locking`.
#![cfg(shuttle)]

#[path = "common/check.rs"]
mod check;
#[path = "common/pool.rs"]
mod pool;
#[path = "common/schedules.rs"]
mod schedules;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use check::check;
use pool::pool;
use schedules::{fill, settle, tally};
use shuttle::thread::{self, JoinHandle};
use zsmalloc::{FoldReport, Handle, Locking, Pool, PoolConfig, pin_malloc_shard};

/// With chain 4, 2700-byte objects (2708 without the header) live in class 168 (2720 bytes):
/// 3 objects per 2 pages, so a handful of objects spread over several zspages, compaction has
/// work to do, and a zspage left with one object can be shortened to one page.
const BIG: usize = 2700;
const SMALL: usize = 40;

/// Explored schedules in which compaction freed pages, i.e. moved an object while the other
/// threads were using the pool (plain std atomics: outside the model, only counted).
static COMPACTED: AtomicUsize = AtomicUsize::new(0);
static RUNS: AtomicUsize = AtomicUsize::new(0);

/// Explores `scenario` under `schedules` random and `schedules` PCT schedules in the seed
/// kernel's layout (the handle in every object), then under half as many random ones in the
/// zram device's (the default: objects without the handle header, so 8 bytes more of
/// caller data land in the same class), and with `pool_locking` as many in the seed's layout
/// with the pool's one lock (`Locking::Pool`, which has one shard per class: not for
/// scenarios of two shards; the others' one shard per class is `Locking::Class` already).
/// Returns how many schedules ran (`runs` counts them)
/// and in how many the racing operation had work to do (`hits`).
fn explore(
    scenario: fn(PoolConfig),
    schedules: usize,
    pool_locking: bool,
    runs: &AtomicUsize,
    hits: &AtomicUsize,
) -> (usize, usize) {
    shuttle::check_random(move || scenario(PoolConfig::seed(4)), schedules);
    shuttle::check_pct(move || scenario(PoolConfig::seed(4)), schedules, 3);
    shuttle::check_random(
        move || {
            scenario(PoolConfig {
                chain_size: 4,
                ..PoolConfig::default()
            })
        },
        schedules / 2,
    );
    if pool_locking {
        shuttle::check_random(
            move || {
                scenario(PoolConfig {
                    locking: Locking::Pool,
                    ..PoolConfig::seed(4)
                })
            },
            schedules / 2,
        );
    }
    (runs.load(Ordering::Relaxed), hits.load(Ordering::Relaxed))
}

/// A folding and a compacting thread, one pass each, racing with the scenario's others.
fn spawn_fold_and_compact(pool: &Arc<Pool>) -> (JoinHandle<FoldReport>, JoinHandle<usize>) {
    let folder = {
        let pool = Arc::clone(pool);
        thread::spawn(move || pool.fold())
    };
    let compactor = {
        let pool = Arc::clone(pool);
        thread::spawn(move || pool.compact())
    };
    (folder, compactor)
}

/// Every live handle reads back its content, with the pool's identities holding.
fn check_live(pool: &Pool, live: &[(Handle, &Vec<u8>)]) {
    pool.check_invariants().unwrap();
    for &(h, data) in live {
        check(pool, h, data);
    }
}

/// Frees every handle; then the pool holds no pages.
fn free_all_shared(pool: &Pool, handles: impl IntoIterator<Item = Handle>) {
    for h in handles {
        pool.free_shared(h).unwrap();
    }
    pool.check_invariants().unwrap();
    assert_eq!(pool.total_pages(), 0);
}

fn scenario_with(config: PoolConfig) {
    let big = BIG + 8 - config.header.bytes();
    let pool = Arc::new(pool(config, 1));
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
    tally(freed > 0, &RUNS, &COMPACTED);
    let mut live = t1.join().unwrap();
    live.extend(t2.join().unwrap());
    live.extend(shared.iter().cloned());

    settle(&*pool, live, freed);
}

/// Both strategies, and both layouts, in one test, so that the counters see only this
/// scenario.
#[test]
fn malloc_write_read_free_race_compaction() {
    let (runs, compacted) = explore(scenario_with, 20_000, true, &RUNS, &COMPACTED);
    println!("{runs} schedules, compaction moved objects in {compacted}");
    assert_eq!(runs, 60_000);
    assert!(compacted > 0, "compaction never had work to do");
}

/// Many small operations per thread on one class: malloc/free churn racing with compaction
/// (in the default layout, the device's; the layout does not touch the locking).
#[test]
fn churn_random_schedules() {
    shuttle::check_random(
        || {
            let pool = Arc::new(pool(
                PoolConfig {
                    chain_size: 1,
                    ..PoolConfig::default()
                },
                1,
            ));
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
    let pool = Arc::new(pool(config, 1));
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

    let (folder, compactor) = spawn_fold_and_compact(&pool);
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
    tally(report.objects_folded > 0, &FOLD_RUNS, &FOLDED);
    assert_eq!(pool.pages_folded(), report.pages_freed);

    check_live(&pool, &live);
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
    free_all_shared(&pool, live.into_iter().map(|(h, _)| h));
}

#[test]
fn fold_races_free_share_dedup_compaction_and_readers() {
    let (runs, folded) = explore(fold_scenario_with, 20_000, true, &FOLD_RUNS, &FOLDED);
    println!("{runs} schedules, the racing fold folded in {folded}");
    assert_eq!(runs, 60_000);
    assert!(folded > 0, "the racing fold never folded");
}

/// Schedules of the cross-shard scenario, and those in which the racing `fold` folded.
static CROSS_RUNS: AtomicUsize = AtomicUsize::new(0);
static CROSS_FOLDED: AtomicUsize = AtomicUsize::new(0);

/// Stores `data` in shard `shard` of the class (with `malloc_dedup` if `dedup`).
fn store_in(pool: &Pool, shard: usize, data: &[u8], dedup: bool) -> Handle {
    pin_malloc_shard(Some(shard));
    let h = if dedup {
        pool.malloc_dedup(data).unwrap().0
    } else {
        let h = pool.malloc(data.len()).unwrap();
        pool.write(h, data).unwrap();
        h
    };
    pin_malloc_shard(None);
    h
}

/// Folding across the two shards of a class while remote aliases (handles in shard 1
/// naming anchors in shard 0) are freed, shared and read, `malloc_dedup` finds the other
/// shard's index, a copy being folded is rewritten, and shard 0 is compacted.
fn cross_shard_scenario_with(config: PoolConfig) {
    let big = BIG + 8 - config.header.bytes();
    let pool = Arc::new(pool(config, 2));
    let [a, b, c, d, e, a_new] = [1, 2, 3, 4, 5, 6].map(|tag| content(tag, big));
    // Shard 0: A, B (indexed), C | D: two zspages. Shard 1: copies of A and B.
    let a0 = store_in(&pool, 0, &a, false);
    let b0 = store_in(&pool, 0, &b, true);
    let c0 = store_in(&pool, 0, &c, false);
    let d0 = store_in(&pool, 0, &d, false);
    let a1 = store_in(&pool, 1, &a, false);
    let b1 = store_in(&pool, 1, &b, false);
    // The copies in shard 1 become remote aliases of anchors in shard 0.
    assert_eq!(pool.fold().objects_folded, 2);
    // A hole in shard 0 for compaction; in shard 1 a new copy of A for the racing fold.
    pool.free(c0).unwrap();
    assert!(pool.freeable_pages() > 0);
    let a2 = store_in(&pool, 1, &a, false);
    let e1 = store_in(&pool, 1, &e, false);
    pool.check_invariants().unwrap();

    let (folder, compactor) = spawn_fold_and_compact(&pool);
    let freer = {
        let pool = Arc::clone(&pool);
        let (a, b) = (a.clone(), b.clone());
        thread::spawn(move || {
            // A's object stays for a0 (and a2, once folded).
            assert!(!pool.free_shared(a1).unwrap());
            assert!(pool.free_shared(a1).is_err(), "double free accepted");
            // A new handle from a remote alias: issued in the anchor's shard.
            let b2 = pool.share(b1).unwrap();
            check(&pool, b2, &b);
            // B is indexed in shard 0, whichever shard this thread allocates in.
            let (b3, shared) = pool.malloc_dedup(&b).unwrap();
            assert!(shared);
            let (a3, _) = pool.malloc_dedup(&a).unwrap();
            check(&pool, a3, &a);
            pool.free(e1).unwrap();
            vec![b2, b3, a3]
        })
    };
    let writer = {
        let pool = Arc::clone(&pool);
        let a_new = a_new.clone();
        // Rewriting the copy being folded: refused only once folding shared it.
        thread::spawn(move || pool.write(a2, &a_new).is_ok())
    };
    let reader = {
        let pool = Arc::clone(&pool);
        let (b, d) = (b.clone(), d.clone());
        thread::spawn(move || {
            check(&pool, b1, &b);
            check(&pool, d0, &d);
            assert!(pool.with_object(b1, big, |bytes| bytes == &b[..]).unwrap());
            assert_eq!(pool.object_id(b1).unwrap(), pool.object_id(b0).unwrap());
            assert!(pool.refs(b1).unwrap() >= 2);
        })
    };

    let report = folder.join().unwrap();
    compactor.join().unwrap();
    reader.join().unwrap();
    let rewritten = writer.join().unwrap();
    let [b2, b3, a3]: [Handle; 3] = freer.join().unwrap().try_into().unwrap();
    tally(report.objects_folded > 0, &CROSS_RUNS, &CROSS_FOLDED);
    let a2_content = if rewritten { &a_new } else { &a };
    let live = [
        (a0, &a),
        (a2, a2_content),
        (a3, &a),
        (b0, &b),
        (b1, &b),
        (b2, &b),
        (b3, &b),
        (d0, &d),
    ];
    check_live(&pool, &live);
    // Once more without racing: one object per content is left — but for A, whose copies
    // a2 and a3 (shard 1's direct objects) the racing compaction may have merged into shard
    // 0 before the racing fold reached them: a merged object is an anchor, which fold keeps
    // and never folds into another (docs/design.md).
    pool.fold();
    pool.check_invariants().unwrap();
    let mut ids: std::collections::HashMap<u64, &Vec<u8>> = std::collections::HashMap::new();
    for &(h, data) in &live {
        check(&pool, h, data);
        // One object, one content.
        let content = *ids.entry(pool.object_id(h).unwrap()).or_insert(data);
        assert_eq!(content, data);
    }
    assert_eq!(pool.stats().obj_used, ids.len());
    for content in [&b, &d, a2_content] {
        let objects = ids.values().filter(|&&c| c == content).count();
        assert!(
            objects == 1 || content == &a,
            "{objects} objects hold one content"
        );
    }
    assert!(ids.values().filter(|&&c| c == &a).count() <= 3);
    free_all_shared(&pool, live.map(|(h, _)| h));
}

#[test]
fn cross_shard_fold_races_free_share_dedup_compaction_and_readers() {
    let (runs, folded) = explore(
        cross_shard_scenario_with,
        10_000,
        false,
        &CROSS_RUNS,
        &CROSS_FOLDED,
    );
    println!("{runs} schedules, the racing fold folded across shards in {folded}");
    assert_eq!(runs, 25_000);
    assert!(folded > 0, "the racing fold never folded");
}
