//! Eviction: the oldest resident pages go to the device and leave the mapping, a cluster at
//! a time. For each run of pages: write-protect and copy them (a writer now blocks; one
//! call protects a cluster's runs together), store each on the device,
//! drop the stored ones (`MADV_DONTNEED`), and only then mark them evicted; blocked writers
//! are released by the handler once the pages settle, and fault them back in. A page the
//! device refuses (`mem_limit`, out of memory) is unprotected and stays resident, oldest
//! still: eviction pauses for [`BACKOFF`] and the region goes over budget rather than lose a
//! page.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::shared::{EVICT_BATCH, Shared};
use crate::stats::Counters;
use crate::sys::{self, PAGE_SIZE, Snap};
use crate::table::Page;

/// How long eviction pauses after the device refused a page.
pub(crate) const BACKOFF: Duration = Duration::from_millis(50);

/// The evictor's `nice`: below the program's and the handlers' (0), so that on busy CPUs
/// faults are served first and eviction takes what is left. It is also put in `SCHED_IDLE`
/// where the kernel allows: then a program thread woken from a fault takes the CPU from the
/// evictor at once. Should eviction get no CPU at all, a handler evicts itself past
/// [`hard_slack`].
const EVICTOR_NICE: i32 = 10;

/// How far past the budget a handler lets the region go before it evicts itself, rather
/// than leave it to the evictor thread: a sixteenth of the budget (at least two batches),
/// room for the evictor to fall behind while the CPUs are busy.
fn hard_slack(budget: usize) -> usize {
    (budget / 16).max(2 * EVICT_BATCH)
}

/// What one eviction round did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Round {
    pub evicted: usize,
    pub refused: bool,
}

/// The level the evictor brings the region down to: a little under budget, so that it
/// works in batches rather than one page per fault.
fn low_water(budget: usize) -> usize {
    budget - (budget / 4).min(EVICT_BATCH)
}

fn backing_off(shared: &Shared) -> bool {
    let mut b = shared.backoff.lock();
    match *b {
        Some(until) if Instant::now() < until => true,
        Some(_) => {
            *b = None;
            false
        }
        None => false,
    }
}

/// Called by a handler after a fill that left `resident` pages resident: wakes the evictor
/// when over budget, and evicts in the handler's own thread when far over (calling
/// `before_evicting` first: the handler gives up its turn at reading faults).
pub(crate) fn after_fill(shared: &Shared, resident: usize, before_evicting: impl FnOnce()) {
    if resident <= shared.budget {
        return;
    }
    shared.evict_wanted.notify_one();
    if resident > shared.budget + hard_slack(shared.budget) && !backing_off(shared) {
        let excess = resident - shared.budget;
        before_evicting();
        if let Err(e) = evict(shared, excess.min(EVICT_BATCH)) {
            shared.fail(e);
        }
    }
}

/// The evictor thread: sleeps until the region is over budget, then evicts down to the low
/// water mark.
pub(crate) fn run(shared: Arc<Shared>) {
    if let Err(e) = sys::block_signals() {
        tracing::warn!("uswap evictor: blocking signals: {e}");
    }
    if let Err(e) = sys::set_thread_nice(EVICTOR_NICE) {
        tracing::debug!("uswap evictor: lowering its priority: {e}");
    }
    if let Err(e) = sys::set_thread_idle() {
        tracing::debug!("uswap evictor: SCHED_IDLE: {e}");
    }
    // The last wait ended with nobody asking: the region is quiet.
    let mut quiet = false;
    while !shared.stopping() {
        {
            let mut t = shared.table.lock();
            if t.resident() <= shared.budget || backing_off(&shared) {
                let stale = t.stale_waiting();
                if stale >= EVICT_BATCH || (stale > 0 && quiet) {
                    // Faulting threads left a batch of stale slots to free (or, once the
                    // region is quiet, the rest of one).
                    drop(t);
                    quiet = false;
                    if let Err(e) = free_stale(&shared) {
                        shared.fail(e);
                        return;
                    }
                    continue;
                }
                quiet = shared.evict_wanted.wait_for(&mut t, BACKOFF).timed_out();
                continue;
            }
        }
        let low = low_water(shared.budget);
        let mut first = true;
        loop {
            let resident = shared.table.lock().resident();
            // After a round, only while still over budget: a round for the few pages
            // filled meanwhile would cost a write-protect and a drop (a TLB flush each)
            // for a handful of pages; they go with the next wake-up's full round.
            if resident <= low || (!first && resident <= shared.budget) || shared.stopping() {
                break;
            }
            first = false;
            match evict(&shared, (resident - low).min(EVICT_BATCH)) {
                Ok(r) if r.refused || r.evicted == 0 => break,
                Ok(_) => {}
                Err(e) => {
                    shared.fail(e);
                    return;
                }
            }
        }
    }
}

/// Evicts up to `n` of the oldest resident pages. An error is a failure of the region's
/// machinery (an ioctl), not of the device: refusals are in the round.
///
/// Every run of the round is write-protected, copied and stored first; then the stored
/// pages of all runs leave the mapping together (one TLB shootdown for the round where the
/// kernel batches them, rather than one per scattered page), and only then do they settle.
///
/// A page whose slot is stale (read back in a faulting thread, see
/// [`Table::hold_stale`](crate::table::Table::hold_stale)) loses the mark once the round
/// stores it (the store replaced the slot); while the round has it busy, the evictor's
/// frees leave it alone.
pub(crate) fn evict(shared: &Shared, n: usize) -> Result<Round, String> {
    let (pages, spans) = {
        let mut t = shared.table.lock();
        let mut pages = t.take_oldest(n);
        pages.sort_unstable();
        let spans = if shared.protects_spans() {
            t.protect_spans(&pages)
        } else {
            Vec::new()
        };
        (pages, spans)
    };
    let mut round = Round::default();
    if pages.is_empty() {
        return Ok(round);
    }
    protect_spans(shared, &spans);
    let mut buf = vec![0u8; pages.len() * PAGE_SIZE];
    let mut fates = Vec::with_capacity(pages.len());
    for run in runs(&pages) {
        if round.refused {
            // The device refused an earlier page: these are not copied (their cluster's
            // span may have protected them: a writer is released as usual).
            fates.extend(run.iter().map(|_| Fate::Untaken));
            continue;
        }
        let at = fates.len() * PAGE_SIZE;
        let buf = &mut buf[at..at + run.len() * PAGE_SIZE];
        store_run(shared, run, buf, &mut round.refused, &mut fates)?;
    }
    round.evicted = settle(shared, &pages, &fates)?;
    if round.refused || round.evicted == 0 {
        // The device is full, or nothing taken could go (pages the program made
        // unreadable): pause rather than spin on the same pages.
        *shared.backoff.lock() = Some(Instant::now() + BACKOFF);
    }
    Ok(round)
}

/// Write-protects each span of the round in one call (see
/// [`Table::take_oldest`](crate::table::Table::take_oldest) for why): the copies that follow
/// protect each run again, which changes nothing where a span already did and costs no TLB
/// flush. A span the kernel refuses (part of it was unmapped meanwhile) is left to those
/// per-run calls.
fn protect_spans(shared: &Shared, spans: &[(usize, usize)]) {
    for &(first, count) in spans {
        if count == 1 {
            continue;
        }
        if let Err(e) = shared.pager.protect(&shared.uffd, first, count) {
            tracing::debug!("uswap: write-protecting pages {first}+{count} at once: {e}");
        }
    }
}

/// Frees the slots faulting threads left stale ([`crate::table::Table::hold_stale`]): the
/// pages are busy meanwhile, so no eviction can store one anew before its old slot goes;
/// then they settle back as they were (resident ones as the youngest).
pub(crate) fn free_stale(shared: &Shared) -> Result<(), String> {
    let held = shared.table.lock().hold_stale();
    if held.is_empty() {
        return Ok(());
    }
    let freed = held
        .iter()
        .try_for_each(|&(page, _)| shared.free_slot(page));
    let mut t = shared.table.lock();
    for (page, was) in held {
        t.settle(page, was);
    }
    drop(t);
    shared.moved.notify_all();
    freed
}

/// Consecutive page numbers grouped into runs.
fn runs(pages: &[usize]) -> Vec<&[usize]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=pages.len() {
        if i == pages.len() || pages[i] != pages[i - 1] + 1 {
            out.push(&pages[start..i]);
            start = i;
        }
    }
    out
}

/// What eviction does with one page of a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Stored on the device: drop it from the mapping.
    Stored,
    /// Absent although the table had it resident: nothing to keep, it is untouched.
    Absent,
    /// The device refused it, or one before it in its run: it stays resident, still the
    /// oldest.
    Kept,
    /// In a run after the device refused a page: never copied (protected only if its
    /// cluster's span covered it), it stays resident, still the oldest.
    Untaken,
    /// The program made it unreadable: it stays resident, as the youngest.
    Unreadable,
}

/// Write-protects, copies and stores one run of busy pages, appending their fates.
fn store_run(
    shared: &Shared,
    run: &[usize],
    buf: &mut [u8],
    refused: &mut bool,
    fates: &mut Vec<Fate>,
) -> Result<(), String> {
    let first = run[0];
    let snaps = shared
        .pager
        .snapshot(&shared.uffd, first, run.len(), buf)
        .map_err(|e| format!("write-protecting pages {first}+{}: {e}", run.len()))?;
    // Store each copied page until the device refuses one.
    for (i, snap) in snaps.iter().enumerate() {
        let fate = match snap {
            Snap::Absent => Fate::Absent,
            Snap::Unreadable => Fate::Unreadable,
            Snap::Copied if *refused => Fate::Kept,
            Snap::Copied => {
                let data = &buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
                match shared.zram.write(((first + i) * PAGE_SIZE) as u64, data) {
                    Ok(()) => Fate::Stored,
                    Err(e) => {
                        tracing::debug!("uswap: the device refused page {}: {e}", first + i);
                        Counters::bump(&shared.counters.evict_failed);
                        *refused = true;
                        Fate::Kept
                    }
                }
            }
        };
        fates.push(fate);
    }
    Ok(())
}

/// Ends a round: the stored pages leave the mapping (all runs in one call), the other
/// protected ones are unprotected, and every page settles in the table. Returns how many
/// went to the device.
fn settle(shared: &Shared, pages: &[usize], fates: &[Fate]) -> Result<usize, String> {
    // Runs of consecutive pages sharing a fate.
    let mut groups: Vec<(usize, usize, Fate)> = Vec::new();
    for (&page, &fate) in pages.iter().zip(fates) {
        match groups.last_mut() {
            Some((first, count, f)) if *f == fate && *first + *count == page => *count += 1,
            _ => groups.push((page, 1, fate)),
        }
    }
    let stored: Vec<(usize, usize)> = groups
        .iter()
        .filter(|g| g.2 == Fate::Stored)
        .map(|&(first, count, _)| (first, count))
        .collect();
    shared
        .pager
        .discard_runs(&stored)
        .map_err(|e| format!("dropping {} evicted runs: {e}", stored.len()))?;
    for &(first, count, fate) in &groups {
        if !matches!(fate, Fate::Stored | Fate::Untaken) {
            shared
                .pager
                .unprotect(&shared.uffd, first, count)
                .map_err(|e| format!("unprotecting pages {first}+{count}: {e}"))?;
        }
    }
    let mut evicted = 0;
    let mut t = shared.table.lock();
    for (&page, fate) in pages.iter().zip(fates).rev() {
        match fate {
            Fate::Stored => {
                t.clear_stale(page);
                t.settle(page, Page::Evicted);
                evicted += 1;
            }
            Fate::Absent => {
                t.settle(page, Page::Untouched);
                Counters::bump(&shared.counters.evict_cancelled);
            }
            Fate::Kept | Fate::Untaken => t.settle_oldest(page, Page::Resident),
            Fate::Unreadable => {
                t.settle(page, Page::Resident);
                Counters::bump(&shared.counters.evict_cancelled);
            }
        }
    }
    drop(t);
    Counters::add(&shared.counters.pswpout, evicted as u64);
    shared.moved.notify_all();
    Ok(evicted)
}
