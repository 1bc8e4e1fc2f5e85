//! A region's settings.

use zram::ZramConfig;

use crate::readahead::ReadaheadConfig;
use crate::sys::PAGE_SIZE;

/// The fewest pages a region keeps resident: a fault's page plus a readahead window's worth
/// of room, so that filling never has to evict the page it just installed.
pub const MIN_RESIDENT_PAGES: usize = 16;

/// Fault handler threads by default.
pub const DEFAULT_HANDLERS: usize = 2;

/// How a [`crate::Region`] is set up.
#[derive(Debug, Clone)]
pub struct RegionConfig {
    /// Bytes kept resident at most (whole pages, at least [`MIN_RESIDENT_PAGES`]); pages
    /// beyond it are evicted to `device`, oldest fault-in first.
    pub resident_budget: usize,
    /// The zram device evicted pages are stored on: its `disksize` is set to the region's
    /// length (page `i` of the region is the device's page `i`); everything else (algorithm,
    /// `mem_limit`, allocator, backing file, policy) is used as given.
    pub device: ZramConfig,
    /// Readahead settings (seed 002's `vma_ra_enabled`, `vma_ra_max_order`); changeable later
    /// with [`crate::Region::set_readahead`].
    pub readahead: ReadaheadConfig,
    /// Bytes per sub-range (whole pages; 0: the whole region is one): each sub-range keeps its
    /// own readahead window, as the kernel keeps one per VMA, and [`crate::Region::parts_mut`]
    /// hands out one [`crate::Part`] per sub-range.
    pub range_len: usize,
    /// Fault handler threads (at least 1).
    pub handlers: usize,
    /// A failure to inject, for tests of what a failing handler does to the program.
    #[doc(hidden)]
    pub fail: FailPoint,
}

impl Default for RegionConfig {
    fn default() -> Self {
        Self {
            resident_budget: 64 << 20,
            device: ZramConfig::default(),
            readahead: ReadaheadConfig::default(),
            range_len: 0,
            handlers: DEFAULT_HANDLERS,
            fail: FailPoint::None,
        }
    }
}

impl RegionConfig {
    /// The resident budget in pages, never under [`MIN_RESIDENT_PAGES`].
    pub fn budget_pages(&self) -> usize {
        (self.resident_budget / PAGE_SIZE).max(MIN_RESIDENT_PAGES)
    }
}

/// A failure injected into the fault handler (tests only).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FailPoint {
    /// No failure.
    #[default]
    None,
    /// Restoring an evicted page fails as a failed `UFFDIO_COPY` would.
    Copy,
    /// The handler thread panics on the first fault on an evicted page.
    Panic,
}
