//! Eviction: the oldest resident pages go to the device and leave the mapping. For each run
//! of pages: write-protect and copy them (a writer now blocks), store each on the device,
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
/// faults are served first and eviction takes what is left.
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
    while !shared.stopping() {
        {
            let mut t = shared.table.lock();
            if t.resident() <= shared.budget || backing_off(&shared) {
                shared.evict_wanted.wait_for(&mut t, BACKOFF);
                continue;
            }
        }
        let low = low_water(shared.budget);
        loop {
            let resident = shared.table.lock().resident();
            if resident <= low || shared.stopping() {
                break;
            }
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
pub(crate) fn evict(shared: &Shared, n: usize) -> Result<Round, String> {
    let mut pages = shared.table.lock().take_oldest(n);
    let mut round = Round::default();
    if pages.is_empty() {
        return Ok(round);
    }
    pages.sort_unstable();
    let mut buf = vec![0u8; pages.len() * PAGE_SIZE];
    for run in runs(&pages) {
        if round.refused {
            // The device refused an earlier page: these were never protected.
            let mut t = shared.table.lock();
            for &p in run.iter().rev() {
                t.settle_oldest(p, Page::Resident);
            }
            drop(t);
            shared.moved.notify_all();
            continue;
        }
        round.evicted += evict_run(shared, run, &mut buf, &mut round.refused)?;
    }
    if round.refused || round.evicted == 0 {
        // The device is full, or nothing taken could go (pages the program made
        // unreadable): pause rather than spin on the same pages.
        *shared.backoff.lock() = Some(Instant::now() + BACKOFF);
    }
    Ok(round)
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

/// What eviction does with one page of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Stored on the device: drop it from the mapping.
    Stored,
    /// Absent although the table had it resident: nothing to keep, it is untouched.
    Absent,
    /// The device refused it, or one before it: it stays resident, still the oldest.
    Kept,
    /// The program made it unreadable: it stays resident, as the youngest.
    Unreadable,
}

/// Evicts one run of busy pages; returns how many went to the device.
fn evict_run(
    shared: &Shared,
    run: &[usize],
    buf: &mut [u8],
    refused: &mut bool,
) -> Result<usize, String> {
    let first = run[0];
    let snaps = shared
        .pager
        .snapshot(&shared.uffd, first, run.len(), buf)
        .map_err(|e| format!("write-protecting pages {first}+{}: {e}", run.len()))?;
    // Store each copied page until the device refuses one.
    let mut fates = Vec::with_capacity(snaps.len());
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
    // Stored pages leave the mapping, in runs; the others are unprotected.
    let mut i = 0;
    while i < fates.len() {
        let stored = fates[i] == Fate::Stored;
        let n = fates[i..]
            .iter()
            .take_while(|&&f| (f == Fate::Stored) == stored)
            .count();
        let res = if stored {
            shared.pager.discard(first + i, n)
        } else {
            shared.pager.unprotect(&shared.uffd, first + i, n)
        };
        res.map_err(|e| format!("settling pages {}+{n}: {e}", first + i))?;
        i += n;
    }
    let mut evicted = 0;
    let mut t = shared.table.lock();
    for (i, fate) in fates.iter().enumerate().rev() {
        let page = first + i;
        match fate {
            Fate::Stored => {
                t.settle(page, Page::Evicted);
                evicted += 1;
            }
            Fate::Absent => {
                t.settle(page, Page::Untouched);
                Counters::bump(&shared.counters.evict_cancelled);
            }
            Fate::Kept => t.settle_oldest(page, Page::Resident),
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
