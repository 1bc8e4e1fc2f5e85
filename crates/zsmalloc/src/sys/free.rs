//! Released runs: no memory behind them, listed by length for reuse, their neighbours
//! merged when no listed run fits.

use super::cache::take_run;
use super::{MAX_RUN_PAGES, PAGE_SIZE, SourceInner};

impl SourceInner {
    /// Lists a released run.
    pub(super) fn free_run(&mut self, addr: usize, pages: usize) {
        self.free.lists[pages].push(addr);
        self.free.pages += pages;
        self.free.merged = false;
    }

    /// A released run of `pages`: an exact fit, else split from the shortest longer run;
    /// failing both, once per batch of frees, free neighbours are merged and it tries again.
    pub(super) fn take_free(&mut self, pages: usize) -> Option<usize> {
        let mut taken = take_run(&mut self.free.lists, pages);
        if taken.is_none() && !self.free.merged {
            let arenas: Vec<(usize, usize)> = self
                .arenas
                .iter()
                .map(|a| (a.base.as_ptr() as usize, a.base.as_ptr() as usize + a.len))
                .collect();
            self.free.merge(&arenas);
            taken = take_run(&mut self.free.lists, pages);
        }
        if taken.is_some() {
            self.free.pages -= pages;
        }
        taken
    }
}

/// Released runs by length (up to [`MAX_RUN_PAGES`] pages), as addresses. Splitting long runs
/// for short zspages leaves short ones behind; when no listed run fits a request, free
/// neighbours of one arena are merged (runs longer than `MAX_RUN_PAGES` are listed in
/// pieces), so the address space is not fragmented for good.
#[derive(Debug, Default)]
pub(super) struct FreeRuns {
    lists: [Vec<usize>; MAX_RUN_PAGES + 1],
    /// Pages of the listed runs.
    pages: usize,
    /// No run was freed since the last merge.
    merged: bool,
}

impl FreeRuns {
    /// Pages of the listed runs.
    pub(super) fn pages(&self) -> usize {
        self.pages
    }

    /// Addresses the lists have room for.
    pub(super) fn capacity(&self) -> usize {
        self.lists.iter().map(Vec::capacity).sum()
    }

    fn merge(&mut self, arenas: &[(usize, usize)]) {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for (pages, list) in self.lists.iter_mut().enumerate() {
            runs.extend(list.drain(..).map(|addr| (addr, pages)));
        }
        runs.sort_unstable();
        let same_arena = |a: usize, b: usize| {
            arenas
                .iter()
                .any(|&(start, end)| (start..end).contains(&a) && (start..end).contains(&b))
        };
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(runs.len());
        for (addr, pages) in runs {
            match merged.last_mut() {
                Some((start, len))
                    if *start + *len * PAGE_SIZE == addr && same_arena(*start, addr) =>
                {
                    *len += pages;
                }
                _ => merged.push((addr, pages)),
            }
        }
        let mut runs = Vec::with_capacity(merged.len());
        for (addr, pages) in merged {
            pieces(addr, pages, &mut runs);
        }
        for (addr, pages) in runs {
            self.lists[pages].push(addr);
        }
        self.merged = true;
    }
}

/// `pages` pages from `addr` as runs of at most [`MAX_RUN_PAGES`] pages, into `runs`.
pub(super) fn pieces(mut addr: usize, mut pages: usize, runs: &mut Vec<(usize, usize)>) {
    while pages > 0 {
        let piece = pages.min(MAX_RUN_PAGES);
        runs.push((addr, piece));
        addr += piece * PAGE_SIZE;
        pages -= piece;
    }
}
