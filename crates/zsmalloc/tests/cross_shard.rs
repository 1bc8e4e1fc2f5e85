//! Duplicates in different shards of a class: two threads, each allocating in its own shard
//! (as they do once threads contend for a class), store the same contents; `fold` and
//! `malloc_dedup` must find the copies across the shards, leaving one object per content.
//! Prints what folding and deduplication achieved against that ideal.

#[path = "common/pool.rs"]
mod pool;

use std::sync::{Arc, Barrier};
use std::thread;

use pool::pool;
use zsmalloc::{Handle, Pool, PoolConfig, pin_malloc_shard};

/// Distinct contents, and objects each thread stores (every content 20 times).
const CONTENTS: usize = 1000;
const PER_THREAD: usize = 20_000;
const THREADS: usize = 2;

/// Content `kind`: 100..4000 bytes, so the contents spread over most classes.
fn content(kind: usize) -> Vec<u8> {
    let len = 100 + kind * 3889 % 3900;
    let mut v: Vec<u8> = (0..len).map(|i| (i * 7 + kind * 13) as u8).collect();
    v[..8].copy_from_slice(&(kind as u64).to_le_bytes());
    v
}

/// Each thread, pinned to shard `t` (or not pinned: then the classes shard as the threads
/// contend), stores every content `PER_THREAD / CONTENTS` times; with `dedup` through
/// `malloc_dedup`, else `malloc` + `write`. Thread 0 stores each content once first (so no
/// two threads store a new content at the same moment), then the threads go on together,
/// meeting every 20 objects (so that, unpinned, they contend for the classes).
fn store(pool: &Arc<Pool>, pinned: bool, dedup: bool) -> Vec<(Handle, usize)> {
    let barrier = Arc::new(Barrier::new(THREADS));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let pool = Arc::clone(pool);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                pin_malloc_shard(pinned.then_some(t));
                let mut mine = Vec::with_capacity(PER_THREAD);
                let start = if t == 0 { CONTENTS } else { 0 };
                for i in 0..PER_THREAD {
                    if let Some(j) = i.checked_sub(start)
                        && j % 20 == 0
                        && j < PER_THREAD - CONTENTS
                    {
                        barrier.wait();
                    }
                    let kind = (i * 7 + t * 3) % CONTENTS;
                    let data = content(kind);
                    let h = if dedup {
                        pool.malloc_dedup(&data).unwrap().0
                    } else {
                        let h = pool.malloc(data.len()).unwrap();
                        pool.write(h, &data).unwrap();
                        h
                    };
                    mine.push((h, kind));
                }
                mine
            })
        })
        .collect();
    threads
        .into_iter()
        .flat_map(|t| t.join().unwrap())
        .collect()
}

fn check_and_free(pool: &Pool, objs: Vec<(Handle, usize)>) {
    for &(h, kind) in &objs {
        let data = content(kind);
        assert!(pool.with_object(h, data.len(), |b| b == &data[..]).unwrap());
    }
    for (h, _) in objs {
        pool.free(h).unwrap();
    }
    pool.check_invariants().unwrap();
    assert_eq!(pool.total_pages(), 0);
}

#[test]
fn fold_finds_duplicates_across_shards() {
    for (config, pinned) in [
        (PoolConfig::default(), true),
        (PoolConfig::seed(8), true),
        (PoolConfig::default(), false),
    ] {
        let pool = Arc::new(pool(config, 2));
        let objs = store(&pool, pinned, false);
        pool.check_invariants().unwrap();
        let total = objs.len() as u64;
        let report = pool.fold();
        pool.check_invariants().unwrap();
        let left = pool.stats().obj_used;
        println!(
            "fold ({:?}, pinned {pinned}): {total} objects of {CONTENTS} contents: folded {}, \
             ideal {}; {left} objects left",
            config.header,
            report.objects_folded,
            total - CONTENTS as u64
        );
        assert_eq!(report.objects_folded, total - CONTENTS as u64);
        assert_eq!(left, CONTENTS);
        check_and_free(&pool, objs);
    }
}

#[test]
fn malloc_dedup_finds_duplicates_across_shards() {
    for (config, pinned) in [
        (PoolConfig::default(), true),
        (PoolConfig::seed(8), true),
        (PoolConfig::default(), false),
    ] {
        let pool = Arc::new(pool(config, 2));
        let objs = store(&pool, pinned, true);
        pool.check_invariants().unwrap();
        let left = pool.stats().obj_used;
        println!(
            "malloc_dedup ({:?}, pinned {pinned}): {} handles of {CONTENTS} contents: \
             {left} objects stored, ideal {CONTENTS}",
            config.header,
            objs.len()
        );
        assert_eq!(left, CONTENTS);
        assert_eq!(pool.fold().objects_folded, 0);
        check_and_free(&pool, objs);
    }
}
