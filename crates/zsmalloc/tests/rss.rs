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
#[path = "common/rss_fill.rs"]
#[expect(
    dead_code,
    reason = "only rss_afmalloc.rs bounds the pages by the bytes stored"
)]
mod rss_fill;

use rss::{MIB, TARGET_BYTES, assert_close, rss_pool};
use rss_fill::{fill, reported};

#[test]
fn rss_follows_reported_memory() {
    let pool = rss_pool();
    let mut s = fill(&pool, TARGET_BYTES, 7, "");
    let full_pages = s.full_pages;
    assert_close("filled", s.grown(), reported(&pool));

    // Free 90% at random.
    let kept = s.free_90(&pool);
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
    assert_close("after free + compact", s.grown(), reported(&pool));

    // The survivors are intact.
    s.check_and_free(&pool);
}
