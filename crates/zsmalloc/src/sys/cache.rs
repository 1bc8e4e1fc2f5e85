//! Freed runs kept resident for reuse, and the per-thread slots in front of the shared cache.
//!
//! In alloc/free churn a pool frees and allocates a zspage every few operations. With one
//! cache behind one lock, every such zspage took a lock that every thread takes, and its
//! cache line moved between CPUs each time; the kernel keeps its free pages per CPU for the
//! same reason. Each thread therefore first tries a small cache of its own slot (picked by
//! its thread number, as its shard is), whose lock no other thread takes unless there are
//! more threads than slots, and goes to the shared cache only when its slot cannot serve
//! it. The slots and the shared cache together never hold more than the source's limit.

use crossbeam_utils::CachePadded;

use super::{MAX_RUN_PAGES, PAGE_SIZE};
use crate::sync::{AtomicU64, Mutex};
use std::sync::atomic::Ordering;

/// Slots of per-thread caches (as many as a class has shards by default).
pub(super) const SLOTS: usize = 16;

/// Resident free runs by length in pages, as addresses.
#[derive(Debug, Default)]
pub(super) struct RunCache {
    runs: [Vec<usize>; MAX_RUN_PAGES + 1],
    /// Pages in `runs`.
    pub(super) pages: usize,
}

impl RunCache {
    /// A cached run of `pages`: an exact fit, else the front of a longer one.
    pub(super) fn take(&mut self, pages: usize) -> Option<usize> {
        let addr = take_run(&mut self.runs, pages)?;
        self.pages -= pages;
        Some(addr)
    }

    /// Keeps the run if that leaves at most `limit` pages cached; whether it did.
    pub(super) fn put(&mut self, addr: usize, pages: usize, limit: usize) -> bool {
        if self.pages + pages > limit {
            return false;
        }
        self.pages += pages;
        self.runs[pages].push(addr);
        true
    }

    /// Takes the longest runs out into `batch` until at most `keep` pages stay cached or
    /// the batch holds `max` runs.
    pub(super) fn shed(&mut self, keep: usize, batch: &mut Vec<(usize, usize)>, max: usize) {
        for len in (1..=MAX_RUN_PAGES).rev() {
            while self.pages > keep && batch.len() < max {
                let Some(addr) = self.runs[len].pop() else {
                    break;
                };
                self.pages -= len;
                batch.push((addr, len));
            }
        }
    }

    /// Every cached run, taken out into `out`.
    pub(super) fn drain_into(&mut self, out: &mut Vec<(usize, usize)>) {
        self.pages = 0;
        for (pages, list) in self.runs.iter_mut().enumerate() {
            out.extend(list.drain(..).map(|addr| (addr, pages)));
        }
    }

    /// Words the lists have room for.
    pub(super) fn capacity(&self) -> usize {
        self.runs.iter().map(Vec::capacity).sum()
    }
}

/// One thread slot: its cache, and the pages its threads took from the source less those
/// they gave back (wrapping: per slot it goes below zero when runs are freed by another
/// thread than took them; the sum over the slots is the pages live).
#[derive(Debug, Default)]
pub(super) struct Slot {
    pub(super) cache: Mutex<RunCache>,
    live: AtomicU64,
}

impl Slot {
    /// Counts `pages` taken from the source.
    pub(super) fn took(&self, pages: usize) {
        self.live.fetch_add(pages as u64, Ordering::Relaxed);
    }

    /// Counts `pages` given back.
    pub(super) fn gave(&self, pages: usize) {
        self.live.fetch_sub(pages as u64, Ordering::Relaxed);
    }
}

/// The slots, each on its own cache line, and each one's page limit.
#[derive(Debug)]
pub(super) struct Slots {
    all: Box<[CachePadded<Slot>]>,
    /// Pages one slot may keep: a sixteenth of half the source's limit, so the slots
    /// together keep at most half of it (0 with a limit under 32 pages: no slot keeps any).
    pub(super) limit: usize,
}

impl Slots {
    /// Slots for a source that keeps at most `cache_limit` pages cached in all.
    pub(super) fn new(cache_limit: usize) -> Self {
        Self {
            all: (0..SLOTS).map(|_| CachePadded::default()).collect(),
            limit: cache_limit / 2 / SLOTS,
        }
    }

    /// The calling thread's slot.
    #[inline]
    pub(super) fn own(&self) -> &Slot {
        &self.all[self.own_number()]
    }

    /// The calling thread's slot's number.
    #[inline]
    pub(super) fn own_number(&self) -> usize {
        crate::thread::thread_number() % SLOTS
    }

    /// Every slot.
    pub(super) fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.all.iter().map(|s| &**s)
    }

    /// Pages held by live runs: the slots' counts summed, without locks (like the kernel's
    /// per-cpu counters: exact when no run is being taken or given back meanwhile; a run
    /// taken in one slot and given back in another while the sum is read may be missed,
    /// never counted twice).
    pub(super) fn pages_live(&self) -> usize {
        let sum = self.iter().fold(0u64, |sum, s| {
            sum.wrapping_add(s.live.load(Ordering::Relaxed))
        });
        usize::try_from(i64::try_from(sum).unwrap_or(0)).unwrap_or(0)
    }
}

/// Takes a run of `pages` from per-length lists: an exact fit, else the front of the
/// shortest longer run, whose tail stays listed.
pub(super) fn take_run(lists: &mut [Vec<usize>; MAX_RUN_PAGES + 1], pages: usize) -> Option<usize> {
    if let Some(addr) = lists[pages].pop() {
        return Some(addr);
    }
    let len = (pages + 1..=MAX_RUN_PAGES).find(|&len| !lists[len].is_empty())?;
    let addr = lists[len].pop()?;
    lists[len - pages].push(addr + pages * PAGE_SIZE);
    Some(addr)
}
