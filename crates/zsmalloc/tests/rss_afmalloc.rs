//! afmalloc's memory is honest: the process's resident memory follows what it reports.
//!
//! About 512 MiB of objects of mixed sizes is stored, 90% of them are freed at random and
//! the allocator is compacted; at both points the growth of the process's RSS over a
//! baseline taken before it was filled must be within 5% of `total_pages() * 4096 +
//! metadata_bytes()`. This file holds one test so that nothing else in the process moves
//! its RSS.

#[path = "common/rss.rs"]
mod rss;
#[path = "common/rss_fill.rs"]
mod rss_fill;

use rss::{MIB, TARGET_BYTES, assert_close, rss_config, rss_pool};
use rss_fill::{fill, reported};
use zsmalloc::{Allocator, PAGE_SIZE, open};

#[test]
fn rss_follows_reported_memory() {
    let a = open(rss_config(Allocator::Afmalloc)).unwrap();
    let a = &*a;
    assert_eq!(a.allocator(), Allocator::Afmalloc);
    // Devices store the same streams on every allocator.
    assert_eq!(a.huge_class_size(), rss_pool().huge_class_size());
    let mut s = fill(a, TARGET_BYTES / 2, 11, "");
    let (n, stored, full_pages) = (s.n, s.stored, s.full_pages);
    // No tails: the pages hold the objects rounded up to 8 bytes, and a partly used slab
    // per chunk size at most.
    assert!(full_pages * PAGE_SIZE <= stored + n * 7 + 10 * PAGE_SIZE);
    assert_close("filled", s.grown(), reported(a));

    // Free 90% at random.
    let kept = s.free_90(a);
    let before = a.total_pages();
    let freeable = a.freeable_pages();
    let freed = a.compact();
    a.check_invariants().unwrap();
    let after = a.total_pages();
    println!(
        "kept {kept} objects; compaction freed {freed} of {freeable} freeable pages: \
         {before} -> {after} pages, metadata {:.1} MiB",
        a.metadata_bytes() as f64 / MIB
    );
    assert!(freed > 0 && freed <= freeable);
    assert_eq!(before - freed, after);
    assert!(
        after < full_pages / 5,
        "90% freed but {after} of {full_pages} pages held"
    );
    assert_close("after free + compact", s.grown(), reported(a));

    // The survivors are intact.
    s.check_and_free(a);
}
