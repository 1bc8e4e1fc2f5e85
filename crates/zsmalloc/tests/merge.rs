//! Merging shards: objects that threads spread over the shards of their classes move back
//! into each class's home shard when the pool is compacted, so that a pool filled by many
//! threads holds the pages one thread's fill would; handles stay stable through it, also
//! while other threads malloc, write, read, share and free alongside.

#[path = "common/pool.rs"]
mod pool;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use pool::pool;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use zsmalloc::{Error, Handle, Pool, PoolConfig, pin_malloc_shard};

const SHARDS: usize = 16;

/// Object `i`'s size: compressed pages as zram sees them, mostly 200..3600 bytes.
fn size(i: usize) -> usize {
    let mut rng = StdRng::seed_from_u64(i as u64);
    match rng.gen_range(0..10) {
        0..=5 => rng.gen_range(200..=2000),
        6..=8 => rng.gen_range(2001..=3600),
        _ => rng.gen_range(3601..=4096),
    }
}

/// Object `i`'s bytes (version `v`).
fn bytes(i: usize, v: u8, len: usize) -> Vec<u8> {
    let mut b: Vec<u8> = (0..len).map(|j| (i * 31 + j) as u8 ^ v).collect();
    b[..8].copy_from_slice(&(i as u64).to_le_bytes());
    b
}

fn check(pool: &Pool, h: Handle, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    pool.read(h, &mut got).unwrap();
    assert!(got == want, "handle {h}: read back different bytes");
}

/// Stores objects `0..n` with `threads` threads, thread `t` pinned to shard `t` and storing
/// every `threads`-th object (as threads that contend for every class do); returns the
/// handles by object.
fn fill(pool: &Arc<Pool>, n: usize, threads: usize) -> Vec<Handle> {
    let parts: Vec<Vec<(usize, Handle)>> = thread::scope(|s| {
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    pin_malloc_shard((threads > 1).then_some(t));
                    (t..n)
                        .step_by(threads)
                        .map(|i| {
                            let h = pool.malloc(size(i)).unwrap();
                            pool.write(h, &bytes(i, 0, size(i))).unwrap();
                            (i, h)
                        })
                        .collect()
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut handles = vec![Handle::from_raw(0); n];
    for (i, h) in parts.into_iter().flatten() {
        handles[i] = h;
    }
    handles
}

/// After a fill by 16 threads, each in its own shard, the pool holds a partly used zspage
/// per class per shard; compaction merges them, and the pool then holds what one thread's
/// fill of the same objects holds after compaction (within a page per class in use). The
/// handles keep their objects, can be written (a merged object is not shared) and freed.
#[test]
fn merge_brings_a_many_thread_fill_down_to_one_threads() {
    const N: usize = 20_000;
    let config = PoolConfig::default();
    let one = Arc::new(pool(config, SHARDS));
    let one_handles = fill(&one, N, 1);
    one.compact();
    let one_pages = one.total_pages();

    let many = Arc::new(pool(config, SHARDS));
    let handles = fill(&many, N, SHARDS);
    let spread = many.total_pages();
    let mergeable = many.compactable_pages();
    let classes_used = many.class_stats().iter().filter(|c| c.obj_used > 0).count();
    let freed = many.compact();
    many.check_invariants().unwrap();
    let merged = many.total_pages();
    println!(
        "one thread: {one_pages} pages; {SHARDS} threads: {spread} pages, {mergeable} \
         compactable, {merged} after compaction ({freed} freed); {classes_used} classes"
    );
    assert_eq!(spread - freed, merged);
    assert!(
        spread > one_pages + classes_used,
        "the spread fill cost no pages: nothing to merge"
    );
    assert!(mergeable >= spread - merged - classes_used);
    assert!(
        merged <= one_pages + classes_used,
        "merged: {merged} pages, one thread: {one_pages}"
    );
    assert_eq!(many.compactable_pages(), 0);

    // Every handle still leads to its object, can be written and read back, and freed.
    for (i, &h) in handles.iter().enumerate() {
        check(&many, h, &bytes(i, 0, size(i)));
        assert_eq!(many.refs(h).unwrap(), 1);
    }
    for (i, &h) in handles.iter().enumerate().step_by(3) {
        many.write(h, &bytes(i, 1, size(i))).unwrap();
        check(&many, h, &bytes(i, 1, size(i)));
    }
    many.check_invariants().unwrap();
    for (i, &h) in handles.iter().enumerate() {
        if i % 2 == 0 {
            many.free(h).unwrap();
            assert!(matches!(many.free(h), Err(Error::StaleHandle(_))));
        }
    }
    many.compact();
    many.check_invariants().unwrap();
    for (i, &h) in handles.iter().enumerate().filter(|(i, _)| i % 2 == 1) {
        let v = u8::from(i % 3 == 0);
        check(&many, h, &bytes(i, v, size(i)));
        many.free(h).unwrap();
    }
    many.check_invariants().unwrap();
    assert_eq!(many.total_pages(), 0);
    for h in one_handles {
        one.free(h).unwrap();
    }
    assert_eq!(one.total_pages(), 0);
}

/// A merged object that gets a second handle is shared like any other: read-only, freed
/// with its last handle; its id stays the one it had before it moved.
#[test]
fn a_merged_object_shares_like_any() {
    let pool = pool(PoolConfig::default(), 2);
    let data = bytes(7, 0, 1000);
    pin_malloc_shard(Some(1));
    let h = pool.malloc(data.len()).unwrap();
    pool.write(h, &data).unwrap();
    pin_malloc_shard(None);
    let id = pool.object_id(h).unwrap();
    pool.compact();
    pool.check_invariants().unwrap();
    assert_eq!(pool.object_id(h).unwrap(), id);
    let h2 = pool.share(h).unwrap();
    assert_eq!(pool.refs(h).unwrap(), 2);
    assert!(matches!(pool.write(h, &data), Err(Error::Shared(_))));
    assert!(!pool.free_shared(h2).unwrap());
    // Shared once, read-only for good.
    assert!(matches!(pool.write(h, &data), Err(Error::Shared(_))));
    check(&pool, h, &data);
    assert!(pool.free_shared(h).unwrap());
    pool.check_invariants().unwrap();
    assert_eq!(pool.total_pages(), 0);
}

/// Threads, each pinned to its own shard, malloc, write, read, rewrite, share and free
/// their objects while another thread compacts (and so merges) in a loop; every read
/// returns what was written, and the pool's identities hold at the end.
#[test]
fn merge_runs_alongside_malloc_write_read_free() {
    const WORKERS: usize = 4;
    const ITERATIONS: usize = 60_000;
    for config in [PoolConfig::default(), PoolConfig::seed(4)] {
        let pool = Arc::new(pool(config, WORKERS));
        let stop = Arc::new(AtomicBool::new(false));
        let merger = {
            let (pool, stop) = (Arc::clone(&pool), Arc::clone(&stop));
            thread::spawn(move || {
                let mut rounds = 0;
                while !stop.load(Ordering::Relaxed) {
                    pool.compact();
                    rounds += 1;
                }
                rounds
            })
        };
        let workers: Vec<_> = (0..WORKERS)
            .map(|t| {
                let pool = Arc::clone(&pool);
                thread::spawn(move || worker(&pool, t, ITERATIONS))
            })
            .collect();
        let live: Vec<_> = workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect();
        stop.store(true, Ordering::Relaxed);
        let rounds = merger.join().unwrap();
        println!("{rounds} compactions alongside the workers");
        pool.check_invariants().unwrap();
        for (h, data) in &live {
            check(&pool, *h, data);
        }
        pool.compact();
        pool.check_invariants().unwrap();
        for (h, data) in live {
            check(&pool, h, &data);
            pool.free_shared(h).unwrap();
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.total_pages(), 0);
    }
}

/// One worker's loop (see the test); returns its live handles and their bytes.
fn worker(pool: &Pool, t: usize, iterations: usize) -> Vec<(Handle, Vec<u8>)> {
    pin_malloc_shard(Some(t));
    let mut rng = StdRng::seed_from_u64(t as u64);
    // Handle, bytes, and whether its object was ever shared (read-only for good).
    let mut mine: Vec<(Handle, Vec<u8>, bool)> = Vec::new();
    for i in 0..iterations {
        match rng.gen_range(0..10) {
            0..=3 => {
                let len = size(rng.r#gen());
                let h = pool.malloc(len).unwrap();
                let data = bytes(i, t as u8, len);
                pool.write(h, &data).unwrap();
                mine.push((h, data, false));
            }
            4..=5 if !mine.is_empty() => {
                let (h, data, _) = &mine[rng.gen_range(0..mine.len())];
                check(pool, *h, data);
                assert!(
                    pool.with_object(*h, data.len(), |b| b == &data[..])
                        .unwrap()
                );
            }
            6 if !mine.is_empty() => {
                // A rewrite: refused exactly when the object was shared, merged or not.
                let k = rng.gen_range(0..mine.len());
                let (h, data, shared) = &mut mine[k];
                let new = bytes(i, 0x5A, data.len());
                match pool.write(*h, &new) {
                    Ok(()) if !*shared => *data = new,
                    Err(Error::Shared(_)) if *shared => {}
                    other => panic!("write {h} (shared: {shared}): {other:?}"),
                }
            }
            7 if !mine.is_empty() && i % 16 == 0 => {
                let k = rng.gen_range(0..mine.len());
                mine[k].2 = true;
                let (h, data, _) = mine[k].clone();
                let h2 = pool.share(h).unwrap();
                check(pool, h2, &data);
                mine.push((h2, data, true));
            }
            _ if !mine.is_empty() => {
                let k = rng.gen_range(0..mine.len());
                let (h, _, _) = mine.swap_remove(k);
                pool.free_shared(h).unwrap();
            }
            _ => {}
        }
    }
    mine.into_iter().map(|(h, data, _)| (h, data)).collect()
}
