//! The fault handler threads: each reads faults from the region's userfaultfd and serves
//! them. A missing page is filled from the device (decompressed, `UFFDIO_COPY`), with the
//! shared zero page (`UFFDIO_ZEROPAGE`, a read of a never-written page) or a zeroed page (a
//! first write); the faulting thread is woken as soon as its page is in, and the same round
//! then reads ahead the window's evicted pages while the program runs on. A write-protect
//! fault is a writer that met an eviction: it is released once the eviction has settled.
//!
//! With [`crate::FaultMode::InThread`] the same service runs in the faulting thread itself,
//! called by the crate's SIGBUS handler ([`sys::InThread`]): no handler thread reads the
//! descriptor, the fill has no one to wake, and readahead is done by the faulting thread
//! before it resumes, as the kernel's swap-in reads a zram window in the faulting task.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::MutexGuard;

use crate::config::FailPoint;
use crate::evict;
use crate::shared::{EVICT_BATCH, Shared};
use crate::stats::Counters;
use crate::sys::{self, Fault, Fill, MAX_BATCH, PAGE_SIZE};
use crate::table::Page;

/// How long a handler waits for a fault before looking at the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// How long a handler keeps looking for the next fault before it sleeps.
const SPIN: Duration = Duration::from_micros(50);

/// Attempts at a fill the kernel answers `EAGAIN` (the mapping is changing) to.
const FILL_RETRIES: usize = 100;

/// Runs one handler thread until the region stops or fails; a panic fails the region.
pub(crate) fn run(shared: Arc<Shared>) {
    guarded(&shared, || serve_loop(&shared));
}

/// Runs `f`, failing the region if it fails or panics (the panic goes no further).
fn guarded(shared: &Shared, f: impl FnOnce() -> Result<(), String>) {
    match std::panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => shared.fail(e),
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            shared.fail(format!("fault handler panicked: {what}"));
        }
    }
}

/// A fault served in the faulting thread (SIGBUS from the region's userfaultfd). A failure
/// tears the region down as a handler thread's would: the retried access then meets the
/// inaccessible mapping and the thread gets SIGSEGV.
impl sys::InThread for Shared {
    fn serve(&self, address: usize, access: sys::Access) -> bool {
        let Some(page) = self.page_of(address as u64) else {
            return false;
        };
        guarded(self, || {
            // Where the CPU does not say, a present page means a write-protect fault, and
            // a missing one is taken as a write (a zeroed page rather than the zero page).
            let wp = match access.present {
                Some(present) => present,
                None => present(self, page)?,
            };
            let fault = Fault {
                address: address as u64,
                write: access.write.unwrap_or(true),
                wp,
            };
            let mut buf = [0u8; PAGE_SIZE];
            serve(self, fault, &mut buf, &mut None)
        });
        true
    }
}

/// The reader's turn: held by the handler that reads faults from the descriptor. A handler
/// keeps it while it serves what it read, so that while faults come one at a time a single
/// thread reads and serves them all, with no hand-off between threads (waking another
/// thread costs several microseconds on a virtual machine, and it was on every fault's
/// path); it gives the turn up before work that can take long (waiting for a busy page,
/// reading ahead, evicting), so that other faults are read meanwhile.
type Turn<'a> = Option<MutexGuard<'a, ()>>;

fn serve_loop(shared: &Shared) -> Result<(), String> {
    if let Err(e) = sys::block_signals() {
        tracing::warn!("uswap handler: blocking signals: {e}");
    }
    let mut buf = vec![0u8; PAGE_SIZE];
    let mut faults = Vec::with_capacity(MAX_BATCH);
    let mut turn: Turn<'_> = None;
    while !shared.stopping() {
        faults.clear();
        // One handler at a time waits on the descriptor (the others wait for their turn
        // here, not in `poll`, so a fault wakes one thread, not all).
        if turn.is_none() {
            turn = Some(shared.reader.lock());
        }
        take_faults(shared, &mut faults)?;
        for &fault in &faults {
            serve(shared, fault, &mut buf, &mut turn)?;
        }
    }
    Ok(())
}

/// Takes the pending faults: spins on the descriptor for [`SPIN`] first (a fault that comes
/// meanwhile is served without a wake-up of this thread, the dearest part of a round trip
/// on a virtual machine), then waits in `poll` for up to [`POLL`].
fn take_faults(shared: &Shared, faults: &mut Vec<Fault>) -> Result<(), String> {
    let read = |timeout, faults: &mut Vec<Fault>| {
        shared
            .uffd
            .read_faults(timeout, MAX_BATCH, faults)
            .map_err(|e| format!("reading faults: {e}"))
    };
    let spin_until = Instant::now() + SPIN;
    while faults.is_empty() && Instant::now() < spin_until && !shared.stopping() {
        read(None, faults)?;
        std::hint::spin_loop();
    }
    if faults.is_empty() {
        read(Some(POLL), faults)?;
    }
    Ok(())
}

fn serve(shared: &Shared, fault: Fault, buf: &mut [u8], turn: &mut Turn<'_>) -> Result<(), String> {
    let start = Instant::now();
    let page = shared
        .page_of(fault.address)
        .ok_or_else(|| format!("fault at {:#x} outside the region", fault.address))?;
    if fault.wp {
        *turn = None;
        return release_writer(shared, page);
    }
    let c = &shared.counters;
    let mut t = shared.table.lock();
    loop {
        match t.get(page) {
            Page::Busy => {
                *turn = None;
                shared.moved.wait(&mut t);
            }
            Page::Gone => {
                // Retired but still accessible for a moment: the zero page, untracked (a
                // second fault's fill finds it there, which is as good).
                drop(t);
                Counters::bump(&c.pgfault);
                return match shared.uffd.zeropage(shared.addr(page)) {
                    Ok(Fill::Filled | Fill::Exists) => Ok(()),
                    Ok(Fill::Again { .. }) => wake(shared, page),
                    Err(e) => Err(format!("filling retired page {page}: {e}")),
                };
            }
            Page::Resident | Page::ReadAhead if !present(shared, page)? => {
                // The table has it resident, yet it faults: the program dropped it behind
                // the region's back (`madvise(MADV_DONTNEED)` by a raw system call). Such
                // a page reads as zeroes: it is untouched again.
                t.take(page);
                t.settle(page, Page::Untouched);
            }
            state @ (Page::Resident | Page::ReadAhead) => {
                // Filled meanwhile (the fill woke the thread); wake again in case it
                // faulted after the fill's wake-up went out. A read-ahead page the
                // program faulted on while it was on its way is used: a hit.
                if state == Page::ReadAhead {
                    t.mark_used(page);
                    Counters::bump(&c.swap_ra_hit);
                }
                drop(t);
                Counters::bump(&c.pgfault);
                let res = wake(shared, page);
                shared.latency.record(start.elapsed());
                return res;
            }
            Page::Untouched => {
                t.take_for_fill(page);
                drop(t);
                // Counted before the fill wakes the program, so that what it sees after
                // its access is already in the figures.
                Counters::bump(&c.pgfault);
                if fault.write {
                    Counters::bump(&c.first_touch);
                    buf.fill(0);
                    fill(shared, page, Some(buf))?;
                } else {
                    Counters::bump(&c.zero_fills);
                    fill(shared, page, None)?;
                }
                let resident = settle(shared, page, Page::Resident);
                shared.latency.record(start.elapsed());
                evict::after_fill(shared, resident, || *turn = None);
                return Ok(());
            }
            Page::Evicted => {
                t.take_for_fill(page);
                let (_, ahead, used) = t.plan(page);
                drop(t);
                if shared.fail == FailPoint::Panic {
                    panic!("injected handler failure");
                }
                Counters::bump(&c.pgfault);
                Counters::bump(&c.pgmajfault);
                Counters::add(&c.swap_ra_hit, used);
                restore(shared, page, buf)?;
                shared.latency.record(start.elapsed());
                let mut resident = settle_restored(shared, page, Page::Resident)?;
                if !ahead.is_empty() {
                    *turn = None;
                }
                for p in ahead {
                    Counters::bump(&c.swap_ra);
                    restore(shared, p, buf)?;
                    resident = settle_restored(shared, p, Page::ReadAhead)?;
                }
                evict::after_fill(shared, resident, || *turn = None);
                return Ok(());
            }
        }
        if shared.failed() {
            return Ok(());
        }
    }
}

/// A writer hit a write-protected page: an eviction had it, or its cluster's span covered
/// it. Once the page settled, it is unprotected, which wakes the writer: a resident page
/// (the eviction failed, or never took it) takes the write; a page gone from the mapping
/// has no entry to unprotect, and the writer faults again as missing and is filled. Done
/// under the table lock, so no new eviction of the page can start in between.
fn release_writer(shared: &Shared, page: usize) -> Result<(), String> {
    Counters::bump(&shared.counters.wp_faults);
    let mut t = shared.table.lock();
    while t.get(page) == Page::Busy && !shared.failed() {
        shared.moved.wait(&mut t);
    }
    // Whatever the page is now: a retired one, say, touched since (the zero page) and
    // covered by a span planned before the retirement, must not stay protected either.
    let res = shared.pager.unprotect(&shared.uffd, page, 1);
    drop(t);
    res.map_err(|e| format!("releasing a writer of page {page}: {e}"))
}

fn present(shared: &Shared, page: usize) -> Result<bool, String> {
    shared
        .pager
        .is_present(page)
        .map_err(|e| format!("looking at page {page}: {e}"))
}

fn wake(shared: &Shared, page: usize) -> Result<(), String> {
    shared
        .uffd
        .wake(shared.addr(page), PAGE_SIZE)
        .map_err(|e| format!("waking page {page}: {e}"))
}

/// Reads an evicted page back from the device and maps it (the program wakes here).
fn restore(shared: &Shared, page: usize, buf: &mut [u8]) -> Result<(), String> {
    let offset = (page * PAGE_SIZE) as u64;
    shared
        .zram
        .read(offset, buf)
        .map_err(|e| format!("reading page {page} back from the device: {e}"))?;
    if shared.fail == FailPoint::Copy {
        return Err(format!("UFFDIO_COPY of page {page}: injected failure"));
    }
    Counters::bump(&shared.counters.pswpin);
    fill(shared, page, Some(buf))
}

/// Ends the fill of a page read back from the device, whose slot now holds a copy that
/// would go stale at the next write; returns the resident pages now. A handler thread frees
/// the slot at once (the program is already on its way), while the page is still busy, so
/// no eviction can have stored it anew. A faulting thread only marks it stale as the page
/// settles, in the same hold of the table lock, and the evictor frees it later
/// ([`evict::free_stale`]), woken once a batch waits.
fn settle_restored(shared: &Shared, page: usize, now: Page) -> Result<usize, String> {
    if !shared.in_thread() {
        shared.free_slot(page)?;
        return Ok(settle(shared, page, now));
    }
    let (resident, waiting) = {
        let mut t = shared.table.lock();
        t.settle_filled(page, now);
        (t.resident(), t.mark_stale(page))
    };
    shared.moved.notify_all();
    if waiting >= EVICT_BATCH {
        shared.evict_wanted.notify_one();
    }
    Ok(resident)
}

/// Maps a missing page: a copy of `src`, or the zero page; wakes its waiters.
fn fill(shared: &Shared, page: usize, src: Option<&[u8]>) -> Result<(), String> {
    let addr = shared.addr(page);
    for _ in 0..FILL_RETRIES {
        let res = match src {
            Some(src) => shared.uffd.copy(addr, src, true),
            None => shared.uffd.zeropage(addr),
        };
        match res {
            Ok(Fill::Filled) => return Ok(()),
            Ok(Fill::Exists) => {
                return Err(format!(
                    "page {page} is in the mapping although the region had it missing"
                ));
            }
            Ok(Fill::Again { .. }) => std::thread::yield_now(),
            Err(e) => return Err(format!("filling page {page}: {e}")),
        }
    }
    Err(format!("filling page {page}: the mapping kept changing"))
}

/// Ends a fill; returns the resident pages now (for [`evict::after_fill`], without taking
/// the lock again).
fn settle(shared: &Shared, page: usize, now: Page) -> usize {
    let resident = {
        let mut t = shared.table.lock();
        t.settle_filled(page, now);
        t.resident()
    };
    shared.moved.notify_all();
    resident
}
