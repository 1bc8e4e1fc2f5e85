//! Model-checks afmalloc's locking with `shuttle`: malloc, write, read and free racing with
//! compaction on a small allocator of two heaps, whose sparse slabs (of one-chunk and of
//! several-chunk objects) give compaction chunks to move, under many thread interleavings.
//! Every read must return what its thread wrote and the allocator's identities must hold at
//! the end.
//!
//! Built only with `--cfg shuttle` (the crate's `sync` shim then uses shuttle's locks):
//! `RUSTFLAGS="--cfg shuttle" cargo test -p zsmalloc --release --test shuttle_afmalloc`.
#![cfg(shuttle)]

#[path = "common/schedules.rs"]
mod schedules;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use schedules::{check, fill, settle, tally};
use shuttle::thread;
use zsmalloc::{Afmalloc, Allocator, Backend, Handle, PoolConfig};

/// 1024 + 512 bytes: a record of two chunks (4 and 8 per slab).
const PAIR: usize = 1536;
/// One 2048-byte chunk (2 per slab): a tagged handle, no record.
const HALF: usize = 2048;

/// Explored schedules, and those in which compaction freed pages while the others ran
/// (plain std atomics: outside the model, only counted).
static RUNS: AtomicUsize = AtomicUsize::new(0);
static COMPACTED: AtomicUsize = AtomicUsize::new(0);

fn stored(a: &Afmalloc, size: usize, tag: u8) -> (Handle, Vec<u8>) {
    let h = a.malloc(size).unwrap();
    let data = fill(h, tag, size);
    a.write(h, &data).unwrap();
    (h, data)
}

fn scenario() {
    let a = Arc::new(
        Afmalloc::with_config(PoolConfig {
            allocator: Allocator::Afmalloc,
            shards: 2,
            populate: false,
            page_cache_pages: 0,
            ..PoolConfig::default()
        })
        .unwrap(),
    );
    // Eight two-chunk objects (two slabs of 1024-byte chunks, one of 512) and four of one
    // chunk (two slabs); freeing some leaves a sparse slab of each chunk size compaction
    // can empty.
    let mut pairs: Vec<(Handle, Vec<u8>)> = (0..8).map(|_| stored(&a, PAIR, 0)).collect();
    let mut halves: Vec<(Handle, Vec<u8>)> = (0..4).map(|_| stored(&a, HALF, 0)).collect();
    for i in [6, 5, 2, 1, 0] {
        a.free(pairs.remove(i).0).unwrap();
    }
    a.free(halves.remove(2).0).unwrap();
    a.free(halves.remove(0).0).unwrap();
    assert!(a.freeable_pages() >= 2);
    a.check_invariants().unwrap();
    // pairs: [p, q, r]; thread 1 owns p and a half, thread 2 owns q, r stays.
    let [p, q, r]: [(Handle, Vec<u8>); 3] = pairs.try_into().unwrap();
    let [h1, h2]: [(Handle, Vec<u8>); 2] = halves.try_into().unwrap();

    let compactor = {
        let a = Arc::clone(&a);
        thread::spawn(move || {
            let freed = a.compact();
            a.compact() + freed
        })
    };
    let t1 = {
        let a = Arc::clone(&a);
        thread::spawn(move || {
            check(&*a, p.0, &p.1);
            let p2 = fill(p.0, 1, PAIR);
            a.write(p.0, &p2).unwrap();
            let (n, data) = stored(&a, 400, 2);
            check(&*a, h1.0, &h1.1);
            check(&*a, p.0, &p2);
            check(&*a, n, &data);
            a.free(n).unwrap();
            vec![(p.0, p2), h1]
        })
    };
    let t2 = {
        let a = Arc::clone(&a);
        thread::spawn(move || {
            check(&*a, q.0, &q.1);
            a.free(q.0).unwrap();
            let (n, data) = stored(&a, 40, 3);
            let mut same = false;
            a.read_with(h2.0, HALF, &mut |b| same = b == &h2.1[..])
                .unwrap();
            assert!(same, "a one-chunk object changed");
            check(&*a, n, &data);
            assert!(a.free(q.0).is_err(), "double free accepted");
            vec![(n, data), h2]
        })
    };

    let freed = compactor.join().unwrap();
    tally(freed > 0, &RUNS, &COMPACTED);
    let mut live = t1.join().unwrap();
    live.extend(t2.join().unwrap());
    live.push(r);
    settle(&*a, live, freed);
}

#[test]
fn malloc_write_read_free_race_compaction() {
    shuttle::check_random(scenario, 40_000);
    shuttle::check_pct(scenario, 40_000, 3);
    let (runs, compacted) = (
        RUNS.load(Ordering::Relaxed),
        COMPACTED.load(Ordering::Relaxed),
    );
    println!("{runs} schedules, compaction moved chunks in {compacted}");
    assert_eq!(runs, 80_000);
    assert!(compacted > 0, "compaction never had work to do");
}
