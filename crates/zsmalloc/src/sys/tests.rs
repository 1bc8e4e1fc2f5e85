//! The page source's own tests: runs zeroed, reused, cached, released and merged.

use super::*;

#[test]
fn runs_are_zeroed_reused_and_released() {
    let src = PageSource::new(true, 0);
    let mut run = src.alloc(3).unwrap();
    assert!(run.bytes().iter().all(|&b| b == 0));
    run.bytes_mut()[5000] = 7;
    let addr = run.bytes().as_ptr() as usize;
    assert_eq!(src.pages_live(), 3);
    drop(run);
    assert_eq!(src.pages_live(), 0);
    let again = src.alloc(3).unwrap();
    assert_eq!(
        again.bytes().as_ptr() as usize,
        addr,
        "freed runs are reused"
    );
    assert_eq!(again.bytes()[5000], 0, "released pages read back as zero");
}

#[test]
fn cache_keeps_a_bounded_number_of_pages_resident() {
    let src = PageSource::new(true, 4);
    let mut a = src.alloc(2).unwrap();
    a.bytes_mut()[0] = 9;
    let b = src.alloc(3).unwrap();
    drop(a);
    assert_eq!(src.cached_pages(), 2);
    drop(b);
    assert_eq!(
        src.cached_pages(),
        2,
        "3 more pages would pass the limit of 4"
    );
    let again = src.alloc(2).unwrap();
    assert_eq!(again.bytes()[0], 9, "a cached run is reused as it was");
    assert_eq!(src.cached_pages(), 0);
    drop(again);
    assert_eq!(src.trim(), 2);
    assert_eq!(src.cached_pages(), 0);
}

#[test]
fn a_run_that_overflows_the_cache_goes_back_with_half_of_it() {
    let src = PageSource::new(true, 4);
    let mut runs: Vec<PageRun> = (0..5).map(|_| src.alloc(2).unwrap()).collect();
    for r in &mut runs {
        r.bytes_mut()[0] = 9;
    }
    let mut runs = runs.into_iter();
    let (a, b, c, d, e) = (
        runs.next().unwrap(),
        runs.next().unwrap(),
        runs.next().unwrap(),
        runs.next().unwrap(),
        runs.next().unwrap(),
    );
    drop(a);
    drop(c);
    assert_eq!((src.cached_pages(), src.pages_released()), (4, 0));
    // The cache is full: `e` goes back, and with it `c` (apart from `e`: two ranges
    // in one call), leaving half the limit cached.
    drop(e);
    assert_eq!((src.cached_pages(), src.pages_released()), (2, 4));
    let cached = src.alloc(2).unwrap();
    assert_eq!(
        cached.bytes()[0],
        9,
        "the run left cached is reused as it was"
    );
    let again: Vec<PageRun> = (0..2).map(|_| src.alloc(2).unwrap()).collect();
    for run in &again {
        assert_eq!(run.bytes()[0], 0, "released pages read back as zero");
    }
    drop((b, d, cached, again));
}

#[test]
fn released_neighbours_merge_and_serve_longer_runs() {
    let src = PageSource::new(true, 0);
    let runs: Vec<PageRun> = (0..3).map(|_| src.alloc(8).unwrap()).collect();
    let first = runs[0].bytes().as_ptr() as usize;
    let reserved = src.reserved_bytes();
    // Freed in an order that merges from both sides.
    let mut runs = runs.into_iter();
    let (a, b, c) = (
        runs.next().unwrap(),
        runs.next().unwrap(),
        runs.next().unwrap(),
    );
    drop(c);
    drop(a);
    drop(b);
    // One 24-page run: a 16-page request fits at its start, with no new address space.
    let long = src.alloc(16).unwrap();
    assert_eq!(long.bytes().as_ptr() as usize, first);
    // Short runs split off the tail, and merge back when freed.
    let short = src.alloc(3).unwrap();
    assert_eq!(short.bytes().as_ptr() as usize, first + 16 * PAGE_SIZE);
    drop(short);
    drop(long);
    let whole = src.alloc(16).unwrap();
    let rest = src.alloc(8).unwrap();
    assert_eq!(whole.bytes().as_ptr() as usize, first);
    assert_eq!(rest.bytes().as_ptr() as usize, first + 16 * PAGE_SIZE);
    assert_eq!(src.reserved_bytes(), reserved, "no new arena");
    assert_eq!(src.pages_live(), 24);
}
