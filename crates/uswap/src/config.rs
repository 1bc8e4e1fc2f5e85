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
    /// Where faults are served: in the faulting thread (the default) or by handler threads.
    pub faults: FaultMode,
    /// Fault handler threads (at least 1) with [`FaultMode::Handlers`]; with
    /// [`FaultMode::InThread`] no handler thread is started.
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
            faults: FaultMode::default(),
            handlers: DEFAULT_HANDLERS,
            fail: FailPoint::None,
        }
    }
}

impl FaultMode {
    /// The mode's name in settings and reports: `in-thread` or `handlers`.
    pub fn name(self) -> &'static str {
        match self {
            Self::InThread => "in-thread",
            Self::Handlers => "handlers",
        }
    }

    /// The other mode.
    pub fn other(self) -> Self {
        match self {
            Self::InThread => Self::Handlers,
            Self::Handlers => Self::InThread,
        }
    }
}

impl std::str::FromStr for FaultMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "in-thread" => Ok(Self::InThread),
            "handlers" => Ok(Self::Handlers),
            _ => Err(format!("unknown fault mode {s:?} (in-thread, handlers)")),
        }
    }
}

impl RegionConfig {
    /// The resident budget in pages, never under [`MIN_RESIDENT_PAGES`].
    pub fn budget_pages(&self) -> usize {
        (self.resident_budget / PAGE_SIZE).max(MIN_RESIDENT_PAGES)
    }
}

/// Where a region's faults are served.
///
/// - [`FaultMode::InThread`]: the thread that touched a missing or write-protected page
///   serves the fault itself, as the kernel's swap-in decompresses a zram page in the
///   faulting task: the userfaultfd is opened with `UFFD_FEATURE_SIGBUS`, the access raises
///   SIGBUS in the faulting thread, and the crate's process-wide SIGBUS handler (installed
///   once, chaining to the handler it replaced for addresses outside every region) fills the
///   page and returns, so the access is retried and succeeds. No other thread is woken on a
///   fault's path (a wake-up and a context switch cost several microseconds on a virtual
///   machine). The conditions: the memory is touched from user mode (the region's own
///   methods, or code that dereferences it); a system call handed a pointer to a page not in
///   the mapping fails with `EFAULT` instead of faulting it in, and so does one that writes
///   to a write-protected page (one being evicted, or a resident page between the pages an
///   eviction took from its cluster, until the program writes it); threads that touch it keep
///   SIGBUS unblocked, and nothing replaces the SIGBUS handler while regions live; and the
///   code touching it holds none of the locks the fault path takes (the region's table, the
///   device's, the allocator's: `malloc`), which rules out using a region as the heap of the
///   program that serves it.
/// - [`FaultMode::Handlers`]: faults are read from the userfaultfd by
///   [`RegionConfig::handlers`] threads, which serve them and wake the faulting thread; any
///   access, a system call's included, is served. The preload shim (`zramd run`), which
///   gives a program's heap to a region, uses this mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FaultMode {
    /// Served in the faulting thread (SIGBUS from the userfaultfd).
    #[default]
    InThread,
    /// Served by handler threads reading the userfaultfd.
    Handlers,
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
