//! A SIGBUS that is no region's, sent by a process or raised by a real fault elsewhere (a
//! file mapping touched past the file's end), reaches the SIGBUS handler that was installed
//! before the first in-thread region; the region is served all the same. One test in a
//! binary of its own: it replaces the process-wide handler.

#![expect(
    unsafe_code,
    reason = "installs a SIGBUS handler and maps a file past its end"
)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use common::{PAGE, config_in, page_of, region_or_skip};
use uswap::FaultMode;

/// SIGBUS deliveries the test's own handler saw.
static SEEN: AtomicUsize = AtomicUsize::new(0);

/// The test's handler: counts, and for a fault maps an anonymous page over the faulting
/// one so that the retried access succeeds.
extern "C" fn mine(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    SEEN.fetch_add(1, Ordering::SeqCst);
    // SAFETY: the kernel's `siginfo_t`; the page replaced is the test's own file mapping,
    // past the file's end.
    unsafe {
        if (*info).si_code > 0 {
            let page = ((*info).si_addr() as usize) & !(PAGE - 1);
            libc::mmap(
                page as *mut libc::c_void,
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
        }
    }
}

#[test]
fn a_sigbus_outside_every_region_reaches_the_handler_that_was_there() {
    // SAFETY: installs the test's handler (the `SA_SIGINFO` signature) before any region
    // of this process exists; the region's handler then chains to it.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = mine as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGBUS, &sa, std::ptr::null_mut()), 0);
    }
    let Some(mut region) = region_or_skip(8 * PAGE, config_in(FaultMode::InThread, 16)) else {
        return;
    };
    region.write(0, &page_of(1)).unwrap();
    // A sent SIGBUS.
    // SAFETY: raising a signal whose handler is installed.
    assert_eq!(unsafe { libc::raise(libc::SIGBUS) }, 0);
    assert_eq!(SEEN.load(Ordering::SeqCst), 1);
    // A real fault elsewhere: a file mapping touched past the file's end.
    let file = tempfile_path();
    std::fs::write(&file, b"short").unwrap();
    let f = std::fs::File::open(&file).unwrap();
    // SAFETY: a fresh shared read-only mapping of two pages of a 5-byte file; the second
    // page lies past the end (SIGBUS on touch), and is unmapped below.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            2 * PAGE,
            libc::PROT_READ,
            libc::MAP_PRIVATE,
            std::os::fd::AsRawFd::as_raw_fd(&f),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED);
    // SAFETY: reading the mapping's second page: the kernel raises SIGBUS, the test's
    // handler maps a zero page there, and the read is retried.
    let byte = unsafe { std::ptr::read_volatile(map.cast::<u8>().add(PAGE)) };
    assert_eq!(byte, 0);
    assert_eq!(SEEN.load(Ordering::SeqCst), 2);
    // SAFETY: the mapping made above, not used again.
    unsafe { libc::munmap(map, 2 * PAGE) };
    std::fs::remove_file(&file).unwrap();
    // The region is still served in its thread.
    region.evict_oldest(1).unwrap();
    let mut buf = vec![0u8; PAGE];
    region.read(0, &mut buf).unwrap();
    assert!(buf == page_of(1));
    assert_eq!(SEEN.load(Ordering::SeqCst), 2);
}

fn tempfile_path() -> std::path::PathBuf {
    std::env::temp_dir().join(format!("uswap-sigbus-{}", std::process::id()))
}
