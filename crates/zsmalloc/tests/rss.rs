//! Memory is honest: the process's resident memory follows what the pool reports.
//!
//! About 1 GiB of objects of mixed sizes is stored, 90% of them are freed at random and the
//! pool is compacted; at both points the growth of the process's RSS over a baseline taken
//! before the pool was filled must be within 5% of `total_pages() * 4096 +
//! metadata_bytes()`. The pool has the default layout, the zram device's (the layout does
//! not change how pages are held or given back). This file holds one test so that nothing
//! else in the process moves its RSS.

#[path = "common/rss.rs"]
mod rss;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rss::{MIB, TARGET_BYTES, assert_close, rss, rss_pool};
use zsmalloc::{Handle, PAGE_SIZE};

/// Object sizes as zram sees them: compressed pages, mostly 200..3000 bytes, with a tail of
/// poorly compressible ones up to a whole page.
fn object_size(rng: &mut StdRng) -> usize {
    match rng.gen_range(0..10) {
        0..=5 => rng.gen_range(200..=2000),
        6..=8 => rng.gen_range(2001..=3600),
        _ => rng.gen_range(3601..=4096),
    }
}

/// The bytes object `i` holds: its index, then a byte pattern of its own.
fn fill(buf: &mut [u8], i: usize) {
    buf[..8].copy_from_slice(&(i as u64).to_le_bytes());
    let b = (i % 251) as u8;
    buf[8..].fill(b);
}

#[test]
fn rss_follows_reported_memory() {
    let pool = rss_pool();
    let mut rng = StdRng::seed_from_u64(7);

    // Everything the test itself keeps is allocated and touched before the baseline: the
    // handle table (bounded: sizes average over 2 KiB) and one write buffer.
    let max_objects = TARGET_BYTES / 1500;
    let mut handles = vec![Handle::from_raw(u64::MAX); max_objects];
    let mut sizes = vec![u16::MAX; max_objects];
    let mut buf = vec![0xFFu8; PAGE_SIZE];
    let base = rss();
    println!("baseline RSS {:.1} MiB", base as f64 / MIB);

    let mut stored = 0;
    let mut n = 0;
    while stored < TARGET_BYTES {
        let size = object_size(&mut rng);
        let h = pool.malloc(size).unwrap();
        fill(&mut buf[..size], n);
        pool.write(h, &buf[..size]).unwrap();
        handles[n] = h;
        sizes[n] = size as u16;
        stored += size;
        n += 1;
        assert!(n < max_objects);
    }
    pool.check_invariants().unwrap();
    let full_pages = pool.total_pages();
    println!(
        "stored {n} objects, {:.1} MiB in {full_pages} pages, metadata {:.1} MiB",
        stored as f64 / MIB,
        pool.metadata_bytes() as f64 / MIB
    );
    assert!(full_pages * PAGE_SIZE >= stored);
    assert_close(
        "filled",
        rss().saturating_sub(base),
        full_pages * PAGE_SIZE + pool.metadata_bytes(),
    );

    // Free 90% at random.
    let mut kept = 0;
    for h in &mut handles[..n] {
        if rng.gen_range(0..10) == 0 {
            kept += 1;
        } else {
            pool.free(*h).unwrap();
            *h = Handle::from_raw(0);
        }
    }
    let before = pool.total_pages();
    let freed = pool.compact();
    pool.check_invariants().unwrap();
    let after = pool.total_pages();
    println!(
        "kept {kept} objects; compaction freed {freed} pages: {before} -> {after} pages, \
         metadata {:.1} MiB",
        pool.metadata_bytes() as f64 / MIB
    );
    assert!(freed > 0);
    assert_eq!(before - freed, after);
    assert!(
        after < full_pages / 5,
        "90% freed but {after} of {full_pages} pages held"
    );
    assert_close(
        "after free + compact",
        rss().saturating_sub(base),
        after * PAGE_SIZE + pool.metadata_bytes(),
    );

    // The survivors are intact.
    for (i, &h) in handles[..n].iter().enumerate() {
        if h.to_raw() == 0 {
            continue;
        }
        let size = usize::from(sizes[i]);
        fill(&mut buf[..size], i);
        assert!(
            pool.with_object(h, size, |b| b == &buf[..size]).unwrap(),
            "object {i} changed"
        );
    }
    for &h in &handles[..n] {
        if h.to_raw() != 0 {
            pool.free(h).unwrap();
        }
    }
    assert_eq!(pool.total_pages(), 0);
}
