//! The only module of this crate with `unsafe` code: a zeroed table from the OS, the
//! coarse clock, and the LZO decoder's fast loop ([`lzo`]).
//!
//! # Safety
//!
//! [`zeroed_atomics`] builds a boxed slice from `alloc_zeroed` with the slice's own layout;
//! all-zero bytes are a valid `AtomicU64`, and the box frees with that same layout. Its
//! pages are advised against transparent huge pages (`zsmalloc::sys::no_huge_pages`),
//! which changes no contents.

use std::sync::atomic::AtomicU64;

pub(crate) mod lzo;

/// `n` atomics, all 0, whose memory becomes resident only where it is first touched: a
/// large zeroed allocation comes from fresh anonymous pages, which the OS fills on demand.
/// So a table sized for a whole device (the slot table) costs memory only where it is used.
/// `None` when the memory cannot be had (the table is larger than the address space or
/// than the OS grants).
pub(crate) fn zeroed_atomics(n: usize) -> Option<Box<[AtomicU64]>> {
    if n == 0 {
        return Some(Box::new([]));
    }
    let layout = std::alloc::Layout::array::<AtomicU64>(n).ok()?;
    // SAFETY: `layout` has a non-zero size; the allocation is checked for null; zeroed bytes
    // are a valid `AtomicU64` (0); and `Box<[AtomicU64]>` frees with this very layout (an
    // array of `n` `AtomicU64` from the global allocator).
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<AtomicU64>();
        if ptr.is_null() {
            return None;
        }
        // Where the system's setting is `always`, the first touch of one slot would make
        // 2 MiB of the table resident, not 4 KiB.
        zsmalloc::sys::no_huge_pages(ptr.cast(), layout.size());
        Some(Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n)))
    }
}

/// Nanoseconds on the OS's monotonic clock at its coarse resolution (one timer tick, a few
/// milliseconds), which it serves from memory without reading a hardware clock. Idle
/// tracking counts in seconds and reads the clock on every access: the coarse read costs a
/// few nanoseconds where the precise one cost about 2% of a 4 KiB read here, and far more
/// where the clock source is not readable from user space (then each read is a system
/// call). 0 if the clock cannot be read (Linux has had it since 2.6.32).
pub(crate) fn coarse_nanos() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut ts) };
    match (rc, u64::try_from(ts.tv_sec), u64::try_from(ts.tv_nsec)) {
        (0, Ok(secs), Ok(nanos)) => secs.saturating_mul(1_000_000_000).saturating_add(nanos),
        _ => 0,
    }
}

/// Whole seconds since `start`, a reading of [`coarse_nanos`].
pub(crate) fn coarse_secs_since(start: u64) -> u64 {
    coarse_nanos().saturating_sub(start) / 1_000_000_000
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_coarse_clock_runs() {
        let before = super::coarse_nanos();
        assert!(before > 0, "the coarse clock could not be read");
        std::thread::sleep(std::time::Duration::from_millis(50));
        let after = super::coarse_nanos();
        // At most a tick (10 ms at the slowest timer) behind at either end.
        assert!(
            after >= before + 20_000_000,
            "50 ms passed, the clock moved {} ns",
            after.saturating_sub(before)
        );
    }

    #[test]
    fn the_table_takes_no_transparent_huge_pages() {
        // 32 MiB: as large as a 16 GiB device's table is half of.
        let table = super::zeroed_atomics(4 << 20).expect("table");
        let middle = table[2 << 20].as_ptr() as usize;
        match zsmalloc::sys::huge_pages_refused_at(middle) {
            Ok(refused) => assert!(refused, "the table may take huge pages"),
            Err(why) => println!("SKIPPED the_table_takes_no_transparent_huge_pages: {why}"),
        }
    }
}
