//! Merging shards gives the memory back to the OS: after 16 threads, each in its own shard,
//! store 128 MiB of objects and the pool is compacted, the pool holds the pages one
//! thread's fill of the same objects holds, and the process's RSS grew by what the pool
//! reports (within 5%). One test in this file, so that nothing else moves the RSS.

#[path = "common/rss.rs"]
#[expect(
    dead_code,
    reason = "this test sizes its own fill and builds its pool with more shards"
)]
mod rss;

use std::sync::Arc;

use rss::{MIB, assert_close, rss, rss_config};
use zsmalloc::{Allocator, Handle, PAGE_SIZE, Pool, PoolConfig, pin_malloc_shard};

const SHARDS: usize = 16;
const OBJECTS: usize = 64 * 1024;

/// Object `i`'s size: 200..4096 bytes, spread over the classes.
fn size(i: usize) -> usize {
    200 + (i.wrapping_mul(2_654_435_761) >> 7) % 3897
}

/// Stores every object, thread `t` of `threads` (pinned to shard `t` when there are
/// several) storing every `threads`-th; returns the handles.
fn fill(pool: &Arc<Pool>, threads: usize) -> Vec<Handle> {
    std::thread::scope(|s| {
        let parts: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    pin_malloc_shard((threads > 1).then_some(t));
                    let data: Vec<u8> = (0..4096).map(|i| (i * 7 + t) as u8).collect();
                    (t..OBJECTS)
                        .step_by(threads)
                        .map(|i| {
                            let h = pool.malloc(size(i)).unwrap();
                            pool.write(h, &data[..size(i)]).unwrap();
                            h
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts.into_iter().flat_map(|p| p.join().unwrap()).collect()
    })
}

fn reported(pool: &Pool) -> usize {
    pool.total_pages() * PAGE_SIZE + pool.metadata_bytes()
}

#[test]
fn a_many_thread_fill_holds_one_threads_memory_once_merged() {
    let config = PoolConfig {
        shards: SHARDS,
        ..rss_config(Allocator::Zsmalloc)
    };
    let one_pages = {
        let pool = Arc::new(Pool::with_config(config).unwrap());
        let handles = fill(&pool, 1);
        pool.compact();
        let pages = pool.total_pages();
        for h in handles {
            pool.free(h).unwrap();
        }
        pages
    };

    let base = rss();
    let pool = Arc::new(Pool::with_config(config).unwrap());
    let handles = fill(&pool, SHARDS);
    let spread = pool.total_pages();
    let freed = pool.compact();
    pool.check_invariants().unwrap();
    let merged = pool.total_pages();
    let classes = pool.class_stats().iter().filter(|c| c.obj_used > 0).count();
    println!(
        "one thread: {one_pages} pages ({:.1} MiB); {SHARDS} threads: {spread} pages, \
         {merged} after compaction ({freed} freed), {classes} classes",
        one_pages as f64 * PAGE_SIZE as f64 / MIB
    );
    assert!(spread > one_pages + classes, "the spread fill cost nothing");
    assert!(
        merged <= one_pages + classes,
        "merged {merged} pages, one thread {one_pages}"
    );
    assert_close("merged", rss() - base, reported(&pool));
    for h in handles {
        pool.free(h).unwrap();
    }
    assert_eq!(pool.total_pages(), 0);
}
