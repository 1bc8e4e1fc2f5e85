//! What the region's threads share: the userfaultfd, the pager, the device, the page table
//! and the counters; and how the region fails.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use parking_lot::{Condvar, Mutex};
use zram::Zram;

use crate::config::FailPoint;
use crate::histogram::Histogram;
use crate::readahead::ReadaheadConfig;
use crate::stats::{Counters, RegionStats};
use crate::sys::{PAGE_SIZE, Pager, Uffd};
use crate::table::Table;

/// Pages evicted per round (one write-protect and one `MADV_DONTNEED` per run of them).
/// Each round's calls interrupt every CPU the program runs on (a TLB shootdown); rounds of
/// 64 rather than 32 halve those interrupts per fault (the fault bench's p95 went from
/// 19-20 to 14 µs).
pub(crate) const EVICT_BATCH: usize = 64;

#[derive(Debug)]
pub(crate) struct Shared {
    pub uffd: Uffd,
    pub pager: Pager,
    pub zram: Zram,
    pub table: Mutex<Table>,
    /// Held by the handler that waits for faults on the descriptor.
    pub reader: Mutex<()>,
    /// Signalled whenever a busy page settles.
    pub moved: Condvar,
    /// Signalled when the region goes over budget, or stops.
    pub evict_wanted: Condvar,
    /// Resident pages allowed.
    pub budget: usize,
    pub counters: Counters,
    pub latency: Histogram,
    pub stop: AtomicBool,
    failed: AtomicBool,
    reason: Mutex<Option<String>>,
    /// No eviction before this instant: the device refused the last one.
    pub backoff: Mutex<Option<Instant>>,
    pub fail: FailPoint,
}

impl Shared {
    pub fn new(
        uffd: Uffd,
        pager: Pager,
        zram: Zram,
        table: Table,
        budget: usize,
        fail: FailPoint,
    ) -> Self {
        Self {
            uffd,
            pager,
            zram,
            table: Mutex::new(table),
            reader: Mutex::new(()),
            moved: Condvar::new(),
            evict_wanted: Condvar::new(),
            budget,
            counters: Counters::default(),
            latency: Histogram::new(),
            stop: AtomicBool::new(false),
            failed: AtomicBool::new(false),
            reason: Mutex::new(None),
            backoff: Mutex::new(None),
            fail,
        }
    }

    /// The address of page `page`.
    pub fn addr(&self, page: usize) -> usize {
        self.pager.addr() + page * PAGE_SIZE
    }

    /// Faults are served in the faulting thread ([`crate::FaultMode::InThread`]), which is
    /// what a descriptor raising SIGBUS means: the slot of a page read back there is only
    /// marked stale in the table, and freed by the evictor ([`crate::evict::free_stale`]).
    /// Freeing a slot can release a zspage, whose `MADV_DONTNEED` flushes the TLBs of every
    /// CPU the process runs on: that stays off the faulting thread's path.
    pub fn in_thread(&self) -> bool {
        self.uffd.features().sigbus
    }

    /// Eviction may write-protect a cluster's span in one call, the young pages between its
    /// pages included ([`crate::evict`]): everywhere but where a system call writing to a
    /// resident page worked and would then fail with `EFAULT`, a descriptor serving
    /// user-mode faults only whose faults handler threads serve. (Where faults raise
    /// SIGBUS, system calls may not touch the region's pages anyway.)
    pub fn protects_spans(&self) -> bool {
        let f = self.uffd.features();
        f.sigbus || !f.user_mode_only
    }

    /// Frees page `page`'s device slot.
    pub fn free_slot(&self, page: usize) -> Result<(), String> {
        let offset = (page * PAGE_SIZE) as u64;
        self.zram
            .discard(offset, PAGE_SIZE as u64)
            .map_err(|e| format!("freeing page {page}'s slot: {e}"))
    }

    /// The region's page at `address`, if it lies in the region.
    pub fn page_of(&self, address: u64) -> Option<usize> {
        let off = usize::try_from(address)
            .ok()?
            .checked_sub(self.pager.addr())?;
        (off < self.pager.len()).then_some(off / PAGE_SIZE)
    }

    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Why the region failed: set before the flag, so `Some` exactly once it failed.
    pub fn failure(&self) -> Option<String> {
        self.reason.lock().clone()
    }

    /// `Error::Failed` once the region failed.
    pub fn check(&self) -> crate::Result<()> {
        if self.failed() {
            return Err(crate::Error::Failed(self.failure().unwrap_or_default()));
        }
        Ok(())
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire) || self.failed()
    }

    pub fn readahead(&self) -> ReadaheadConfig {
        self.table.lock().readahead
    }

    pub fn set_readahead(&self, cfg: ReadaheadConfig) {
        self.table.lock().readahead = ReadaheadConfig::new(cfg.enabled, cfg.max_order);
    }

    /// The region's figures now.
    pub fn stats(&self) -> RegionStats {
        let c = &self.counters;
        let (resident, evicted, ra) = {
            let t = self.table.lock();
            (t.resident(), t.evicted(), t.readahead)
        };
        RegionStats {
            len: self.pager.len() as u64,
            budget_pages: self.budget as u64,
            resident_pages: resident as u64,
            evicted_pages: evicted as u64,
            pswpin: Counters::get(&c.pswpin),
            pswpout: Counters::get(&c.pswpout),
            swap_ra: Counters::get(&c.swap_ra),
            swap_ra_hit: Counters::get(&c.swap_ra_hit),
            pgfault: Counters::get(&c.pgfault),
            pgmajfault: Counters::get(&c.pgmajfault),
            zero_fills: Counters::get(&c.zero_fills),
            first_touch: Counters::get(&c.first_touch),
            wp_faults: Counters::get(&c.wp_faults),
            evict_failed: Counters::get(&c.evict_failed),
            evict_cancelled: Counters::get(&c.evict_cancelled),
            vma_ra_enabled: ra.enabled,
            vma_ra_max_order: ra.effective_max_order(),
            fault_latency: self.latency.snapshot().summary(),
            mm_stat: self.zram.mm_stat().format(),
            failed: self.failure(),
        }
    }

    /// Tears the region down after a failure the handler cannot recover from: the memory
    /// becomes inaccessible and every blocked thread is woken, so that it takes a SIGSEGV
    /// instead of waiting forever for a fault nobody will serve.
    pub fn fail(&self, reason: String) {
        {
            let mut first = self.reason.lock();
            if first.is_some() {
                return;
            }
            tracing::error!("uswap region failed, tearing it down: {reason}");
            *first = Some(reason);
        }
        self.failed.store(true, Ordering::Release);
        if let Err(e) = self.pager.poison() {
            tracing::error!("uswap: making the failed region inaccessible: {e}");
        }
        if let Err(e) = self.uffd.wake(self.pager.addr(), self.pager.len()) {
            tracing::error!("uswap: waking the failed region's threads: {e}");
        }
        self.moved.notify_all();
        self.evict_wanted.notify_all();
    }
}
