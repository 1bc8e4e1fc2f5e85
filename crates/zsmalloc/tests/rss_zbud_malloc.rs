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

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rss::{MIB, TARGET_BYTES, assert_close, rss, rss_pool};
use zsmalloc::{Backend, Handle, PAGE_SIZE, PoolConfig, SysMalloc, Zbud};

/// About how many bytes of objects each allocator stores.
const TARGET: usize = TARGET_BYTES / 2;

/// Object sizes as zram sees them, as in `rss.rs`.
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
    buf[8..].fill((i % 251) as u8);
}

fn reported(b: &dyn Backend) -> usize {
    b.total_pages() * PAGE_SIZE + b.metadata_bytes()
}

/// Fills `b`, frees 90% and compacts; returns (RSS growth, reported) after the fill and
/// after the churn.
fn fill_and_churn(b: &dyn Backend) -> [(usize, usize); 2] {
    let name = b.allocator();
    let mut rng = StdRng::seed_from_u64(7);
    let max_objects = TARGET / 1500;
    let mut handles = vec![Handle::from_raw(u64::MAX); max_objects];
    let mut sizes = vec![u16::MAX; max_objects];
    let mut buf = vec![0xFFu8; PAGE_SIZE];
    let base = rss();
    println!("{name}: baseline RSS {:.1} MiB", base as f64 / MIB);

    let (mut stored, mut n) = (0, 0);
    while stored < TARGET {
        let size = object_size(&mut rng);
        let h = b.malloc(size).unwrap();
        fill(&mut buf[..size], n);
        b.write(h, &buf[..size]).unwrap();
        handles[n] = h;
        sizes[n] = size as u16;
        stored += size;
        n += 1;
        assert!(n < max_objects);
    }
    b.check_invariants().unwrap();
    assert_eq!(b.objects(), n);
    assert!(b.total_pages() * PAGE_SIZE >= stored);
    let full_pages = b.total_pages();
    println!(
        "{name}: stored {n} objects, {:.1} MiB in {full_pages} pages, metadata {:.1} MiB",
        stored as f64 / MIB,
        b.metadata_bytes() as f64 / MIB
    );
    let filled = (rss().saturating_sub(base), reported(b));

    for h in &mut handles[..n] {
        if rng.gen_range(0..10) != 0 {
            b.free(*h).unwrap();
            *h = Handle::from_raw(0);
        }
    }
    println!(
        "{name}: after freeing 90%: RSS grew {:.1} MiB, reports {:.1} MiB (before compact)",
        rss().saturating_sub(base) as f64 / MIB,
        reported(b) as f64 / MIB
    );
    b.compact();
    b.check_invariants().unwrap();
    assert!(b.total_pages() < full_pages / 3);
    let churned = (rss().saturating_sub(base), reported(b));

    for (i, &h) in handles[..n].iter().enumerate() {
        if h.to_raw() == 0 {
            continue;
        }
        let size = usize::from(sizes[i]);
        fill(&mut buf[..size], i);
        let mut out = vec![0u8; size];
        b.read(h, &mut out).unwrap();
        assert!(out == buf[..size], "{name}: object {i} changed");
        b.free(h).unwrap();
    }
    assert_eq!(b.total_pages(), 0);
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
