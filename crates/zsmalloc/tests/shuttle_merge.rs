//! Model-checks merging with `shuttle`: compaction moves the objects of a partly used
//! zspage of a class's second shard into its home shard (two class-shard locks held, the
//! other's then the home's) while other threads write, read, share and free those objects
//! through their handles and malloc in both shards. Every read must return what was written,
//! and the pool's identities must hold at the end.
//!
//! Built only with `--cfg shuttle` (the crate's `sync` shim then uses shuttle's locks):
//! `RUSTFLAGS="--cfg shuttle" cargo test -p zsmalloc --release --test shuttle_merge`.
#![cfg(shuttle)]

#[path = "common/pool.rs"]
mod pool;
#[path = "common/schedules.rs"]
#[expect(
    dead_code,
    reason = "this scenario ends with its own checks, not `settle`"
)]
mod schedules;

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use pool::pool;
use schedules::{check, fill, tally};
use shuttle::thread;
use zsmalloc::{Handle, Pool, PoolConfig, pin_malloc_shard};

/// With chain 4, 2700-byte objects (2708 without the header) live in class 168 (2720 bytes):
/// 3 objects per 2 pages.
const BIG: usize = 2700;

static RUNS: AtomicUsize = AtomicUsize::new(0);
static MERGED: AtomicUsize = AtomicUsize::new(0);

/// Stores an object of `len` bytes in shard `shard` of its class; returns it and its bytes.
fn store_in(pool: &Pool, shard: usize, tag: u8, len: usize) -> (Handle, Vec<u8>) {
    pin_malloc_shard(Some(shard));
    let h = pool.malloc(len).unwrap();
    pin_malloc_shard(None);
    let data = fill(h, tag, len);
    pool.write(h, &data).unwrap();
    (h, data)
}

fn scenario(config: PoolConfig) {
    let big = BIG + 8 - config.header.bytes();
    let pool = Arc::new(pool(config, 2));
    // Home shard: one object (room for two more). Shard 1: two objects, to be merged.
    let y = store_in(&pool, 0, 1, big);
    let x1 = store_in(&pool, 1, 2, big);
    let x2 = store_in(&pool, 1, 3, big);
    pool.check_invariants().unwrap();

    let merger = {
        let pool = Arc::clone(&pool);
        thread::spawn(move || pool.compact())
    };
    let writer = {
        let pool = Arc::clone(&pool);
        let (h, _) = x1;
        thread::spawn(move || {
            let new = fill(h, 4, big);
            pool.write(h, &new).unwrap();
            check(&*pool, h, &new);
            pool.free(h).unwrap();
            assert!(pool.free(h).is_err(), "double free accepted");
        })
    };
    let sharer = {
        let pool = Arc::clone(&pool);
        let (h, data) = x2.clone();
        thread::spawn(move || {
            let other = pool.share(h).unwrap();
            check(&*pool, other, &data);
            assert!(pool.write(other, &data).is_err(), "a shared object written");
            assert!(!pool.free_shared(h).unwrap());
            (other, data)
        })
    };
    let allocator = {
        let pool = Arc::clone(&pool);
        let y = y.clone();
        thread::spawn(move || {
            check(&*pool, y.0, &y.1);
            // A new object in shard 1 while it is being merged.
            store_in(&pool, 1, 5, big)
        })
    };

    let freed = merger.join().unwrap();
    writer.join().unwrap();
    let shared = sharer.join().unwrap();
    let z = allocator.join().unwrap();
    tally(freed > 0, &RUNS, &MERGED);

    pool.check_invariants().unwrap();
    let live = [y, shared, z];
    for (h, data) in &live {
        check(&*pool, *h, data);
    }
    // Merging again (shard 1 may hold `z`) leaves everything intact.
    pool.compact();
    pool.check_invariants().unwrap();
    for (h, data) in live {
        check(&*pool, h, &data);
        pool.free_shared(h).unwrap();
    }
    pool.check_invariants().unwrap();
    assert_eq!(pool.total_pages(), 0);
}

#[test]
fn merge_races_write_share_free_and_malloc() {
    shuttle::check_random(|| scenario(PoolConfig::seed(4)), 10_000);
    shuttle::check_pct(|| scenario(PoolConfig::seed(4)), 10_000, 3);
    shuttle::check_random(
        || {
            scenario(PoolConfig {
                chain_size: 4,
                ..PoolConfig::default()
            })
        },
        5_000,
    );
    let runs = RUNS.load(std::sync::atomic::Ordering::Relaxed);
    let merged = MERGED.load(std::sync::atomic::Ordering::Relaxed);
    println!("{runs} schedules, compaction freed pages in {merged}");
    assert_eq!(runs, 25_000);
    assert!(merged > 0, "compaction never merged");
}
