//! The region: an anonymous mapping whose pages beyond a resident budget live compressed on
//! a zram device, served back by userfaultfd with seed 002's readahead.

use std::sync::Arc;
use std::thread::JoinHandle;

use zram::Zram;

use crate::config::{FaultMode, RegionConfig};
use crate::error::{Error, Result};
use crate::evict;
use crate::handler;
use crate::readahead::ReadaheadConfig;
use crate::shared::{EVICT_BATCH, Shared};
use crate::stats::RegionStats;
use crate::sys::{self, Mapping, PAGE_SIZE, Registration, Span, Uffd};
use crate::table::{Page, Table};

/// A memory region whose cold pages live compressed on a zram device.
///
/// The memory is an anonymous mapping registered with a userfaultfd. Pages beyond the
/// resident budget are evicted oldest fill first (see `table.rs` for why fill order is the
/// age used): their bytes go to the device and the page leaves the mapping; touching it
/// again faults, and a handler thread reads it back, decompresses it into place and, along
/// the faulting sub-range, reads ahead the evicted pages of the seed's window.
///
/// Read-ahead pages are mapped, so using one causes no fault; a read-ahead page counts as a
/// hit (`swap_ra_hit`) when the next major fault in its sub-range lands beyond it in the
/// access direction, i.e. the program passed over it.
///
/// Access it with [`Region::read`] and [`Region::write`], or split it with
/// [`Region::parts_mut`] for threads. If the handler fails (a device read error, a failed
/// fill, a panic), the region is torn down: its memory becomes inaccessible, threads blocked
/// on its faults are woken into a SIGSEGV rather than left waiting, and these methods return
/// [`Error::Failed`].
#[derive(Debug)]
pub struct Region {
    // Declared first: dropped (threads joined) before the mapping is unmapped.
    threads: Vec<JoinHandle<()>>,
    /// With [`FaultMode::InThread`]: the range the SIGBUS handler serves from `shared`.
    in_thread: Option<Registration>,
    shared: Arc<Shared>,
    mapping: Mapping,
    range_len: usize,
}

impl Region {
    /// Maps `len` bytes (rounded up to whole pages), registers them with a userfaultfd and
    /// starts the handler and evictor threads.
    pub fn new(len: usize, config: RegionConfig) -> Result<Self> {
        let pages = len.div_ceil(PAGE_SIZE);
        if pages == 0 {
            return Err(Error::Invalid("a region needs at least one page".into()));
        }
        if !config.range_len.is_multiple_of(PAGE_SIZE) {
            return Err(Error::Invalid(format!(
                "range_len {} is not whole pages",
                config.range_len
            )));
        }
        if pages > u32::MAX as usize {
            return Err(Error::Invalid(format!("{len} bytes is too large a region")));
        }
        let uffd = match config.faults {
            FaultMode::InThread => Uffd::with_sigbus(),
            FaultMode::Handlers => Uffd::new(),
        }
        .map_err(|e| Error::Unavailable(e.to_string()))?;
        if !uffd.features().write_protect {
            return Err(Error::Unavailable(
                "the kernel offers no write-protect faults on anonymous memory, which \
                 eviction needs to be safe against writers"
                    .into(),
            ));
        }
        let mapping = Mapping::for_region(pages).map_err(Error::sys("mapping the region"))?;
        uffd.register(&mapping, 0, mapping.len(), true)
            .map_err(|e| Error::Unavailable(format!("registering the region: {e}")))?;
        let mut device = config.device.clone();
        device.disksize = (pages * PAGE_SIZE) as u64;
        let zram = Zram::new(device)?;
        let range_pages = config.range_len / PAGE_SIZE;
        let range_len = if range_pages == 0 {
            mapping.len()
        } else {
            config.range_len
        };
        let table = Table::new(pages, range_pages, config.readahead);
        let shared = Arc::new(Shared::new(
            uffd,
            mapping.pager(),
            zram,
            table,
            config.budget_pages(),
            config.fail,
        ));
        let mut region = Self {
            threads: Vec::new(),
            in_thread: None,
            shared,
            mapping,
            range_len,
        };
        match config.faults {
            FaultMode::InThread => {
                let server: Arc<dyn sys::InThread> = Arc::clone(&region.shared) as _;
                let reg = sys::serve_in_thread(region.mapping.addr(), region.mapping.len(), server)
                    .map_err(|e| Error::Unavailable(format!("serving faults in-thread: {e}")))?;
                region.in_thread = Some(reg);
            }
            FaultMode::Handlers => {
                for i in 0..config.handlers.max(1) {
                    let s = Arc::clone(&region.shared);
                    region.spawn(format!("uswap-fault-{i}"), move || handler::run(s))?;
                }
            }
        }
        let s = Arc::clone(&region.shared);
        region.spawn("uswap-evict".into(), move || evict::run(s))?;
        Ok(region)
    }

    fn spawn(&mut self, name: String, f: impl FnOnce() + Send + 'static) -> Result<()> {
        let t = std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map_err(Error::sys("starting a region thread"))?;
        self.threads.push(t);
        Ok(())
    }

    /// Length in bytes (whole pages).
    pub fn len(&self) -> usize {
        self.mapping.len()
    }

    /// Always false: a region has at least one page.
    pub fn is_empty(&self) -> bool {
        self.mapping.is_empty()
    }

    /// The first byte's address (for code outside Rust, such as the preload shim, that
    /// hands the memory to a program; it stays valid while the region lives).
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.mapping.as_mut_ptr()
    }

    /// The first byte's address, as an integer.
    pub fn addr(&self) -> usize {
        self.mapping.addr()
    }

    fn check(&self) -> Result<()> {
        self.shared.check()
    }

    /// Copies bytes at `offset` into `buf`, faulting evicted pages back in.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check()?;
        self.mapping
            .read(offset, buf)
            .map_err(|e| Error::Invalid(e.to_string()))
    }

    /// Copies `data` into the region at `offset`.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        self.check()?;
        self.mapping
            .write(offset, data)
            .map_err(|e| Error::Invalid(e.to_string()))
    }

    /// One [`Part`] per sub-range (`RegionConfig::range_len`), each usable from its own
    /// thread.
    pub fn parts_mut(&mut self) -> Vec<Part<'_>> {
        let shared = &*self.shared;
        self.mapping
            .split_mut(self.range_len)
            .into_iter()
            .map(|span| Part { span, shared })
            .collect()
    }

    /// A handle on the region's figures and settings that borrows nothing: usable while
    /// [`Part`]s are out, from any thread.
    pub fn monitor(&self) -> Monitor {
        Monitor {
            shared: Arc::clone(&self.shared),
        }
    }

    /// The zram device holding the evicted pages (`mm_stat`, `io_stat`, writeback, ...).
    pub fn device(&self) -> &Zram {
        &self.shared.zram
    }

    /// The readahead settings in force.
    pub fn readahead(&self) -> ReadaheadConfig {
        self.shared.readahead()
    }

    /// Changes the readahead settings (the kernel's `vma_ra_enabled`, `vma_ra_max_order`);
    /// windows keep their state, as the kernel's do.
    pub fn set_readahead(&self, cfg: ReadaheadConfig) {
        self.shared.set_readahead(cfg);
    }

    /// Evicts up to `n` of the oldest resident pages now, in the calling thread, whatever
    /// the budget; returns how many went to the device (fewer when it refuses).
    pub fn evict_oldest(&self, n: usize) -> Result<usize> {
        self.check()?;
        let mut done = 0;
        while done < n {
            let round = evict::evict(&self.shared, (n - done).min(EVICT_BATCH)).map_err(|e| {
                self.shared.fail(e.clone());
                Error::Failed(e)
            })?;
            done += round.evicted;
            if round.refused {
                break;
            }
            if round.evicted == 0 {
                // Nothing went: what is left either cannot go (unreadable) or is on its way
                // (a fill or the evictor has it). Wait for the latter; stop at the former.
                let s = &*self.shared;
                let mut t = s.table.lock();
                if t.busy() == 0 || s.failed() {
                    break;
                }
                s.moved
                    .wait_for(&mut t, std::time::Duration::from_millis(10));
            }
        }
        Ok(done)
    }

    /// Forgets the pages of `offset..offset+len` (whole pages inside it): they read as
    /// zeroes from now on and their stored copies are freed (what `MADV_DONTNEED` does to
    /// anonymous memory).
    pub fn discard(&self, offset: usize, len: usize) -> Result<()> {
        self.leave(offset, len, false)
    }

    /// Retires the pages of `offset..offset+len` (whole pages inside it) for good, as when a
    /// program unmaps part of the region: they are dropped and freed, and the region's
    /// threads never store, evict or read them again, so the caller may then make them
    /// inaccessible (`mprotect(PROT_NONE)`). A touch before that gets the zero page.
    pub fn retire(&self, offset: usize, len: usize) -> Result<()> {
        self.leave(offset, len, true)
    }

    fn leave(&self, offset: usize, len: usize, retire: bool) -> Result<()> {
        self.check()?;
        let first = offset.div_ceil(PAGE_SIZE);
        let end = (offset.saturating_add(len) / PAGE_SIZE).min(self.mapping.pages());
        if first >= end {
            return Ok(());
        }
        let s = &*self.shared;
        let mut t = s.table.lock();
        while (first..end).any(|p| t.get(p) == Page::Busy) && !s.failed() {
            s.moved.wait(&mut t);
        }
        // Under the lock: no eviction or fill of these pages can start meanwhile.
        s.pager
            .discard(first, end - first)
            .map_err(Error::sys("discarding pages"))?;
        let stored = if retire {
            t.retire(first, end - first)
        } else {
            t.forget(first, end - first)
        };
        drop(t);
        for p in stored {
            s.zram.discard((p * PAGE_SIZE) as u64, PAGE_SIZE as u64)?;
        }
        Ok(())
    }

    /// Why the region failed, if it did.
    pub fn failure(&self) -> Option<String> {
        self.shared.failure()
    }

    /// The region's figures now.
    pub fn stats(&self) -> RegionStats {
        self.shared.stats()
    }

    /// Starts the fault latency figures afresh.
    pub fn reset_latency(&self) {
        self.shared.latency.reset();
    }
}

/// A region's figures and settings without the region: see [`Region::monitor`]. While one
/// lives, the region's device (and, after the region is dropped, its address range, made
/// inaccessible) stay allocated.
#[derive(Debug, Clone)]
pub struct Monitor {
    shared: Arc<Shared>,
}

impl Monitor {
    /// The region's figures now.
    pub fn stats(&self) -> RegionStats {
        self.shared.stats()
    }

    /// Starts the fault latency figures afresh.
    pub fn reset_latency(&self) {
        self.shared.latency.reset();
    }

    /// The readahead settings in force.
    pub fn readahead(&self) -> ReadaheadConfig {
        self.shared.readahead()
    }

    /// Changes the readahead settings, as [`Region::set_readahead`].
    pub fn set_readahead(&self, cfg: ReadaheadConfig) {
        self.shared.set_readahead(cfg);
    }

    /// The region's zram device.
    pub fn device(&self) -> &Zram {
        &self.shared.zram
    }

    /// Waits until no page of the region is on its way in or out (a fault's fill, a page
    /// read ahead, an eviction round), for at most `timeout`; returns whether that moment
    /// came (a failed region counts as quiet). The region's counters then hold no half-done
    /// work, as far as pages already asked for go: a fault that starts later is not waited
    /// for.
    pub fn wait_quiet(&self, timeout: std::time::Duration) -> bool {
        let s = &*self.shared;
        let deadline = std::time::Instant::now() + timeout;
        let mut t = s.table.lock();
        while t.busy() > 0 && !s.failed() {
            if s.moved.wait_until(&mut t, deadline).timed_out() {
                return t.busy() == 0 || s.failed();
            }
        }
        true
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.shared
            .stop
            .store(true, std::sync::atomic::Ordering::Release);
        self.shared.evict_wanted.notify_all();
        self.shared.moved.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        // No fault of this region is served any more (a touch from now on ends the process,
        // as a touch of unmapped memory does).
        self.in_thread = None;
        // A monitor may keep the mapping alive: nobody may touch it any more.
        if Arc::strong_count(&self.shared) > 1 {
            let _ = self.shared.pager.poison();
        }
    }
}

/// One sub-range of a [`Region`], readable and writable from its own thread.
#[derive(Debug)]
pub struct Part<'a> {
    span: Span<'a>,
    shared: &'a Shared,
}

impl Part<'_> {
    /// Where the part starts in the region, bytes.
    pub fn offset(&self) -> usize {
        self.span.offset()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.span.len()
    }

    /// Never true: parts have at least one page.
    pub fn is_empty(&self) -> bool {
        self.span.is_empty()
    }

    fn check(&self) -> Result<()> {
        self.shared.check()
    }

    /// Copies bytes at `offset` of the part into `buf`.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check()?;
        self.span
            .read(offset, buf)
            .map_err(|e| Error::Invalid(e.to_string()))
    }

    /// Copies `data` into the part at `offset`.
    pub fn write(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        self.check()?;
        self.span
            .write(offset, data)
            .map_err(|e| Error::Invalid(e.to_string()))
    }
}
