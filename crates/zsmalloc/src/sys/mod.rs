//! The only module of this crate with `unsafe` code: anonymous memory from the OS, and
//! objects on the system heap (`malloc`).
//!
//! # Safety
//!
//! Contract upheld here, relied on by the rest of the crate (which is `unsafe`-free):
//! - An [`Arena`] is one private anonymous `mmap` (zero-filled until written), unmapped
//!   only when the arena is dropped; it lends no access to its bytes, only their address.
//!   The page source's arenas (`MAP_NORESERVE`) are owned by [`PageSource`] and live at
//!   least as long as every [`PageRun`] carved from them (each run holds an `Arc` of its
//!   source).
//! - A [`PageRun`] is the *unique* owner of `pages` consecutive pages of one arena: the page
//!   source hands out each page range to at most one live run. Therefore `&PageRun` may
//!   lend `&[u8]` and `&mut PageRun` may lend `&mut [u8]` over exactly that range: Rust's
//!   aliasing rules on the run carry over to the memory.
//! - Pages of the reserve (`ahead.rs`) belong to no run: a chunk is claimed from the arena
//!   under the source's lock, faulted in by the source's thread alone, then published, and
//!   `alloc` carves runs from it under the lock, as from the arena.
//! - When a run is dropped, its pages are given back to the OS (`MADV_DONTNEED`, so they
//!   read as zeroes afterwards) before the range is recorded as free for reuse.
//! - A [`HeapObject`] is the unique owner of one live `malloc` allocation of `len`
//!   initialised bytes, freed exactly once, when it is dropped.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::sync::Mutex;

mod ahead;
mod cache;
mod free;
mod fresh;
mod thp;

use ahead::{Ahead, Reserve};
use cache::{RunCache, SLOTS, Slots};
use free::FreeRuns;
use fresh::Windows;
pub use thp::{huge_pages_refused_at, no_huge_pages};

/// Bytes in one page: the OS's page, of which runs are made.
pub const PAGE_SIZE: usize = 4096;

/// Longest run handed out, in pages (the longest zspage: the kernel's largest chain size).
pub const MAX_RUN_PAGES: usize = 16;

/// Pages in one arena reservation (256 MiB of address space).
const ARENA_PAGES: usize = 1 << 16;

/// One private anonymous mapping, zero-filled until written, advised against transparent
/// huge pages, unmapped when dropped: what the page source carves runs from, and zram's
/// slot table.
#[derive(Debug)]
pub struct Arena {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the arena is plain anonymous memory; access to its bytes is governed by PageRun
// ownership, not by the arena itself.
unsafe impl Send for Arena {}
// SAFETY: as above; `Arena` exposes no access to its bytes.
unsafe impl Sync for Arena {}

impl Arena {
    /// `len` bytes (more than 0). With `reserve`, counted against the system's commit limit
    /// at once, as an allocation is (so one larger than the system can hold is refused
    /// now); without it (`MAP_NORESERVE`), only as its pages are used.
    pub fn map(len: usize, reserve: bool) -> std::io::Result<Self> {
        let noreserve = if reserve { 0 } else { libc::MAP_NORESERVE };
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | noreserve,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(std::io::Error::last_os_error)?;
        // Runs are a few pages each, faulted in and given back page by page: where the
        // system's setting is `always`, a huge page faulted in for one run would be split by
        // the first release and stay whole in memory, outside the process's RSS, until the
        // kernel's deferred split runs under memory pressure (measured: 64 of them, 128 MiB,
        // kept after the device was discarded).
        no_huge_pages(base.as_ptr(), len);
        Ok(Self { base, len })
    }

    /// The first byte (page-aligned), mapped until the arena is dropped.
    pub fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        // SAFETY: `base..base+len` is exactly the mapping made in `map`; no run outlives
        // the page source that owns this arena.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.len);
        }
    }
}

#[derive(Debug, Default)]
struct SourceInner {
    arenas: Vec<Arena>,
    /// Pages already carved from the last arena (into windows).
    bump: usize,
    /// Each thread slot's window of fresh pages, and the reserve's (`fresh.rs`).
    windows: Windows,
    /// Released runs (no memory behind them), coalesced.
    free: FreeRuns,
    /// Resident free runs kept for immediate reuse: the shared cache.
    cache: RunCache,
    /// Fresh pages faulted in ahead (`ahead.rs`).
    reserve: Reserve,
    /// Pages given back to the OS so far.
    pages_released: u64,
}

/// Hands out runs of consecutive pages from large anonymous arenas and takes them back.
///
/// A freed run is given back to the OS at once (`MADV_DONTNEED`), except that up to
/// `cache_limit` pages of freed runs stay resident for immediate reuse, as the kernel's
/// per-cpu page lists do: this spares a syscall, a TLB shootdown and a refault per zspage in
/// alloc/free churn. Half of that may be kept in small per-thread slots (`cache.rs`), which
/// a thread tries before the shared cache, so that threads churning zspages do not all take
/// one lock. (So one thread alone keeps at most its slot and the shared half: 17/32 of the
/// limit. Letting a thread use the other slots when both are full or empty cost the 2-thread
/// churn about 0.04 of its 2/1 ratio in four alternations: their cache lines move between
/// CPUs again.) A run that finds its slot and the shared cache full goes back with half the
/// shared cache (at most `MAX_BATCH` runs), in one call. While the pool grows into fresh
/// pages, a thread of the source's own faults the next ones in ahead (`ahead.rs`). Cached
/// pages, the reserve faulted in ahead among them, are reported
/// ([`cached_pages`](Self::cached_pages)) and can be released at any time
/// ([`trim`](Self::trim)).
#[derive(Debug)]
pub struct PageSource {
    inner: Mutex<SourceInner>,
    slots: Slots,
    populate: bool,
    /// The shared cache's limit: `cache_limit` less what the slots may keep.
    shared_limit: usize,
    ahead: Ahead,
}

impl PageSource {
    /// A page source. With `populate`, every new run is faulted in at once (one
    /// `MADV_POPULATE_WRITE`), so the process holds the pages the runs hold and the cached
    /// ones, no more, and, with `fault_ahead` too, up to a quarter of `cache_limit` (at most
    /// 256) fresh pages are faulted in ahead while the pool grows (`ahead.rs`; counted as
    /// cached). `cache_limit` bounds the pages of freed runs kept resident for reuse.
    pub fn new(populate: bool, cache_limit: usize, fault_ahead: bool) -> Arc<Self> {
        let slots = Slots::new(cache_limit);
        Arc::new(Self {
            inner: Mutex::new(SourceInner::default()),
            shared_limit: cache_limit - slots.limit * SLOTS,
            slots,
            populate,
            ahead: Ahead::new(fault_ahead, populate, cache_limit),
        })
    }

    /// A run of `pages` consecutive pages (1..=16); its contents are unspecified.
    pub fn alloc(self: &Arc<Self>, pages: usize) -> std::io::Result<PageRun> {
        debug_assert!((1..=MAX_RUN_PAGES).contains(&pages));
        // The slot's cache stays locked (its lock is the thread's own) while the shared
        // source is asked: no one holding the source's lock takes a slot's.
        let slot = self.slots.own();
        let mut cache = slot.cache.lock();
        let mut resident = true;
        let mut wake = false;
        let addr = match cache.take(pages) {
            Some(addr) => addr,
            None => {
                let mut inner = self.inner.lock();
                let mut fresh = true;
                let addr = if let Some(addr) = inner.cache.take(pages) {
                    fresh = false;
                    addr
                } else if let Some(addr) = inner.take_reserved(pages, self.shared_limit) {
                    addr
                } else if let Some(addr) = inner.take_free(pages) {
                    (resident, fresh) = (false, false);
                    addr
                } else {
                    resident = false;
                    inner.claim_fresh(pages, self.slots.own_number())?
                };
                wake = self.ahead.wanted(&mut inner, fresh);
                addr
            }
        };
        drop(cache);
        if wake {
            self.ahead.wake(self);
        }
        slot.took(pages);
        let ptr = NonNull::new(addr as *mut u8).ok_or_else(std::io::Error::last_os_error)?;
        if self.populate && !resident {
            populate(ptr, pages * PAGE_SIZE);
        }
        Ok(PageRun {
            ptr,
            pages,
            source: Arc::clone(self),
        })
    }

    /// Pages held by live runs right now: exact when no other thread is taking or giving
    /// back a run meanwhile; otherwise a run on its way may be missed (so a device's
    /// `mem_limit` check on afmalloc or zbud, which counts these pages, may let an object
    /// more in under concurrent writers).
    pub fn pages_live(&self) -> usize {
        self.slots.pages_live()
    }

    /// Address space reserved in arenas, in bytes (not memory: untouched or released pages
    /// cost nothing).
    #[cfg(test)]
    fn reserved_bytes(&self) -> usize {
        self.inner.lock().arenas.iter().map(|a| a.len).sum()
    }

    /// Pages kept resident outside live runs: freed runs kept for reuse (in the slots and
    /// the shared cache) and the reserve of fresh pages faulted in ahead.
    pub fn cached_pages(&self) -> usize {
        let slots: usize = self.slots.iter().map(|s| s.cache.lock().pages).sum();
        let inner = self.inner.lock();
        slots + inner.cache.pages + inner.reserve.pages
    }

    /// Gives every cached run back to the OS; returns the pages released.
    pub fn trim(&self) -> usize {
        let mut runs = Vec::new();
        for slot in self.slots.iter() {
            slot.cache.lock().drain_into(&mut runs);
        }
        {
            let mut inner = self.inner.lock();
            inner.cache.drain_into(&mut runs);
            inner.reserve.drain_into(&mut runs);
        }
        self.give_back(&runs)
    }

    /// Gives runs that no run owns and no list holds back to the OS and lists them as
    /// released; returns their pages.
    fn give_back(&self, runs: &[(usize, usize)]) -> usize {
        dont_need_runs(runs);
        let released = runs.iter().map(|&(_, pages)| pages).sum();
        let mut inner = self.inner.lock();
        for &(addr, pages) in runs {
            inner.free_run(addr, pages);
        }
        inner.pages_released += released as u64;
        released
    }

    /// Takes a run back: into the thread's slot while it has room, else into the shared
    /// cache while that has room; otherwise the run goes back to the OS together with
    /// enough of the shared cache's runs (at most [`MAX_BATCH`] in all) to bring it down to
    /// half its limit, in one call where the kernel takes a vector of ranges. Each call that
    /// drops pages the process has mapped flushes them from the TLB of every CPU it runs on
    /// (an interrupt on each): releasing in batches costs one flush per batch, not one per
    /// zspage.
    fn release(&self, ptr: NonNull<u8>, pages: usize) {
        let addr = ptr.as_ptr() as usize;
        {
            let slot = self.slots.own();
            slot.gave(pages);
            if slot.cache.lock().put(addr, pages, self.slots.limit) {
                return;
            }
        }
        let batch = {
            let mut inner = self.inner.lock();
            if inner.cache.put(addr, pages, self.shared_limit) {
                return;
            }
            let mut batch = vec![(addr, pages)];
            inner
                .cache
                .shed(self.shared_limit / 2, &mut batch, MAX_BATCH);
            batch
        };
        self.give_back(&batch);
    }

    /// Bytes of bookkeeping the source holds: its lists of free and cached runs and of
    /// arenas (not the arenas' memory), and its slots.
    pub fn metadata_bytes(&self) -> usize {
        let slots: usize = self.slots.iter().map(|s| s.cache.lock().capacity()).sum();
        let inner = self.inner.lock();
        let listed: usize = inner.free.capacity() + inner.cache.capacity();
        (listed + slots) * std::mem::size_of::<usize>()
            + inner.arenas.capacity() * std::mem::size_of::<Arena>()
            + SLOTS * std::mem::size_of::<crossbeam_utils::CachePadded<cache::Slot>>()
    }

    /// Pages given back to the OS so far (released runs and trimmed cache).
    pub fn pages_released(&self) -> u64 {
        self.inner.lock().pages_released
    }
}

impl Drop for PageSource {
    fn drop(&mut self) {
        self.ahead.stop();
    }
}

/// The most runs one release gives back together: a bound on the burst of `madvise`
/// calls where the kernel refuses a vector of ranges (before Linux 6.13).
const MAX_BATCH: usize = 64;

/// Gives free ranges' memory back to the OS: `(address, pages)` runs, each no run's any
/// more, inside mapped arenas; neighbours are joined first. A failure is left alone: the
/// pages stay resident until the range is reused or released again.
fn dont_need_runs(runs: &[(usize, usize)]) {
    let mut ranges: Vec<(usize, usize)> = runs
        .iter()
        .map(|&(addr, pages)| (addr, pages * PAGE_SIZE))
        .collect();
    ranges.sort_unstable();
    ranges.dedup_by(|next, joined| {
        let meets = joined.0 + joined.1 == next.0;
        if meets {
            joined.1 += next.1;
        }
        meets
    });
    // SAFETY: free runs inside mapped arenas, which no `PageRun` owns any more (they are
    // being released, or were taken out of the cache under the lock).
    let _ = unsafe { dont_need_ranges(&ranges) };
}

/// `MADV_DONTNEED` of `ranges`, each `(address, bytes)`, on this process: several in one
/// `process_madvise` call where the kernel takes it (at most `IOV_MAX`, 1024, ranges; Linux
/// 6.13 takes any advice on the caller's own memory, and 6.16 flushes the TLB once for the
/// whole call, so scattered ranges cost one TLB shootdown, not one each); otherwise, and
/// for a single range, one `madvise` each (dropping a range twice is harmless). Returns the
/// first `madvise` error.
///
/// # Safety
///
/// Every range must be mapped memory of this process whose bytes no live Rust reference
/// reads or writes: dropped anonymous pages read as zeroes (or fault anew) afterwards.
pub unsafe fn dont_need_ranges(ranges: &[(usize, usize)]) -> std::io::Result<()> {
    // SAFETY: the caller's contract.
    if ranges.len() > 1 && unsafe { dont_need_vectored(ranges) } {
        return Ok(());
    }
    for &(addr, len) in ranges {
        // SAFETY: the caller's contract.
        if unsafe { libc::madvise(addr as *mut libc::c_void, len, libc::MADV_DONTNEED) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// `process_madvise(MADV_DONTNEED)` of `ranges` on this process; whether it dropped them
/// all (older kernels refuse it).
///
/// # Safety
///
/// As [`dont_need_ranges`].
unsafe fn dont_need_vectored(ranges: &[(usize, usize)]) -> bool {
    if ranges.len() > 1024 {
        return false;
    }
    let iov: Vec<libc::iovec> = ranges
        .iter()
        .map(|&(addr, len)| libc::iovec {
            iov_base: addr as *mut libc::c_void,
            iov_len: len,
        })
        .collect();
    let total: usize = ranges.iter().map(|&(_, len)| len).sum();
    // SAFETY: `pidfd_open` on this process's own id creates a descriptor and touches no
    // memory; it is closed below.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getpid(), 0) };
    let Some(pidfd) = libc::c_int::try_from(pidfd).ok().filter(|&fd| fd >= 0) else {
        return false;
    };
    // SAFETY: the ranges may be dropped (the caller's contract); `iov` is read by the
    // kernel during the call only.
    let n = unsafe {
        libc::syscall(
            libc::SYS_process_madvise,
            pidfd,
            iov.as_ptr(),
            iov.len(),
            libc::MADV_DONTNEED,
            0,
        )
    };
    // SAFETY: `pidfd` was opened above and is not used after this.
    unsafe { libc::close(pidfd) };
    usize::try_from(n).ok() == Some(total)
}

/// Faults a range in for writing, so its pages are resident right away.
fn populate(ptr: NonNull<u8>, len: usize) {
    // SAFETY: `ptr..ptr+len` is a run just handed out, owned by the caller, or a chunk
    // claimed for the reserve, which no run owns yet, inside a live arena; populating does
    // not change its contents (fresh or DONTNEED'd pages are zero).
    let rc = unsafe { libc::madvise(ptr.as_ptr().cast(), len, libc::MADV_POPULATE_WRITE) };
    if rc != 0 {
        // Kernels before 5.14: touch one byte per page instead.
        for off in (0..len).step_by(PAGE_SIZE) {
            // SAFETY: inside the run or chunk, which the caller owns exclusively; writing
            // the zero that is already there.
            unsafe { ptr.as_ptr().add(off).write_volatile(0) };
        }
    }
}

/// Exclusive ownership of `pages` consecutive pages; dropping it gives them back to the OS.
#[derive(Debug)]
pub struct PageRun {
    ptr: NonNull<u8>,
    pages: usize,
    source: Arc<PageSource>,
}

// SAFETY: a PageRun uniquely owns its memory, like a Box<[u8]>.
unsafe impl Send for PageRun {}
// SAFETY: shared access only lends `&[u8]`, like `&Box<[u8]>`.
unsafe impl Sync for PageRun {}

impl PageRun {
    /// Number of pages in the run.
    pub fn pages(&self) -> usize {
        self.pages
    }

    /// The run's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the run uniquely owns this mapped range (module contract); the borrow
        // of `self` keeps it alive and excludes `&mut` access for the slice's lifetime.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.pages * PAGE_SIZE) }
    }

    /// The run's bytes, mutably.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.pages * PAGE_SIZE) }
    }
}

impl Drop for PageRun {
    fn drop(&mut self) {
        self.source.release(self.ptr, self.pages);
    }
}

/// One object on the system heap: `len` bytes from `malloc`, owned uniquely, `free`d on
/// drop. Made with `malloc` itself rather than Rust's global allocator, so that
/// [`HeapObject::usable_size`] (`malloc_usable_size`) is sound whatever global allocator
/// the final program installs.
#[derive(Debug)]
pub struct HeapObject {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: a HeapObject uniquely owns its allocation, like a Box<[u8]>.
unsafe impl Send for HeapObject {}
// SAFETY: shared access only lends `&[u8]`, like `&Box<[u8]>`.
unsafe impl Sync for HeapObject {}

impl HeapObject {
    /// `len` (1..) zeroed bytes from `malloc`, or `None` when it refuses. Zeroed by writing,
    /// so the memory is resident, as the pool reports it.
    pub fn zeroed(len: usize) -> Option<Self> {
        if len == 0 {
            return None;
        }
        // SAFETY: plain `malloc` of a non-zero size; a null result is handled below.
        let ptr = NonNull::new(unsafe { libc::malloc(len) }.cast::<u8>())?;
        // SAFETY: `ptr` is a fresh allocation of `len` bytes that nothing else knows of.
        unsafe { ptr.as_ptr().write_bytes(0, len) };
        Some(Self { ptr, len })
    }

    /// The object's bytes.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` is a live allocation of `len` initialised bytes owned by `self`; the
        // borrow of `self` excludes `&mut` access and keeps it alive.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The object's bytes, mutably.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Bytes `malloc` set aside for the object (`malloc_usable_size`: its size rounded up
    /// to malloc's granularity, without malloc's own chunk header).
    pub fn usable_size(&self) -> usize {
        // SAFETY: `ptr` came from `malloc` and is not freed yet (freed only on drop).
        unsafe { libc::malloc_usable_size(self.ptr.as_ptr().cast()) }
    }
}

impl Drop for HeapObject {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `malloc`, is freed once, here, and no borrow outlives
        // `self`.
        unsafe { libc::free(self.ptr.as_ptr().cast()) };
    }
}

/// Asks malloc to give the free memory of its heaps back to the OS (`malloc_trim(0)`);
/// returns whether it released any (all glibc says). Without glibc: nothing, `false`.
pub fn malloc_trim() -> bool {
    #[cfg(target_env = "gnu")]
    {
        // SAFETY: `malloc_trim` only touches malloc's free memory and its own state.
        unsafe { libc::malloc_trim(0) != 0 }
    }
    #[cfg(not(target_env = "gnu"))]
    {
        false
    }
}

#[cfg(test)]
mod tests;
