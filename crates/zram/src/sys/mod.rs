//! The only module of this crate with `unsafe` code: a zeroed table from the OS, the
//! coarse clock, the LZO decoder's fast loop ([`lzo`]) and liblz4's high-compression
//! encoder with a kept state ([`lz4`]).
//!
//! # Safety
//!
//! [`ZeroedAtomics`] lends its `zsmalloc::sys::Arena` as `len` `AtomicU64`s: the arena is
//! at least that many bytes (at most `isize::MAX`, as its `Layout` checked), page-aligned,
//! zero-filled by the OS (all-zero bytes are a valid `AtomicU64`) and mapped until the
//! value, which owns it, is dropped; the slice lent lives no longer than the value.

use std::sync::atomic::AtomicU64;

use zsmalloc::sys::Arena;

pub(crate) mod lz4;
pub(crate) mod lzo;

/// `len` atomics, all 0, in memory of their own from the OS, which becomes resident only
/// where it is first touched. So a table sized for a whole device (the slot table) costs
/// memory only where it is used.
///
/// The memory is mapped here rather than taken from the allocator: glibc's `calloc` serves
/// a large block from its heap once a freed block has raised its mmap threshold (up to 32
/// MiB), and then clears all of it, which made a 2 GiB device's 8 MiB table resident at
/// once (`the_table_is_not_resident_after_the_heap_grew`).
#[derive(Debug)]
pub(crate) struct ZeroedAtomics {
    /// None for no atomics (a mapping cannot be empty).
    arena: Option<Arena>,
    len: usize,
}

impl ZeroedAtomics {
    /// `None` when the memory cannot be had (larger than the address space, or than the OS
    /// grants: the mapping is counted against the commit limit at once, as an allocation
    /// would be).
    pub(crate) fn new(len: usize) -> Option<Self> {
        if len == 0 {
            return Some(Self { arena: None, len });
        }
        // At most `isize::MAX` bytes, as a slice must be.
        let bytes = std::alloc::Layout::array::<AtomicU64>(len).ok()?.size();
        let arena = Arena::map(bytes, true).ok()?;
        Some(Self {
            arena: Some(arena),
            len,
        })
    }
}

impl std::ops::Deref for ZeroedAtomics {
    type Target = [AtomicU64];

    fn deref(&self) -> &[AtomicU64] {
        match &self.arena {
            None => &[],
            // SAFETY: see the module's documentation.
            Some(arena) => unsafe {
                std::slice::from_raw_parts(arena.as_ptr().cast::<AtomicU64>(), self.len)
            },
        }
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

/// Minor page faults the calling thread has taken so far.
#[cfg(test)]
pub(crate) fn thread_minor_faults() -> u64 {
    // SAFETY: `getrusage` writes one `rusage` into the zeroed value it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `RUSAGE_THREAD` counts the calling thread.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, &raw mut usage) };
    assert_eq!(rc, 0, "getrusage: {}", std::io::Error::last_os_error());
    usage.ru_minflt as u64
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
        let table = super::ZeroedAtomics::new(4 << 20).expect("table");
        let middle = table[2 << 20].as_ptr() as usize;
        match zsmalloc::sys::huge_pages_refused_at(middle) {
            Ok(refused) => assert!(refused, "the table may take huge pages"),
            Err(why) => println!("SKIPPED the_table_takes_no_transparent_huge_pages: {why}"),
        }
    }

    /// Pages of the `len` bytes from `addr` that are resident (`mincore`).
    fn resident_pages(addr: usize, len: usize) -> usize {
        let start = addr / crate::PAGE_SIZE * crate::PAGE_SIZE;
        let pages = (addr + len - start).div_ceil(crate::PAGE_SIZE);
        let mut vec = vec![0u8; pages];
        // SAFETY: `mincore` only reads the page tables of the range, which lies in a live
        // mapping, and writes one byte per page into `vec`, which has one per page.
        let rc = unsafe {
            libc::mincore(
                start as *mut libc::c_void,
                pages * crate::PAGE_SIZE,
                vec.as_mut_ptr(),
            )
        };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        vec.iter().filter(|&&b| b & 1 != 0).count()
    }

    #[test]
    fn the_table_is_not_resident_after_the_heap_grew() {
        // Freeing a block the allocator mapped on its own raises glibc's mmap threshold to
        // the block's size; a block below it then comes from the heap, and a heap block
        // freed and cleared again is resident throughout.
        let big = std::hint::black_box(vec![1u8; 30 << 20]);
        drop(big);
        let used = std::hint::black_box(vec![1u8; 8 << 20]);
        drop(used);
        // 8 MiB: a 2 GiB device's table.
        let table = super::ZeroedAtomics::new(1 << 20).expect("table");
        let resident = resident_pages(table.as_ptr() as usize, 8 << 20);
        assert!(
            resident == 0,
            "{resident} of the new table's 2048 pages are resident"
        );
        // It is used as atomics, and only touched pages become resident.
        table[1000].store(7, std::sync::atomic::Ordering::Relaxed);
        table[(1 << 20) - 1].store(9, std::sync::atomic::Ordering::Relaxed);
        assert_eq!(table[1000].load(std::sync::atomic::Ordering::Relaxed), 7);
        assert_eq!(table[999].load(std::sync::atomic::Ordering::Relaxed), 0);
        assert_eq!(resident_pages(table.as_ptr() as usize, 8 << 20), 2);
    }

    #[test]
    fn an_empty_table_is_empty() {
        let table = super::ZeroedAtomics::new(0).expect("table");
        assert!(table.is_empty());
    }
}
