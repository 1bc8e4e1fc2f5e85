//! Memory is honest on zbud and on malloc: about 512 MiB of objects of mixed sizes is
//! stored, 90% of them are freed at random and the allocator is compacted; at both points
//! the growth of the process's RSS over a baseline taken before the fill is compared with
//! `total_pages() * 4096 + metadata_bytes()`.
//!
//! - zbud gives every emptied page back at once, so RSS follows what it reports within 5%
//!   at both points.
//! - malloc reports the heap chunks of its live objects: within 5% after the fill (the
//!   objects were carved one after the other from fresh heap); after the churn, the holes
//!   between survivors stay with malloc even after `malloc_trim` (only whole free pages go
//!   back), so RSS is not below what it reports, and the figures are printed.
//!
//! Both run one after the other in one test, so that nothing else in the process moves its
//! RSS.

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
use zsmalloc::{Backend, PoolConfig, SysMalloc, Zbud};

/// About how many bytes of objects each allocator stores.
const TARGET: usize = TARGET_BYTES / 2;

/// Fills `b`, frees 90% and compacts; returns (RSS growth, reported) after the fill and
/// after the churn.
fn fill_and_churn(b: &dyn Backend) -> [(usize, usize); 2] {
    let name = b.allocator();
    let mut s = fill(b, TARGET, 7, &format!("{name}: "));
    assert_eq!(b.objects(), s.n);
    let full_pages = s.full_pages;
    let filled = (s.grown(), reported(b));

    s.free_90(b);
    println!(
        "{name}: after freeing 90%: RSS grew {:.1} MiB, reports {:.1} MiB (before compact)",
        s.grown() as f64 / MIB,
        reported(b) as f64 / MIB
    );
    b.compact();
    b.check_invariants().unwrap();
    assert!(b.total_pages() < full_pages / 3);
    let churned = (s.grown(), reported(b));

    s.check_and_free(b);
    [filled, churned]
}

#[test]
fn rss_follows_reported_memory_on_zbud_and_malloc() {
    // Both use the RSS test's settings, so they report zsmalloc's huge-class watermark.
    let config = PoolConfig {
        chain_size: 8,
        populate: true,
        page_cache_pages: 0,
        ..PoolConfig::default()
    };
    let huge = rss_pool().huge_class_size();

    let zbud = Zbud::with_config(config).unwrap();
    assert_eq!(zbud.huge_class_size(), huge);
    let [(grown, expected), (grown2, expected2)] = fill_and_churn(&zbud);
    assert_close("zbud filled", grown, expected);
    assert_close("zbud after free + compact", grown2, expected2);
    drop(zbud);

    let malloc = SysMalloc::with_config(config).unwrap();
    assert_eq!(malloc.huge_class_size(), huge);
    let [(grown, expected), (grown2, expected2)] = fill_and_churn(&malloc);
    assert_close("malloc filled", grown, expected);
    println!(
        "malloc after free + malloc_trim: RSS grew {:.1} MiB, malloc reports {:.1} MiB \
         ({:.2}x: fragmentation that stays with malloc)",
        grown2 as f64 / MIB,
        expected2 as f64 / MIB,
        grown2 as f64 / expected2 as f64
    );
    assert!(
        grown2 as f64 >= expected2 as f64 * 0.95,
        "malloc: RSS growth {grown2} below the reported {expected2}"
    );
}
