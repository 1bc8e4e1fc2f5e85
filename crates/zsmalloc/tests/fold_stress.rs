//! Plain-thread stress of shared objects: worker threads store pages of a few contents
//! (with `malloc_dedup` and with `malloc` + `write`), share, rewrite and free their handles
//! while one thread folds and another compacts in loops, on pools large enough that both
//! take many lock holds per class. Every read must return what was stored, a rewrite may
//! only be refused because folding shared the object, and the pool's identities must hold
//! at the end. In the seed kernel's layout (headers) and the zram device's, and with the
//! workers in two shards of each class (handles of one object in both).

#[path = "common/check.rs"]
mod check;
#[path = "common/pool.rs"]
mod pool;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use check::check;
use pool::pool;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use zsmalloc::{Error, Handle, Pool, PoolConfig, pin_malloc_shard};

const WORKERS: u64 = 2;
const ITERATIONS: usize = 150_000;

/// Content `kind` of `len` bytes: few kinds and lengths, so duplicates are everywhere.
fn content(kind: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (kind as u8).wrapping_mul(59) ^ (i % 11) as u8)
        .collect()
}

/// With `shards` shards per class; with more than one, each worker allocates in its own
/// shard, so copies are folded and deduplicated across shards.
fn stress(config: PoolConfig, shards: usize) {
    let pool = Arc::new(pool(config, shards));
    let stop = Arc::new(AtomicBool::new(false));
    let looping = |f: fn(&Pool) -> u64| {
        let pool = Arc::clone(&pool);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let (mut rounds, mut total) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                total += f(&pool);
                rounds += 1;
            }
            (rounds, total)
        })
    };
    let folder = looping(|p| p.fold().objects_folded);
    let compactor = looping(|p| p.compact() as u64);

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let pool = Arc::clone(&pool);
            thread::spawn(move || {
                if shards > 1 {
                    pin_malloc_shard(Some(w as usize));
                }
                let mut rng = StdRng::seed_from_u64(77 + w);
                let mut mine: Vec<(Handle, Vec<u8>)> = Vec::new();
                let mut refused = 0u64;
                for _ in 0..ITERATIONS {
                    let len = [300, 1200, 2500][rng.gen_range(0..3)];
                    let data = content(rng.gen_range(0..6), len);
                    match rng.gen_range(0..10) {
                        0..=2 => {
                            let (h, _) = pool.malloc_dedup(&data).unwrap();
                            mine.push((h, data));
                        }
                        3..=4 => {
                            let h = pool.malloc(len).unwrap();
                            pool.write(h, &data).unwrap();
                            mine.push((h, data));
                        }
                        5 if !mine.is_empty() => {
                            let k = rng.gen_range(0..mine.len());
                            let h = pool.share(mine[k].0).unwrap();
                            mine.push((h, mine[k].1.clone()));
                        }
                        6 if !mine.is_empty() => {
                            // Rewrite: refused only if the object is shared by now.
                            let k = rng.gen_range(0..mine.len());
                            let h = mine[k].0;
                            let new = content(rng.gen_range(0..6), mine[k].1.len());
                            match pool.write(h, &new) {
                                Ok(()) => mine[k].1 = new,
                                Err(Error::Shared(x)) if x == h => refused += 1,
                                Err(e) => panic!("write {h}: {e}"),
                            }
                        }
                        7..=8 if !mine.is_empty() => {
                            let (h, data) = mine.swap_remove(rng.gen_range(0..mine.len()));
                            check(&pool, h, &data);
                            pool.free_shared(h).unwrap();
                            assert!(pool.free_shared(h).is_err(), "double free accepted");
                        }
                        _ => {
                            if let Some((h, data)) = mine.get(rng.gen_range(0..mine.len().max(1))) {
                                check(&pool, *h, data);
                            }
                        }
                    }
                    // Bounded population, freed in bulk so that zspages empty.
                    if mine.len() > 20_000 {
                        for (h, data) in mine.drain(..12_000) {
                            check(&pool, h, &data);
                            pool.free_shared(h).unwrap();
                        }
                    }
                }
                (mine, refused)
            })
        })
        .collect();

    let results: Vec<_> = workers.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    let (folds, folded) = folder.join().unwrap();
    let (compactions, compacted) = compactor.join().unwrap();
    let refused: u64 = results.iter().map(|r| r.1).sum();
    println!(
        "{:?}, {shards} shards: {folds} folds folded {folded} objects, {compactions} compactions freed \
         {compacted} pages, {refused} rewrites refused, {} pages folded",
        config.header,
        pool.pages_folded()
    );
    assert!(folded > 0 && pool.pages_folded() > 0);

    pool.check_invariants().unwrap();
    let live: Vec<(Handle, Vec<u8>)> = results.into_iter().flat_map(|r| r.0).collect();
    for (h, data) in &live {
        check(&pool, *h, data);
    }
    pool.fold();
    pool.check_invariants().unwrap();
    for (h, data) in live {
        check(&pool, h, &data);
        pool.free_shared(h).unwrap();
    }
    pool.check_invariants().unwrap();
    assert_eq!(pool.total_pages(), 0);
}

#[test]
fn fold_stress_seed() {
    stress(PoolConfig::seed(8), 1);
}

#[test]
fn fold_stress_device() {
    stress(
        PoolConfig {
            chain_size: 8,
            ..PoolConfig::default()
        },
        1,
    );
}

#[test]
fn fold_stress_across_two_shards() {
    stress(PoolConfig::seed(8), 2);
}

/// Folding and compaction alone on one large class: nothing else changes the shard, so
/// compaction keeps its object index across its many lock holds unless folding says it
/// changed which entries locate which objects.
#[test]
fn fold_races_compaction_of_a_large_class() {
    for (round, config) in [PoolConfig::seed(8), PoolConfig::default()]
        .into_iter()
        .cycle()
        .take(8)
        .enumerate()
    {
        let pool = Arc::new(pool(config, 1));
        let mut rng = StdRng::seed_from_u64(round as u64);
        let mut objs: Vec<(Handle, Vec<u8>)> = (0..40_000)
            .map(|_| {
                let data = content(rng.gen_range(0..3), 200);
                let h = pool.malloc(200).unwrap();
                pool.write(h, &data).unwrap();
                (h, data)
            })
            .collect();
        // Holes everywhere, so that compaction has thousands of steps to take.
        let mut kept = Vec::new();
        for (i, o) in objs.drain(..).enumerate() {
            if i % 3 == 0 {
                pool.free(o.0).unwrap();
            } else {
                kept.push(o);
            }
        }
        let done = Arc::new(AtomicBool::new(false));
        let folder = {
            let pool = Arc::clone(&pool);
            let done = Arc::clone(&done);
            thread::spawn(move || {
                let report = pool.fold();
                done.store(true, Ordering::Relaxed);
                report
            })
        };
        // Compact all the while: folding keeps making holes.
        let mut freed = pool.compact();
        while !done.load(Ordering::Relaxed) {
            freed += pool.compact();
        }
        let report = folder.join().unwrap();
        assert!(report.objects_folded > 0);
        pool.check_invariants().unwrap();
        println!("round {round}: compaction freed {freed}, fold {report:?}");
        for (h, data) in kept {
            check(&pool, h, &data);
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
    }
}
