//! Folding gives memory back for real: about 1 GiB of objects of mixed sizes, half of them
//! copies of a thousand popular contents, is stored and folded; the pages folding frees
//! (`pages_folded`) leave the process, so the growth of its RSS over a baseline stays
//! within 5% of `total_pages() * 4096 + metadata_bytes()` before and after. Prints how long
//! `fold` took per GiB stored (a figure, not a check). This file holds one test so that
//! nothing else in the process moves its RSS.

#[path = "common/rss.rs"]
mod rss;

use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rss::{MIB, TARGET_BYTES, assert_close, rss, rss_pool};
use zsmalloc::{Handle, PAGE_SIZE};

/// Contents that half of the objects copy.
const POPULAR: u64 = 1000;

/// The size of content `kind`: compressed pages as zram sees them, mostly 200..3600 bytes.
fn size_of(kind: u64) -> usize {
    let x = kind.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
    match x % 10 {
        0..=5 => 200 + (x % 1800) as usize,
        6..=8 => 2001 + (x % 1600) as usize,
        _ => 3601 + (x % 496) as usize,
    }
}

/// The bytes of content `kind`: its number, then a pattern of its own.
fn fill(buf: &mut [u8], kind: u64) {
    buf[..8].copy_from_slice(&kind.to_le_bytes());
    let b = (kind % 251) as u8;
    for (i, x) in buf[8..].iter_mut().enumerate() {
        *x = b ^ (i % 13) as u8;
    }
}

#[test]
fn folding_gives_pages_back_to_the_os() {
    let pool = rss_pool();
    let mut rng = StdRng::seed_from_u64(4);
    // Everything the test keeps is allocated and touched before the baseline.
    let max_objects = TARGET_BYTES / 1000;
    let mut objs = vec![(Handle::from_raw(u64::MAX), u64::MAX); max_objects];
    let mut buf = vec![0xFFu8; PAGE_SIZE];
    let base = rss();

    let (mut stored, mut n) = (0, 0);
    while stored < TARGET_BYTES {
        let kind = if rng.gen_range(0..2) == 0 {
            rng.gen_range(0..POPULAR)
        } else {
            POPULAR + n as u64
        };
        let size = size_of(kind);
        fill(&mut buf[..size], kind);
        let h = pool.malloc(size).unwrap();
        pool.write(h, &buf[..size]).unwrap();
        objs[n] = (h, kind);
        stored += size;
        n += 1;
    }
    let before = pool.total_pages();
    println!(
        "stored {n} objects, {:.1} MiB in {before} pages",
        stored as f64 / MIB
    );
    assert_close(
        "filled",
        rss().saturating_sub(base),
        before * PAGE_SIZE + pool.metadata_bytes(),
    );

    let start = Instant::now();
    let report = pool.fold();
    let took = start.elapsed();
    let gib = stored as f64 / (1u64 << 30) as f64;
    println!(
        "fold: {:.3} s for {gib:.2} GiB stored ({:.3} s per GiB): {report:?}",
        took.as_secs_f64(),
        took.as_secs_f64() / gib
    );
    pool.check_invariants().unwrap();
    let after = pool.total_pages();
    assert_eq!(before - after, report.pages_freed as usize);
    assert_eq!(pool.pages_folded(), report.pages_freed);
    assert_eq!(pool.pages_compacted(), 0);
    // Half of the objects were copies of a thousand contents: close to half the pages go.
    assert!(report.objects_folded as usize >= n / 2 - 2 * POPULAR as usize);
    assert!(after < before * 6 / 10, "{before} -> {after} pages");
    let s = pool.share_stats();
    println!(
        "{after} pages left; {} shared objects, {} extra handles; metadata {:.1} MiB",
        s.shared_objects,
        s.extra_handles,
        pool.metadata_bytes() as f64 / MIB
    );
    assert_close(
        "folded",
        rss().saturating_sub(base),
        after * PAGE_SIZE + pool.metadata_bytes(),
    );

    // A second pass only scans (hashes what is left, ~half): nothing to fold.
    let start = Instant::now();
    let again = pool.fold();
    println!(
        "second fold (scan only, {:.2} GiB left): {:.3} s",
        (after * PAGE_SIZE) as f64 / (1u64 << 30) as f64,
        start.elapsed().as_secs_f64()
    );
    assert_eq!(again.objects_folded, 0);

    for &(h, kind) in &objs[..n] {
        let size = size_of(kind);
        fill(&mut buf[..size], kind);
        assert!(pool.with_object(h, size, |b| b == &buf[..size]).unwrap());
    }
    for &(h, _) in &objs[..n] {
        pool.free(h).unwrap();
    }
    assert_eq!(pool.total_pages(), 0);
}
