//! zbud's packing: two buddies per page in 64-byte chunks, first fit by the smallest
//! sufficient free-chunk count, emptied pages given back at once, stale handles refused;
//! and threads racing on one pool.

#[path = "common/churn.rs"]
mod churn;

use zsmalloc::{Backend, Error, PoolConfig, Zbud};

fn zbud() -> Zbud {
    Zbud::with_config(PoolConfig {
        page_cache_pages: 0,
        ..PoolConfig::default()
    })
    .unwrap()
}

#[test]
fn two_objects_share_a_page_and_a_whole_page_object_does_not() {
    let z = zbud();
    let a = z.malloc(2000).unwrap();
    let b = z.malloc(2048).unwrap();
    assert_eq!(z.total_pages(), 1, "2000 + 2048 bytes are 32 + 32 chunks");
    z.write(a, &[1u8; 2000]).unwrap();
    z.write(b, &[2u8; 2048]).unwrap();
    let mut out = vec![0u8; 2048];
    z.read(b, &mut out).unwrap();
    assert!(
        out.iter().all(|&x| x == 2),
        "the last buddy ends at the page's end"
    );
    z.read(a, &mut out[..2000]).unwrap();
    assert!(out[..2000].iter().all(|&x| x == 1));

    let whole = z.malloc(4096).unwrap();
    assert_eq!(z.total_pages(), 2);
    let tiny = z.malloc(1).unwrap();
    assert_eq!(
        z.total_pages(),
        3,
        "a 4096-byte object leaves no chunk free"
    );
    for h in [a, b, whole, tiny] {
        z.free(h).unwrap();
    }
    assert_eq!(z.total_pages(), 0);
    z.check_invariants().unwrap();
}

#[test]
fn chunks_are_64_bytes_so_2100_and_2100_do_not_fit() {
    let z = zbud();
    assert_eq!(z.footprint(2100).unwrap(), 2112);
    assert_eq!(z.footprint(1).unwrap(), 64);
    assert_eq!(z.footprint(4096).unwrap(), 4096);
    let a = z.malloc(2100).unwrap();
    let b = z.malloc(2100).unwrap();
    assert_eq!(z.total_pages(), 2, "33 + 33 chunks are more than 64");
    // 31 chunks still fit next to 33.
    let c = z.malloc(1984).unwrap();
    assert_eq!(z.total_pages(), 2);
    for h in [a, b, c] {
        z.free(h).unwrap();
    }
    z.check_invariants().unwrap();
}

#[test]
fn freeing_both_buddies_gives_the_page_back() {
    let z = zbud();
    let a = z.malloc(1000).unwrap();
    let b = z.malloc(1000).unwrap();
    let c = z.malloc(3000).unwrap();
    assert_eq!(z.total_pages(), 2);
    z.free(a).unwrap();
    assert_eq!(z.total_pages(), 2, "one buddy left keeps the page");
    z.free(b).unwrap();
    assert_eq!(z.total_pages(), 1, "both buddies freed: the page is gone");
    assert_eq!(z.cached_pages(), 0);
    // The freed handles stay refused, also once their frame holds new objects.
    let d = z.malloc(1000).unwrap();
    let e = z.malloc(4096).unwrap();
    for stale in [a, b] {
        assert!(matches!(z.free(stale), Err(Error::StaleHandle(_))));
        assert!(matches!(
            z.read(stale, &mut [0u8; 1]),
            Err(Error::StaleHandle(_))
        ));
    }
    for h in [c, d, e] {
        z.free(h).unwrap();
    }
    assert_eq!(z.total_pages(), 0);
    assert_eq!(z.objects(), 0);
    assert_eq!(z.compact(), 0, "zbud does not compact");
    z.check_invariants().unwrap();
}

#[test]
fn allocation_takes_the_smallest_sufficient_free_count_first() {
    let z = zbud();
    // Three full pages (each second object joins the page of the first) ...
    let mut keep = Vec::new();
    let mut gone = Vec::new();
    for (first, second) in [(3008, 1088), (1024, 3072), (2048, 2048)] {
        keep.push(z.malloc(first).unwrap());
        gone.push(z.malloc(second).unwrap());
    }
    assert_eq!(z.total_pages(), 3);
    // ... left with 17, 48 and 32 free chunks.
    for h in gone {
        z.free(h).unwrap();
    }
    assert_eq!(z.total_pages(), 3);
    // 16 chunks go to the page with 17 free, 32 to the one with 32: only then do 48 still
    // fit in the page with 48 free. Any other choice needs a new page.
    for size in [1024, 2048, 3072] {
        keep.push(z.malloc(size).unwrap());
    }
    assert_eq!(
        z.total_pages(),
        3,
        "first fit took the smallest sufficient count"
    );
    keep.push(z.malloc(64).unwrap());
    assert_eq!(z.total_pages(), 4, "every page was full");
    for h in keep {
        z.free(h).unwrap();
    }
    assert_eq!(z.total_pages(), 0);
    z.check_invariants().unwrap();
}

#[test]
fn threads_racing_keep_every_object_intact() {
    let z = zbud();
    churn::churn(&z, 4, 2000, false);
    assert!(z.metadata_bytes() > 0);
}
