//! The page source's own tests: runs zeroed, reused, cached, released and merged.

use super::fresh::WINDOW_PAGES;
use super::*;

#[test]
fn runs_are_zeroed_reused_and_released() {
    let src = PageSource::new(true, 0, false);
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
    let src = PageSource::new(true, 4, false);
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
    let src = PageSource::new(true, 4, false);
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
    let src = PageSource::new(true, 0, false);
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

#[test]
fn a_thread_keeps_freed_runs_in_its_slot_first_and_the_limit_holds_in_all() {
    // 1024 pages: each of the 16 slots keeps 32, the shared cache 512.
    let src = PageSource::new(true, 1024, false);
    assert_eq!((src.slots.limit, src.shared_limit), (32, 512));
    let runs: Vec<PageRun> = (0..300).map(|_| src.alloc(4).unwrap()).collect();
    let eighth = runs[7].bytes().as_ptr() as usize;
    drop(runs);
    // 8 runs (32 pages) in this thread's slot, 128 (512) shared; from the 137th release on,
    // each that found both full went back with part of the shared cache.
    assert_eq!(src.slots.own().cache.lock().pages, 32);
    let shared = src.inner.lock().cache.pages;
    assert!((256..=512).contains(&shared), "{shared} pages shared");
    let released = src.pages_released();
    assert!(released > 0, "what passes the limit goes back to the OS");
    assert_eq!(src.cached_pages() as u64 + released, 300 * 4);
    assert!(src.cached_pages() <= 1024);
    // A run is taken from the slot before the shared cache: the last one this thread freed
    // into it (runs are freed in order: the first 8 went to the slot).
    let again = src.alloc(4).unwrap();
    assert_eq!(src.slots.own().cache.lock().pages, 28);
    assert_eq!(src.inner.lock().cache.pages, shared);
    assert_eq!(again.bytes().as_ptr() as usize, eighth);
    drop(again);
    assert_eq!(src.slots.own().cache.lock().pages, 32);
    assert_eq!(src.trim(), 32 + shared);
    assert_eq!(src.cached_pages(), 0);
    assert_eq!(src.pages_live(), 0);
}

#[test]
fn runs_freed_by_other_threads_are_counted_once() {
    let src = PageSource::new(true, 1024, false);
    let runs: Vec<PageRun> = (0..64).map(|_| src.alloc(3).unwrap()).collect();
    assert_eq!(src.pages_live(), 192);
    // Freed by other threads (into their slots, or the shared cache), half each.
    std::thread::scope(|s| {
        let mut runs = runs.into_iter();
        let half: Vec<PageRun> = runs.by_ref().take(32).collect();
        let rest: Vec<PageRun> = runs.collect();
        s.spawn(move || drop(half));
        s.spawn(move || drop(rest));
    });
    assert_eq!(src.pages_live(), 0);
    assert_eq!(
        src.cached_pages(),
        192,
        "all of it fits the slots and shared cache"
    );
    // Taken back by this thread (from its slot if another thread's landed there, else from
    // the shared cache): the runs are live again.
    let back: Vec<PageRun> = (0..4).map(|_| src.alloc(3).unwrap()).collect();
    assert_eq!(src.pages_live(), 12);
    drop(back);
    assert_eq!(src.pages_live(), 0);
}

#[test]
fn arenas_take_no_transparent_huge_pages() {
    let src = PageSource::new(true, 0, false);
    let run = src.alloc(1).unwrap();
    match huge_pages_refused_at(run.bytes().as_ptr() as usize) {
        Ok(refused) => assert!(refused, "the arena may take huge pages"),
        Err(why) => println!("SKIPPED arenas_take_no_transparent_huge_pages: {why}"),
    }
}

/// Pages of `pages` from `addr` that are resident (`mincore`).
fn resident(addr: usize, pages: usize) -> usize {
    let mut vec = vec![0u8; pages];
    // SAFETY: `mincore` only reads the page tables of the range (inside a live arena) and
    // writes one byte per page into `vec`, which has room for them.
    let rc = unsafe {
        libc::mincore(
            addr as *mut libc::c_void,
            pages * PAGE_SIZE,
            vec.as_mut_ptr(),
        )
    };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 != 0).count()
}

#[test]
fn a_growing_source_faults_a_reserve_in_ahead_and_carves_runs_from_it() {
    // A cache limit of 1024 pages: a reserve of at most 256, faulted in 128 at a time.
    let src = PageSource::new(true, 1024, true);
    assert_eq!(src.ahead.max, 256);
    // A fresh run, taken from the arena: the source's thread is asked for a chunk.
    let first = src.alloc(4).unwrap();
    let start = std::time::Instant::now();
    while src.cached_pages() < 128 && start.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(src.cached_pages(), 128, "no chunk faulted in ahead");
    let window = src.inner.lock().reserve.addr;
    let table = WINDOW_PAGES * PAGE_SIZE;
    assert_ne!(
        window / table,
        first.bytes().as_ptr() as usize / table,
        "the chunk shares a page table with a thread's fresh pages"
    );
    assert_eq!(resident(window, 128), 128, "the reserve is not faulted in");
    assert_eq!(src.pages_live(), 4);
    // The next run comes from the window's front, resident and zero; the window, now under
    // half the bound, is extended by the next chunk.
    let second = src.alloc(16).unwrap();
    assert_eq!(second.bytes().as_ptr() as usize, window);
    assert!(second.bytes().iter().all(|&b| b == 0));
    while src.cached_pages() < 240 && start.elapsed() < std::time::Duration::from_secs(20) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(src.cached_pages(), 112 + 128, "the window not extended");
    assert_eq!(resident(window + 16 * PAGE_SIZE, 240), 240);
    // Trimmed: the reserve goes back to the OS with the cache.
    assert_eq!(src.trim(), 240);
    assert_eq!(src.cached_pages(), 0);
    assert_eq!(
        resident(window + 16 * PAGE_SIZE, 240),
        0,
        "the reserve stayed resident"
    );
    drop((first, second));
}

#[test]
fn no_reserve_while_released_runs_are_left_to_reuse() {
    // A limit of 64 pages: a reserve of at most 16, the shared cache 32, no slot keeps runs
    // of 4 pages.
    let src = PageSource::new(true, 64, true);
    let runs: Vec<PageRun> = (0..40).map(|_| src.alloc(4).unwrap()).collect();
    drop(runs);
    assert!(src.pages_released() > 0, "runs past the cache are released");
    src.trim();
    let start = std::time::Instant::now();
    while src.inner.lock().reserve.in_flight && start.elapsed() < std::time::Duration::from_secs(20)
    {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    assert_eq!(
        src.cached_pages(),
        0,
        "a chunk on its way at the trim was kept"
    );
    // Released runs cost no memory until reused, and are reused first: runs taken from them
    // ask for no chunk.
    let again: Vec<PageRun> = (0..40).map(|_| src.alloc(4).unwrap()).collect();
    let inner = src.inner.lock();
    assert!(!inner.reserve.in_flight, "a chunk asked for while reusing");
    assert_eq!(inner.reserve.pages, 0);
    drop(inner);
    // Once they are used up, the pool grows into fresh pages, and asks again.
    let mut more = Vec::new();
    let asked = loop {
        more.push(src.alloc(4).unwrap());
        let inner = src.inner.lock();
        if inner.reserve.in_flight || inner.reserve.pages > 0 {
            break inner.free.pages() == 0;
        }
        assert!(more.len() < 100, "no chunk asked for once the pool grew");
    };
    assert!(asked, "a chunk asked for while released runs were left");
    drop((again, more));
}

#[test]
fn threads_take_fresh_pages_from_windows_of_their_own() {
    let src = PageSource::new(true, 0, false);
    let table = WINDOW_PAGES * PAGE_SIZE;
    let addr = |run: &PageRun| run.bytes().as_ptr() as usize;
    // One thread's fresh runs follow each other in its window.
    let a: Vec<PageRun> = (0..3).map(|_| src.alloc(8).unwrap()).collect();
    assert_eq!(addr(&a[1]), addr(&a[0]) + 8 * PAGE_SIZE);
    assert_eq!(addr(&a[2]), addr(&a[1]) + 8 * PAGE_SIZE);
    // Another thread's, of another slot (threads are numbered in order of first use, and
    // other tests run threads meanwhile), lie under another page table.
    let mine = src.slots.own_number();
    let b: Vec<PageRun> = (0..4)
        .find_map(|_| {
            std::thread::scope(|s| {
                s.spawn(|| {
                    (src.slots.own_number() != mine)
                        .then(|| (0..3).map(|_| src.alloc(8).unwrap()).collect())
                })
                .join()
                .unwrap()
            })
        })
        .expect("four threads in a row took this thread's slot");
    for run in &b {
        assert!(
            a.iter().all(|mine| addr(mine) / table != addr(run) / table),
            "two threads' fresh runs share a page table"
        );
    }
    // A window ends on a page table's boundary; its rest, too short for a run, is listed
    // with the released runs and reused, not lost.
    let mut more = vec![src.alloc(16).unwrap()];
    let end = |runs: &Vec<PageRun>| addr(runs.last().unwrap()) + 16 * PAGE_SIZE;
    while end(&more).next_multiple_of(table) - end(&more) >= 16 * PAGE_SIZE {
        more.push(src.alloc(16).unwrap());
        assert!(more.len() < 100, "the window never ended");
    }
    let end = end(&more);
    let rest = (end.next_multiple_of(table) - end) / PAGE_SIZE;
    let next = src.alloc(16).unwrap();
    assert_eq!(
        addr(&next) % table,
        0,
        "the next window starts on a boundary"
    );
    if rest > 0 {
        let reused = src.alloc(rest).unwrap();
        assert_eq!(addr(&reused), end, "the window's rest was not reused");
        more.push(reused);
    }
    drop((a, b, more, next));
}

#[test]
fn refilling_after_a_release_reuses_the_address_space() {
    // A cache limit of 256 pages: a reserve of at most 64, faulted in 32 at a time.
    let src = PageSource::new(true, 256, true);
    let settle = || {
        let start = std::time::Instant::now();
        while src.inner.lock().reserve.in_flight
            && start.elapsed() < std::time::Duration::from_secs(20)
        {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    };
    // Fill, release everything, fill again with the same: the second fill reuses the
    // released address space, while the reserve faulted in ahead is left over from the
    // first (it used to take the reserve first and refill it from fresh address space,
    // so every round grew the arenas by what it stored).
    let mut reserved = Vec::new();
    for _ in 0..4 {
        let runs: Vec<PageRun> = (0..1000)
            .map(|_| {
                let run = src.alloc(8).unwrap();
                settle();
                run
            })
            .collect();
        drop(runs);
        settle();
        reserved.push(src.inner.lock().bump);
        assert!(src.reserved_bytes() <= ARENA_PAGES * PAGE_SIZE);
    }
    assert!(
        reserved[3] <= reserved[0] + 2 * WINDOW_PAGES,
        "the arena grew from {} to {} pages over rounds of the same fill",
        reserved[0],
        reserved[3]
    );
}
