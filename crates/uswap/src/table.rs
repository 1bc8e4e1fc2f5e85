//! The region's page table: what each page is, which resident pages are oldest, the
//! readahead windows. Pure bookkeeping under the region's lock; the I/O is elsewhere.
//!
//! Access tracking is by **residency age**: a page's age is the time since it was last
//! filled (first touch or read back), kept as a FIFO of fills, and eviction takes the
//! oldest. Why not the others: the accessed bits of resident pages are visible to userspace
//! only through `/proc/kpageflags` or `/sys/kernel/mm/page_idle` and pagemap PFNs, which need
//! root; soft-dirty tracks writes only and is cleared process-wide (`clear_refs`), so it
//! cannot be scanned per region without disturbing every other user; write-protect scans
//! see writes only and cost one fault per written page per scan, which on the seed's
//! write-every-page workloads would add a fault to every access. Fill order costs nothing
//! and, for the scans the seed measures (sequential and random passes over memory larger
//! than the budget), evicts exactly what LRU would.

use std::collections::VecDeque;

use crate::readahead::{PageState, Plan, ReadaheadConfig, Window};

/// What one page of the region is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Page {
    /// Never touched (or discarded): reads as zeroes, nothing stored.
    Untouched,
    /// In the mapping.
    Resident,
    /// In the mapping, brought in by readahead and not yet passed over by a fault.
    ReadAhead,
    /// Stored on the device, missing from the mapping.
    Evicted,
    /// A handler or the evictor is moving it; wait for the region's condition variable.
    Busy,
    /// Retired (the program unmapped it): never stored, evicted or counted again; a touch
    /// before it is made inaccessible gets the zero page.
    Gone,
}

impl Page {
    pub fn is_resident(self) -> bool {
        matches!(self, Self::Resident | Self::ReadAhead)
    }
}

/// Pages an eviction round may take around its oldest page: one page-table page's worth
/// (2 MiB), the span one write-protect call covers while holding one page-table lock.
pub(crate) const CLUSTER: usize = 512;

/// The page table.
#[derive(Debug)]
pub(crate) struct Table {
    pages: Vec<Page>,
    /// Resident pages in fill order, oldest first, each with its fill's stamp; an entry
    /// whose page has since left residency, or was filled again (another stamp), is
    /// skipped when popped.
    fifo: VecDeque<(u32, u32)>,
    /// Per page: the stamp of its last fill (a count of fills, wrapping).
    stamp: Vec<u32>,
    /// Per page: the FIFO holds an entry with its current stamp (at most one does).
    queued: Vec<bool>,
    /// The next fill's stamp.
    seq: u32,
    resident: usize,
    evicted: usize,
    /// Pages in the `Busy` state.
    busy: usize,
    range_pages: usize,
    windows: Vec<Window>,
    pub readahead: ReadaheadConfig,
    /// Per page: its device slot still holds a copy from before it was read back in a
    /// faulting thread, to be freed off the fault's path (see [`Self::hold_stale`]).
    stale: Vec<bool>,
    /// Pages marked stale since the last [`Self::hold_stale`].
    stale_queue: Vec<u32>,
}

impl Table {
    pub fn new(pages: usize, range_pages: usize, readahead: ReadaheadConfig) -> Self {
        let range_pages = if range_pages == 0 { pages } else { range_pages };
        Self {
            pages: vec![Page::Untouched; pages],
            fifo: VecDeque::new(),
            stamp: vec![0; pages],
            queued: vec![false; pages],
            seq: 0,
            resident: 0,
            evicted: 0,
            busy: 0,
            range_pages,
            windows: vec![Window::new(); pages.div_ceil(range_pages)],
            readahead,
            stale: vec![false; pages],
            stale_queue: Vec::new(),
        }
    }

    /// Marks `page`'s slot stale (its copy on the device is out of date and to be freed);
    /// returns how many pages wait for [`Self::hold_stale`].
    pub fn mark_stale(&mut self, page: usize) -> usize {
        if !self.stale[page] {
            self.stale[page] = true;
            self.stale_queue.push(page as u32);
        }
        self.stale_queue.len()
    }

    /// Clears `page`'s stale mark (an eviction that stores the page replaces its slot);
    /// returns whether it had one.
    pub fn clear_stale(&mut self, page: usize) -> bool {
        std::mem::take(&mut self.stale[page])
    }

    /// Pages waiting for their stale slots to be freed.
    pub fn stale_waiting(&self) -> usize {
        self.stale_queue.len()
    }

    /// Takes the pages whose slots are stale, marked busy with their marks cleared, each
    /// with the state to give back to it (with [`Self::settle`]) once its slot is freed:
    /// while busy no eviction can take it, so the free cannot land after a new store. A
    /// page busy now (a fill or an eviction has it) stays queued for a later call.
    pub fn hold_stale(&mut self) -> Vec<(usize, Page)> {
        let queue = std::mem::take(&mut self.stale_queue);
        let mut held = Vec::with_capacity(queue.len());
        for page in queue {
            let page = page as usize;
            if !self.stale[page] {
                continue;
            }
            if self.pages[page] == Page::Busy {
                self.stale_queue.push(page as u32);
                continue;
            }
            self.stale[page] = false;
            held.push((page, self.take(page)));
        }
        held
    }

    pub fn get(&self, page: usize) -> Page {
        self.pages[page]
    }

    pub fn resident(&self) -> usize {
        self.resident
    }

    pub fn evicted(&self) -> usize {
        self.evicted
    }

    /// Pages a handler or the evictor is moving now.
    pub fn busy(&self) -> usize {
        self.busy
    }

    /// Marks a page busy, returning what it was.
    pub fn take(&mut self, page: usize) -> Page {
        let was = self.pages[page];
        debug_assert_ne!(was, Page::Busy);
        match was {
            Page::Resident | Page::ReadAhead => self.resident -= 1,
            Page::Evicted => self.evicted -= 1,
            Page::Untouched | Page::Busy | Page::Gone => {}
        }
        self.pages[page] = Page::Busy;
        self.busy += 1;
        was
    }

    /// Marks a page busy for a fill: it counts as resident from now on, so that the figures
    /// are right as soon as the fill wakes the program (end with [`Self::settle_filled`]).
    pub fn take_for_fill(&mut self, page: usize) -> Page {
        let was = self.take(page);
        self.resident += 1;
        was
    }

    /// Ends a fill begun with [`Self::take_for_fill`]: the page joins the FIFO as youngest.
    pub fn settle_filled(&mut self, page: usize, now: Page) {
        debug_assert!(self.pages[page] == Page::Busy && now.is_resident());
        self.pages[page] = now;
        self.busy -= 1;
        self.push_youngest(page);
    }

    /// `page` joins the FIFO as youngest, with a new stamp.
    fn push_youngest(&mut self, page: usize) {
        self.stamp[page] = self.seq;
        self.fifo.push_back((page as u32, self.seq));
        self.queued[page] = true;
        self.seq = self.seq.wrapping_add(1);
        self.bound_fifo();
    }

    /// Entries of pages that left residency (or were filled again) linger until popped;
    /// past twice the resident pages (and some), they go. At most one entry per page is
    /// current, so what stays is at most the resident and busy pages.
    fn bound_fifo(&mut self) {
        if self.fifo.len() <= 2 * self.resident + 1024 {
            return;
        }
        let (pages, stamps, queued) = (&self.pages, &self.stamp, &mut self.queued);
        self.fifo.retain(|&(p, s)| {
            let p = p as usize;
            let current = stamps[p] == s;
            let keep = current && pages[p].is_resident();
            if current && !keep {
                queued[p] = false;
            }
            keep
        });
    }

    /// Fills since `page`'s last fill.
    fn age(&self, page: usize) -> u32 {
        self.seq.wrapping_sub(self.stamp[page])
    }

    /// A read-ahead page the program used.
    pub fn mark_used(&mut self, page: usize) {
        if self.pages[page] == Page::ReadAhead {
            self.pages[page] = Page::Resident;
        }
    }

    /// Ends a busy page's move with its new state (`Resident`/`ReadAhead` join the FIFO as
    /// youngest).
    pub fn settle(&mut self, page: usize, now: Page) {
        debug_assert_eq!(self.pages[page], Page::Busy);
        self.set(page, now);
        if now.is_resident() {
            self.push_youngest(page);
        }
    }

    /// A busy page whose eviction failed goes back resident, still the oldest (its stamp
    /// kept): at the FIFO's front, unless its entry is still queued where it was (a
    /// cluster took it without popping it).
    pub fn settle_oldest(&mut self, page: usize, now: Page) {
        self.set(page, now);
        if now.is_resident() && !self.queued[page] {
            self.fifo.push_front((page as u32, self.stamp[page]));
            self.queued[page] = true;
        }
    }

    fn set(&mut self, page: usize, now: Page) {
        if self.pages[page] == Page::Busy {
            self.busy -= 1;
        }
        match now {
            Page::Resident | Page::ReadAhead => self.resident += 1,
            Page::Evicted => self.evicted += 1,
            Page::Untouched | Page::Busy | Page::Gone => {}
        }
        self.pages[page] = now;
    }

    /// Takes up to `n` resident pages for eviction (marked busy), in clusters: the oldest
    /// resident page, then the pages of its [`CLUSTER`] (the aligned block around it) that
    /// are in the older half of the resident pages (more than `resident / 2` fills old),
    /// then the next oldest page's cluster, until `n`.
    ///
    /// Why clusters rather than the `n` oldest pages alone: eviction write-protects what it
    /// copies, and every write-protect call of a page the program has mapped makes the
    /// kernel flush that page from the TLB of every CPU the program runs on, an interrupt
    /// on each (the program's own threads among them, mid-fault or mid-work). Under random
    /// access the `n` oldest pages lie far apart, one call each; a cluster's pages go with
    /// one call. The kernel's reclaim batches its flushes the same way. An older-half page
    /// of the same cluster goes a little before its turn, which LRU-like policies tolerate.
    pub fn take_oldest(&mut self, n: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(n);
        let min_age = (self.resident / 2) as u32;
        while out.len() < n {
            let Some((page, stamp)) = self.fifo.pop_front() else {
                break;
            };
            let page = page as usize;
            if self.stamp[page] != stamp {
                continue;
            }
            self.queued[page] = false;
            if !self.pages[page].is_resident() {
                continue;
            }
            self.take(page);
            out.push(page);
            let start = page / CLUSTER * CLUSTER;
            for p in start..(start + CLUSTER).min(self.pages.len()) {
                if out.len() == n {
                    break;
                }
                if self.pages[p].is_resident() && self.age(p) > min_age {
                    // Its FIFO entry stays behind, skipped when popped (the page leaves
                    // residency now; a later fill gives it a new stamp).
                    self.take(p);
                    out.push(p);
                }
            }
        }
        self.bound_fifo();
        out
    }

    /// Splits the sorted pages of an eviction round into spans to write-protect one call
    /// each: consecutive pages of one [`CLUSTER`] share a span unless a retired page lies
    /// between them (the caller may make retired pages inaccessible, `mprotect`, which
    /// splits the mapping; the region has no business with them any more). Returns
    /// `(first, count)` spans; the pages between a span's round pages are protected too,
    /// and a write to one of them is released as any write-protect fault is.
    pub fn protect_spans(&self, pages: &[usize]) -> Vec<(usize, usize)> {
        let mut spans: Vec<(usize, usize)> = Vec::new();
        for &p in pages {
            if let Some((first, count)) = spans.last_mut() {
                let end = *first + *count;
                if p >= end
                    && p / CLUSTER == *first / CLUSTER
                    && !self.pages[end..p].contains(&Page::Gone)
                {
                    *count = p + 1 - *first;
                    continue;
                }
            }
            spans.push((p, 1));
        }
        spans
    }

    /// Updates the faulting range's window for a major fault on `page` and plans the
    /// readahead; read-ahead pages the fault passed over count as used. Returns the plan,
    /// the pages chosen to read ahead (marked busy), and the read-ahead pages used.
    pub fn plan(&mut self, page: usize) -> (Plan, Vec<usize>, u64) {
        let w = page / self.range_pages;
        let start = w * self.range_pages;
        let end = (start + self.range_pages).min(self.pages.len());
        let mut used = 0;
        let mut gap_resident = true;
        if let Some(prev) = self.windows[w].prev_fault() {
            let prev = prev as usize;
            let reach = 2usize << self.readahead.effective_max_order();
            if (start..end).contains(&prev) && prev.abs_diff(page) <= reach {
                let (lo, hi) = (prev.min(page) + 1, prev.max(page));
                for p in lo..hi {
                    match self.pages[p] {
                        Page::ReadAhead => {
                            self.pages[p] = Page::Resident;
                            used += 1;
                        }
                        Page::Resident | Page::Busy => {}
                        Page::Evicted | Page::Untouched | Page::Gone => gap_resident = false,
                    }
                }
            }
        }
        for _ in 0..used {
            self.windows[w].record_hit();
        }
        let cfg = self.readahead;
        let plan =
            self.windows[w].on_fault(page as u64, gap_resident, start as u64..end as u64, &cfg);
        let chosen: Vec<usize> = plan
            .select(|p| match self.pages[p as usize] {
                Page::Resident | Page::ReadAhead | Page::Busy => PageState::Resident,
                Page::Evicted => PageState::Evicted,
                Page::Untouched | Page::Gone => PageState::Untouched,
            })
            .into_iter()
            .map(|p| p as usize)
            .collect();
        for &p in &chosen {
            self.take_for_fill(p);
        }
        (plan, chosen, used)
    }

    /// Forgets pages `first..first+count` (the program discarded or unmapped them): they
    /// read as zeroes from now on. Busy pages are left to their mover. Returns the pages
    /// that hold a slot on the device (stored, or stale), for it to free.
    pub fn forget(&mut self, first: usize, count: usize) -> Vec<usize> {
        self.leave(first, count, Page::Untouched)
    }

    /// Retires pages `first..first+count` for good (see [`Page::Gone`]); returns the pages
    /// that hold a slot on the device (stored, or stale), for it to free.
    pub fn retire(&mut self, first: usize, count: usize) -> Vec<usize> {
        self.leave(first, count, Page::Gone)
    }

    fn leave(&mut self, first: usize, count: usize, now: Page) -> Vec<usize> {
        let mut stored = Vec::new();
        for p in first..first + count {
            match self.pages[p] {
                Page::Busy | Page::Gone => {}
                Page::Untouched => {
                    self.pages[p] = now;
                    if self.clear_stale(p) {
                        stored.push(p);
                    }
                }
                was => {
                    // Out of the counts (through busy), into `now`, which counts nowhere.
                    self.take(p);
                    self.set(p, now);
                    // A stale slot goes now too, not at the evictor's next look.
                    if was == Page::Evicted || self.clear_stale(p) {
                        stored.push(p);
                    }
                }
            }
        }
        stored
    }

    /// Every page's state and the resident/evicted counts agree.
    #[cfg(test)]
    pub fn check(&self) {
        let r = self.pages.iter().filter(|p| p.is_resident()).count();
        let e = self.pages.iter().filter(|&&p| p == Page::Evicted).count();
        let b = self.pages.iter().filter(|&&p| p == Page::Busy).count();
        assert_eq!((r, e, b), (self.resident, self.evicted, self.busy));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_slots_are_held_busy_once_and_an_eviction_takes_the_mark() {
        let mut t = Table::new(8, 0, ReadaheadConfig::default());
        for p in [1, 2, 3] {
            t.take_for_fill(p);
            t.settle_filled(p, Page::Resident);
            t.mark_stale(p);
        }
        // Marking twice queues once.
        assert_eq!(t.mark_stale(3), 3);
        // An eviction takes page 1 (the oldest): storing it replaces its slot.
        assert_eq!(t.take_oldest(1), vec![1]);
        assert!(t.clear_stale(1));
        // Page 2 is busy with something else when the evictor looks: it stays queued.
        t.take(2);
        let held = t.hold_stale();
        assert_eq!(held, vec![(3, Page::Resident)]);
        assert_eq!((t.get(3), t.busy()), (Page::Busy, 3));
        assert_eq!(t.stale_waiting(), 1);
        for (p, was) in held {
            t.settle(p, was);
        }
        t.settle(1, Page::Evicted);
        t.settle(2, Page::Resident);
        assert_eq!(t.hold_stale(), vec![(2, Page::Resident)]);
        t.settle(2, Page::Resident);
        assert!(t.hold_stale().is_empty());
        assert_eq!((t.resident(), t.evicted(), t.busy()), (2, 1, 0));
        t.check();
    }

    #[test]
    fn fifo_gives_oldest_fills_first_and_skips_stale_entries() {
        let mut t = Table::new(8, 0, ReadaheadConfig::default());
        for p in [3, 1, 5, 2] {
            t.take(p);
            t.settle(p, Page::Resident);
        }
        t.forget(1, 1);
        assert_eq!(t.take_oldest(2), vec![3, 5]);
        t.settle(3, Page::Evicted);
        t.settle_oldest(5, Page::Resident);
        assert_eq!(t.take_oldest(8), vec![5, 2]);
        t.settle(5, Page::Evicted);
        t.settle(2, Page::Evicted);
        assert_eq!((t.resident(), t.evicted()), (0, 3));
        t.check();
    }

    #[test]
    fn eviction_takes_the_older_half_of_the_oldest_pages_cluster_and_spans_skip_retired() {
        let n = 3 * CLUSTER;
        let mut t = Table::new(n, 0, ReadaheadConfig::default());
        let fill = |t: &mut Table, p: usize| {
            t.take_for_fill(p);
            t.settle_filled(p, Page::Resident);
        };
        // Oldest first: page 0, then page 700 (second cluster), then the even pages of the
        // first cluster up to 60, then page 1300 (third cluster), then the odd pages up
        // to 61.
        fill(&mut t, 0);
        fill(&mut t, 700);
        for p in (2..62).step_by(2) {
            fill(&mut t, p);
        }
        fill(&mut t, 1300);
        for p in (1..62).step_by(2) {
            fill(&mut t, p);
        }
        assert_eq!(t.resident(), 64);
        // The oldest page, with the pages of its cluster more than 32 fills old: the even
        // ones, before page 700, which is older than they are (page 1300 and the odd pages
        // are younger).
        let taken = t.take_oldest(12);
        assert_eq!(taken, [0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22]);
        // A device that refuses them, round after round: they go back as the oldest, in
        // the same order, and the FIFO does not grow (the cluster's pages kept their
        // entries; only the popped one goes back to the front).
        for _ in 0..100 {
            for &p in taken.iter().rev() {
                t.settle_oldest(p, Page::Resident);
            }
            assert_eq!(t.take_oldest(12), taken);
        }
        assert_eq!(t.fifo.len(), 63);
        // One call covers the cluster's pages and the young odd pages between them,
        // unless a retired page lies between.
        assert_eq!(t.protect_spans(&taken), [(0, 23)]);
        t.retire(9, 1);
        assert_eq!(t.protect_spans(&taken), [(0, 9), (10, 13)]);
        for &p in &taken {
            t.settle(p, Page::Evicted);
        }
        // Page 4 comes back: the FIFO entry it left behind when the cluster took it does
        // not make it the oldest again. Page 700 goes alone: its cluster holds no other.
        t.take_for_fill(4);
        t.settle_filled(4, Page::Resident);
        assert_eq!(t.take_oldest(2), [700, 24]);
        t.check();
    }

    #[test]
    fn sequential_major_faults_grow_the_window_and_count_passed_pages() {
        let mut t = Table::new(64, 0, ReadaheadConfig::default());
        for p in 0..64 {
            t.take(p);
            t.settle(p, Page::Evicted);
        }
        let mut page = 0;
        let mut read_ahead = 0;
        let mut used_total = 0;
        while page < 64 {
            t.take_for_fill(page);
            let (_, chosen, used) = t.plan(page);
            used_total += used;
            t.settle_filled(page, Page::Resident);
            for &c in &chosen {
                t.settle_filled(c, Page::ReadAhead);
            }
            read_ahead += chosen.len();
            // The program walks on past what was read ahead.
            page += 1 + chosen.len();
            t.check();
        }
        assert!(read_ahead > 32, "read ahead {read_ahead}");
        // Every read-ahead page but the last window's was passed over by a later fault.
        assert!(
            used_total + 8 >= read_ahead as u64,
            "{used_total} of {read_ahead}"
        );
    }
}
