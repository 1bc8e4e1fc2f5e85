//! afmalloc's memory is honest: the process's resident memory follows what it reports.
//!
//! About 512 MiB of objects of mixed sizes is stored, 90% of them are freed at random and
//! the allocator is compacted; at both points the growth of the process's RSS over a
//! baseline taken before it was filled must be within 5% of `total_pages() * 4096 +
//! metadata_bytes()`. This file holds one test so that nothing else in the process moves
//! its RSS.

#[path = "common/rss.rs"]
mod rss;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rss::{MIB, TARGET_BYTES, assert_close, rss, rss_config, rss_pool};
use zsmalloc::{Allocator, Handle, PAGE_SIZE, open};

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
    let a = open(rss_config(Allocator::Afmalloc)).unwrap();
    assert_eq!(a.allocator(), Allocator::Afmalloc);
    // Devices store the same streams on every allocator.
    assert_eq!(a.huge_class_size(), rss_pool().huge_class_size());
    let target = TARGET_BYTES / 2;
    let mut rng = StdRng::seed_from_u64(11);

    // Everything the test itself keeps is allocated and touched before the baseline.
    let max_objects = target / 1500;
    let mut handles = vec![Handle::from_raw(u64::MAX); max_objects];
    let mut sizes = vec![u16::MAX; max_objects];
    let mut buf = vec![0xFFu8; PAGE_SIZE];
    let base = rss();
    println!("baseline RSS {:.1} MiB", base as f64 / MIB);

    let mut stored = 0;
    let mut n = 0;
    while stored < target {
        let size = object_size(&mut rng);
        let h = a.malloc(size).unwrap();
        fill(&mut buf[..size], n);
        a.write(h, &buf[..size]).unwrap();
        handles[n] = h;
        sizes[n] = size as u16;
        stored += size;
        n += 1;
        assert!(n < max_objects);
    }
    a.check_invariants().unwrap();
    let full_pages = a.total_pages();
    println!(
        "stored {n} objects, {:.1} MiB in {full_pages} pages, metadata {:.1} MiB",
        stored as f64 / MIB,
        a.metadata_bytes() as f64 / MIB
    );
    // No tails: the pages hold the objects rounded up to 8 bytes, and a partly used slab
    // per chunk size at most.
    assert!(full_pages * PAGE_SIZE >= stored);
    assert!(full_pages * PAGE_SIZE <= stored + n * 7 + 10 * PAGE_SIZE);
    assert_close(
        "filled",
        rss().saturating_sub(base),
        full_pages * PAGE_SIZE + a.metadata_bytes(),
    );

    // Free 90% at random.
    let mut kept = 0;
    for h in &mut handles[..n] {
        if rng.gen_range(0..10) == 0 {
            kept += 1;
        } else {
            a.free(*h).unwrap();
            *h = Handle::from_raw(0);
        }
    }
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
    assert_close(
        "after free + compact",
        rss().saturating_sub(base),
        after * PAGE_SIZE + a.metadata_bytes(),
    );

    // The survivors are intact.
    for (i, &h) in handles[..n].iter().enumerate() {
        if h.to_raw() == 0 {
            continue;
        }
        let size = usize::from(sizes[i]);
        fill(&mut buf[..size], i);
        let mut same = false;
        a.read_with(h, size, &mut |b| same = b == &buf[..size])
            .unwrap();
        assert!(same, "object {i} changed");
    }
    for &h in &handles[..n] {
        if h.to_raw() != 0 {
            a.free(h).unwrap();
        }
    }
    assert_eq!(a.total_pages(), 0);
}
