//! Faults served in the faulting thread (`FaultMode::InThread`): threads racing for the same
//! evicted pages each see their bytes; a system call handed a missing page gets `EFAULT`
//! (handler threads serve it instead). `sigbus_chain.rs`, a binary of its own, checks that
//! a SIGBUS that is no region's reaches the handler that was there before.

#![expect(unsafe_code, reason = "calls read(2) on region memory")]

mod common;

use common::{PAGE, config_in, page_of, region_or_skip};
use uswap::FaultMode;

#[test]
fn threads_racing_for_the_same_evicted_pages_each_see_their_bytes() {
    let pages = 256;
    let Some(mut region) = region_or_skip(pages * PAGE, config_in(FaultMode::InThread, 32)) else {
        return;
    };
    for p in 0..pages {
        region.write(p * PAGE, &page_of(p as u64)).unwrap();
    }
    for round in 0..3 {
        region.evict_oldest(pages).unwrap();
        let region = &region;
        std::thread::scope(|s| {
            for t in 0..4 {
                s.spawn(move || {
                    let mut buf = vec![0u8; PAGE];
                    // Every thread walks all pages, each from its own starting point, so
                    // that several fault on one page at the same time.
                    for i in 0..pages {
                        let p = (i + t * 7) % pages;
                        region.read(p * PAGE, &mut buf).unwrap();
                        assert!(
                            buf == page_of(p as u64),
                            "round {round} thread {t} page {p}"
                        );
                    }
                });
            }
        });
    }
    let s = region.stats();
    eprintln!("{}", s.format());
    assert_eq!(s.failed, None);
    assert!(s.pgmajfault > 0 && s.pswpin > 0, "{s:?}");
}

/// `read(2)` of 16 bytes from /dev/zero into the region's never-touched page 0.
fn read_into_missing_page(region: &mut uswap::Region) -> std::io::Result<usize> {
    let zero = std::fs::File::open("/dev/zero").unwrap();
    // SAFETY: 16 bytes at the start of the region's own mapping, which no Rust reference
    // borrows now (the region is borrowed mutably here).
    let n = unsafe {
        libc::read(
            std::os::fd::AsRawFd::as_raw_fd(&zero),
            region.as_mut_ptr().cast(),
            16,
        )
    };
    if n < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

#[test]
fn a_system_call_into_a_missing_page_fails_in_thread_and_is_served_by_handlers() {
    let Some(mut region) = region_or_skip(4 * PAGE, config_in(FaultMode::InThread, 16)) else {
        return;
    };
    let err = read_into_missing_page(&mut region).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EFAULT), "{err}");
    // Once touched from user mode, the page is there for system calls too.
    region.write(0, &[1]).unwrap();
    assert_eq!(read_into_missing_page(&mut region).unwrap(), 16);

    let mut region = region_or_skip(4 * PAGE, config_in(FaultMode::Handlers, 16)).unwrap();
    assert_eq!(read_into_missing_page(&mut region).unwrap(), 16);
}

/// An in-thread region of `pages` pages with room for all of them (nothing is evicted
/// but by the caller), each written with its pattern, then all evicted.
fn all_evicted(pages: usize) -> Option<uswap::Region> {
    let mut region = region_or_skip(pages * PAGE, config_in(FaultMode::InThread, pages))?;
    for p in 0..pages {
        region.write(p * PAGE, &page_of(p as u64)).unwrap();
    }
    assert_eq!(region.evict_oldest(pages).unwrap(), pages);
    Some(region)
}

#[test]
fn slots_of_pages_read_back_in_thread_are_freed_by_the_evictor() {
    let pages = 256;
    let Some(region) = all_evicted(pages) else {
        return;
    };
    let stored = region.device().mm_stat().orig_data_size;
    assert_eq!(stored, (pages * PAGE) as u64);
    let mut buf = vec![0u8; PAGE];
    for p in 0..pages {
        region.read(p * PAGE, &mut buf).unwrap();
        assert!(buf == page_of(p as u64), "page {p}");
    }
    // The faulting thread only marked the slots stale; the evictor, woken per batch of
    // them, frees them. Whole batches go at once; what is left of the last one goes at the
    // evictor's next look.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while region.device().mm_stat().orig_data_size != 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let m = region.device().mm_stat();
    assert_eq!(m.orig_data_size, 0, "{}", m.format());
    let s = region.stats();
    assert_eq!((s.resident_pages, s.evicted_pages), (pages as u64, 0));
    // And the pages are intact after their slots went.
    for p in 0..pages {
        region.read(p * PAGE, &mut buf).unwrap();
        assert!(buf == page_of(p as u64), "page {p} after the frees");
    }
}

#[test]
fn a_discard_frees_the_stale_slots_of_its_pages_at_once() {
    let Some(region) = all_evicted(64) else {
        return;
    };
    let mut buf = vec![0u8; PAGE];
    // Fewer than a batch read back: their slots wait for the evictor's next quiet look.
    for p in 0..8 {
        region.read(p * PAGE, &mut buf).unwrap();
    }
    region.discard(0, 8 * PAGE).unwrap();
    // What is left on the device is the 56 pages never read back, nothing of the 8.
    let m = region.device().mm_stat();
    assert_eq!(m.orig_data_size, (56 * PAGE) as u64, "{}", m.format());
    region.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0));
}
