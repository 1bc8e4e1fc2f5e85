//! Fresh address space: where runs come from when no freed run is left to reuse.
//!
//! The kernel guards the page-table entries of each 2 MiB of a process's address space
//! (one page-table page's worth) with one spin lock, which every fault and every
//! `MADV_POPULATE_WRITE` there takes. Handed out from one bump pointer, the zspages of
//! threads writing at once lay side by side, so their populates took the same lock: on the
//! 16-core machine, at 16 streams, 2% of the writers' samples spun on it. Each thread slot
//! (and the reserve's thread) therefore carves its fresh runs from a *window* of its own,
//! which reaches to a 2 MiB boundary, so no two threads' fresh pages share a page table.
//! A window is address space only: its pages cost nothing until a run taken from it is
//! faulted in, and a window's rest too short for a run goes to the free runs, as released
//! address space does.

use super::cache::SLOTS;
use super::free::pieces;
use super::{ARENA_PAGES, Arena, PAGE_SIZE, SourceInner};

/// Pages one page-table page maps (2 MiB of 4 KiB pages): a window ends on such a boundary.
pub(super) const WINDOW_PAGES: usize = 512;

/// The window of the reserve's thread (`ahead.rs`), after the slots'.
pub(super) const AHEAD_WINDOW: usize = SLOTS;

/// Untouched pages of an arena, from `addr`, that one thread slot carves runs from.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    pub(super) addr: usize,
    pub(super) pages: usize,
}

/// Every slot's window and the reserve's.
pub(super) type Windows = [Window; SLOTS + 1];

impl SourceInner {
    /// `pages` fresh pages from window `window` (a slot's number, or [`AHEAD_WINDOW`]), as
    /// an address; a window too short for them is replaced by the next one.
    pub(super) fn claim_fresh(&mut self, pages: usize, window: usize) -> std::io::Result<usize> {
        let w = std::mem::take(&mut self.windows[window]);
        let mut w = if w.pages >= pages {
            w
        } else {
            let mut rest = Vec::new();
            pieces(w.addr, w.pages, &mut rest);
            for (addr, pages) in rest {
                self.free_run(addr, pages);
            }
            self.claim_window(pages)?
        };
        let addr = w.addr;
        w.addr += pages * PAGE_SIZE;
        w.pages -= pages;
        self.windows[window] = w;
        Ok(addr)
    }

    /// A window of at least `pages` pages from the last arena's untouched end (a new arena
    /// when it has too few left), reaching to the next [`WINDOW_PAGES`] boundary of the
    /// address space after them, or to the arena's end.
    fn claim_window(&mut self, pages: usize) -> std::io::Result<Window> {
        if pages > ARENA_PAGES {
            return Err(std::io::Error::from(std::io::ErrorKind::InvalidInput));
        }
        if self.arenas.is_empty() || self.bump + pages > ARENA_PAGES {
            let arena = Arena::map(ARENA_PAGES * PAGE_SIZE, false)?;
            self.arenas.push(arena);
            self.bump = 0;
        }
        let base = self.arenas.last().map_or(0, |a| a.as_ptr() as usize);
        let addr = base + self.bump * PAGE_SIZE;
        let end = (addr + pages * PAGE_SIZE)
            .next_multiple_of(WINDOW_PAGES * PAGE_SIZE)
            .min(base + ARENA_PAGES * PAGE_SIZE);
        let len = (end - addr) / PAGE_SIZE;
        self.bump += len;
        Ok(Window { addr, pages: len })
    }
}
