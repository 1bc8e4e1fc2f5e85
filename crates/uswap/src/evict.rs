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
use crate::sys::{self, PAGE_SIZE};
use crate::table::Page;

/// How long eviction pauses after the device refused a page.
pub(crate) const BACKOFF: Duration = Duration::from_millis(50);

/// How far past the budget a handler lets the region go before it evicts itself, rather
/// than leave it to the evictor thread.
const HARD_SLACK: usize = 2 * EVICT_BATCH;

/// What one eviction round did.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Round {
    pub evicted: usize,
    pub refused: bool,
    pub taken: usize,
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

/// Called by a handler after a fill: wakes the evictor when over budget, and evicts in the
/// handler's own thread when far over.
pub(crate) fn after_fill(shared: &Shared) {
    let resident = shared.table.lock().resident();
    if resident <= shared.budget {
        return;
    }
    shared.evict_wanted.notify_one();
    if resident > shared.budget + HARD_SLACK && !backing_off(shared) {
        let excess = resident - shared.budget;
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
                Ok(r) if r.refused || r.taken == 0 => break,
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
    let mut round = Round {
        taken: pages.len(),
        ..Round::default()
    };
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
    if round.refused {
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

/// Evicts one run of busy pages; returns how many went to the device.
fn evict_run(
    shared: &Shared,
    run: &[usize],
    buf: &mut [u8],
    refused: &mut bool,
) -> Result<usize, String> {
    let first = run[0];
    let present = shared
        .pager
        .snapshot(&shared.uffd, first, run.len(), buf)
        .map_err(|e| format!("write-protecting pages {first}+{}: {e}", run.len()))?;
    // Store each present page until the device refuses one.
    let mut stored = 0;
    for (i, &p) in present.iter().enumerate() {
        if !p {
            continue;
        }
        let data = &buf[i * PAGE_SIZE..(i + 1) * PAGE_SIZE];
        match shared.zram.write(((first + i) * PAGE_SIZE) as u64, data) {
            Ok(()) => stored = i + 1,
            Err(e) => {
                tracing::debug!("uswap: the device refused page {}: {e}", first + i);
                Counters::bump(&shared.counters.evict_failed);
                *refused = true;
                break;
            }
        }
    }
    // Pages `..stored` that were present are on the device: drop them from the mapping.
    if stored > 0 {
        shared
            .pager
            .discard(first, stored)
            .map_err(|e| format!("dropping pages {first}+{stored}: {e}"))?;
    }
    let mut evicted = 0;
    let mut t = shared.table.lock();
    for (i, &p) in present.iter().enumerate().rev() {
        let page = first + i;
        if i < stored && p {
            t.settle(page, Page::Evicted);
            evicted += 1;
        } else if i < stored {
            // Absent although the table had it resident: nothing to keep.
            t.settle(page, Page::Untouched);
            Counters::bump(&shared.counters.evict_cancelled);
        } else if p {
            shared
                .pager
                .unprotect(&shared.uffd, page, 1)
                .map_err(|e| format!("unprotecting page {page}: {e}"))?;
            t.settle_oldest(page, Page::Resident);
        } else {
            t.settle(page, Page::Untouched);
            Counters::bump(&shared.counters.evict_cancelled);
        }
    }
    drop(t);
    Counters::add(&shared.counters.pswpout, evicted as u64);
    shared.moved.notify_all();
    Ok(evicted)
}
