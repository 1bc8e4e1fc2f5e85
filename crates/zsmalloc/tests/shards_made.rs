//! Class shards hold memory only once a thread uses them. A pool has 16 shards per size
//! class by default (one per thread, for up to 16 threads), and a shard's state is made
//! only when a thread first stores in it: one thread's work, and compaction, folding, dedup
//! and every statistic after it, make no shard but the home shard of each class it used;
//! threads pinned to shards make exactly those shards.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};

use zsmalloc::{Pool, PoolConfig, pin_malloc_shard};

const SHARDS: usize = 16;

fn pool() -> Pool {
    Pool::with_config(PoolConfig {
        populate: false,
        ..PoolConfig::default()
    })
    .unwrap()
}

fn bytes(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 7 + j / 3) as u8).collect()
}

#[test]
fn one_thread_makes_only_the_home_shards_of_its_classes() {
    let pool = pool();
    assert_eq!(pool.shards_made(), 0, "a new pool made shards");
    let empty_meta = pool.metadata_bytes();

    let mut classes = BTreeSet::new();
    let mut handles = Vec::new();
    for i in 0..3000 {
        let size = 32 + (i * 37) % 4000;
        let h = pool.malloc(size).unwrap();
        pool.write(h, &bytes(i, size)).unwrap();
        classes.insert(pool.lookup_class(size).unwrap().index);
        handles.push((i, size, h));
    }
    // Identical bytes, stored with dedup and folded: sharing stays in the home shards.
    for i in 0..50 {
        pool.malloc_dedup(&bytes(i % 5, 1000)).unwrap();
    }
    classes.insert(pool.lookup_class(1000).unwrap().index);
    for &(_, _, h) in handles.iter().step_by(3) {
        pool.free(h).unwrap();
    }
    pool.compact();
    pool.fold();
    let _ = (pool.stats(), pool.class_stats(), pool.share_stats());
    let _ = (pool.freeable_pages(), pool.compactable_pages());
    pool.check_invariants().unwrap();
    for &(i, size, h) in handles.iter().skip(1).step_by(3) {
        let mut got = vec![0u8; size];
        pool.read(h, &mut got).unwrap();
        assert!(
            got == bytes(i, size),
            "object {i} read back different bytes"
        );
    }

    let made = pool.shards_made();
    println!(
        "{made} shards made for {} classes used, of {} classes × {SHARDS} shards",
        classes.len(),
        pool.classes().classes().len()
    );
    assert_eq!(
        made,
        classes.len(),
        "shards made beyond the classes' home shards"
    );
    assert!(pool.metadata_bytes() > empty_meta);
}

#[test]
fn pinned_threads_make_their_own_shards_and_no_other() {
    const THREADS: usize = 4;
    const SIZE: usize = 1500;
    let pool = pool();
    let stored: Vec<Vec<_>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let pool = &pool;
                s.spawn(move || {
                    pin_malloc_shard(Some(t));
                    // Half stored plainly, half through dedup (indexed: the bytes differ).
                    (0..200)
                        .map(|i| {
                            let mut data = bytes(t * 1000 + i, SIZE);
                            data[..8].copy_from_slice(&(t * 1000 + i).to_le_bytes());
                            if i % 2 == 0 {
                                let h = pool.malloc(SIZE).unwrap();
                                pool.write(h, &data).unwrap();
                                return (h, data);
                            }
                            let (h, found) = pool.malloc_dedup(&data).unwrap();
                            assert!(!found, "distinct bytes found stored");
                            (h, data)
                        })
                        .collect()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        pool.shards_made(),
        THREADS,
        "one class, a shard per pinned thread"
    );
    // Dedup from another thread's shard looks in its own index and then in every other
    // shard's for the bytes: the shards no thread stored in have nothing there, and
    // looking makes none of them, its own included.
    pin_malloc_shard(Some(THREADS + 1));
    let (shared, found) = pool.malloc_dedup(&stored[1][7].1).unwrap();
    pin_malloc_shard(None);
    assert!(found, "dedup missed bytes stored in another shard");
    assert_eq!(
        pool.shards_made(),
        THREADS,
        "a dedup lookup made the shards it looked in"
    );
    pool.free(shared).unwrap();
    // Merging moves the other shards' objects home; it makes no shard.
    pool.compact();
    pool.check_invariants().unwrap();
    assert_eq!(pool.shards_made(), THREADS);
    for (h, data) in stored.iter().flatten() {
        let mut got = vec![0u8; SIZE];
        pool.read(*h, &mut got).unwrap();
        assert!(&got == data, "handle {h}: read back different bytes");
    }
}

/// Upkeep is not contention: a thread storing alone while another thread reads statistics
/// and compacts (as the device's automatic compaction does every few milliseconds) keeps
/// its class on the home shard, so its stores and its frees meet in one shard.
#[test]
fn upkeep_alongside_one_storing_thread_shards_nothing() {
    const SIZE: usize = 700;
    let pool = pool();
    let stop = AtomicBool::new(false);
    // Stores and frees; `None` from a thread whose own shard is the home shard (thread
    // numbers are handed out in order of first use), where a sharded class would not show.
    let store = || {
        if zsmalloc::thread_number().is_multiple_of(SHARDS) {
            return None;
        }
        let mut live = Vec::new();
        for i in 0..40_000 {
            let h = pool.malloc(SIZE).unwrap();
            pool.write(h, &bytes(i, SIZE)).unwrap();
            live.push(h);
            if i % 3 == 0 {
                pool.free(live.swap_remove(i % live.len())).unwrap();
            }
        }
        Some(live)
    };
    let (looks, live) = std::thread::scope(|s| {
        let looker = s.spawn(|| {
            let mut looks = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _ = (pool.freeable_pages(), pool.compactable_pages());
                let _ = pool.class_stats();
                pool.compact();
                looks += 1;
            }
            looks
        });
        let live = (0..4).find_map(|_| s.spawn(store).join().unwrap());
        stop.store(true, Ordering::Relaxed);
        (looker.join().unwrap(), live)
    });
    let live = live.expect("no storing thread off the home shard in four");
    for h in live {
        pool.free(h).unwrap();
    }
    pool.check_invariants().unwrap();
    println!("{looks} rounds of upkeep alongside the stores");
    assert!(looks > 0, "no upkeep ran alongside the stores");
    assert_eq!(
        pool.shards_made(),
        1,
        "upkeep sharded a class one thread stores in"
    );
}

#[test]
fn shards_left_empty_let_go_of_their_bookkeeping_at_compaction() {
    let pool = pool();
    let empty_meta = pool.metadata_bytes();
    // Sixteen threads come and go, each storing 2000 objects in shards of its own, and
    // everything is freed: once compacted, the shards' tables and lists are let go.
    let stale = std::thread::scope(|s| {
        let threads: Vec<_> = (0..SHARDS)
            .map(|t| {
                let pool = &pool;
                s.spawn(move || {
                    let hs: Vec<_> = (0..2000)
                        .map(|i| {
                            let h = pool.malloc(100 + (i % 7) * 300).unwrap();
                            pool.write(h, &bytes(t * 2000 + i, 100 + (i % 7) * 300))
                                .unwrap();
                            h
                        })
                        .collect();
                    hs
                })
            })
            .collect();
        let all: Vec<_> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        for &h in &all {
            pool.free(h).unwrap();
        }
        all
    });
    let full_meta = pool.metadata_bytes();
    pool.compact();
    pool.check_invariants().unwrap();
    let released = pool.metadata_bytes();
    assert!(
        released <= empty_meta + SHARDS * 7 * 1024,
        "{released} bytes of metadata after all was freed and compacted ({empty_meta} empty, {full_meta} before compaction)"
    );
    // Handles of the released tables stay stale, also once new objects take entries.
    let fresh: Vec<_> = (0..2000)
        .map(|i| pool.malloc(100 + (i % 7) * 300).unwrap())
        .collect();
    for &h in stale.iter().step_by(97) {
        assert!(pool.free(h).is_err(), "a freed handle named a new object");
    }
    for h in fresh {
        pool.free(h).unwrap();
    }
    pool.check_invariants().unwrap();
}
