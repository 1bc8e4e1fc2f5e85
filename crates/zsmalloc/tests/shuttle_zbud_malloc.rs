//! Model-checks zbud's and malloc's locking with `shuttle`: threads racing malloc, write,
//! read and free (plus `malloc_trim` compaction on malloc) on one allocator, under many
//! thread interleavings. The objects are sized so that zbud's threads fill the buddies of
//! the same pages and move them between unbuddied lists and back to the page source. Every
//! read must return what its thread wrote; at the end the allocator's identities must hold
//! and it must hold nothing.
//!
//! Built only with `--cfg shuttle`: `RUSTFLAGS="--cfg shuttle"
//! CARGO_TARGET_DIR=target/shuttle cargo test -p zsmalloc --release --test
//! shuttle_zbud_malloc`.
#![cfg(shuttle)]

#[path = "common/schedules.rs"]
#[expect(
    dead_code,
    reason = "only `check` is shared: this file's `fill` mixes in the handle's high bits"
)]
mod schedules;

use std::sync::Arc;

use schedules::check;
use shuttle::thread;
use zsmalloc::{Allocator, Backend, Handle, PoolConfig, open};

fn fill(h: Handle, tag: u8, len: usize) -> Vec<u8> {
    let seed = (h.to_raw() ^ (h.to_raw() >> 31)) as u8 ^ tag;
    (0..len).map(|i| seed.wrapping_add(i as u8)).collect()
}

/// One thread's work: two objects of `sizes`, written, read back, rewritten, freed in an
/// order that leaves a page half full in between.
fn worker(b: Arc<dyn Backend>, tag: u8, sizes: [usize; 2]) {
    let x = b.malloc(sizes[0]).unwrap();
    let xd = fill(x, tag, sizes[0]);
    b.write(x, &xd).unwrap();
    let y = b.malloc(sizes[1]).unwrap();
    let yd = fill(y, tag.wrapping_add(1), sizes[1]);
    b.write(y, &yd).unwrap();
    check(&*b, x, &xd);
    b.free(x).unwrap();
    check(&*b, y, &yd);
    let z = b.malloc(sizes[0]).unwrap();
    let zd = fill(z, tag.wrapping_add(2), sizes[0]);
    b.write(z, &zd).unwrap();
    let yd2 = fill(y, tag.wrapping_add(3), sizes[1]);
    b.write(y, &yd2).unwrap();
    check(&*b, z, &zd);
    check(&*b, y, &yd2);
    b.free(y).unwrap();
    b.free(z).unwrap();
}

fn scenario(allocator: Allocator) {
    let b = open(PoolConfig {
        allocator,
        populate: false,
        page_cache_pages: 1,
        shards: 2,
        ..PoolConfig::default()
    })
    .unwrap();
    // An object another thread's may share a page with, live throughout.
    let pinned = b.malloc(1000).unwrap();
    let pinned_data = fill(pinned, 9, 1000);
    b.write(pinned, &pinned_data).unwrap();

    let mut threads = Vec::new();
    for (tag, sizes) in [(0u8, [2000, 1000]), (16, [3000, 2048])] {
        let b = Arc::clone(&b);
        threads.push(thread::spawn(move || worker(b, tag, sizes)));
    }
    if allocator == Allocator::Malloc {
        let b = Arc::clone(&b);
        threads.push(thread::spawn(move || {
            b.compact();
        }));
    }
    for t in threads {
        t.join().unwrap();
    }
    b.check_invariants().unwrap();
    check(&*b, pinned, &pinned_data);
    b.free(pinned).unwrap();
    b.check_invariants().unwrap();
    assert_eq!(b.objects(), 0);
    assert_eq!(b.total_pages(), 0);
}

#[test]
fn zbud_racing_threads_read_what_they_wrote() {
    shuttle::check_random(|| scenario(Allocator::Zbud), 5000);
    shuttle::check_pct(|| scenario(Allocator::Zbud), 5000, 3);
}

#[test]
fn malloc_racing_threads_read_what_they_wrote() {
    shuttle::check_random(|| scenario(Allocator::Malloc), 5000);
    shuttle::check_pct(|| scenario(Allocator::Malloc), 5000, 3);
}
