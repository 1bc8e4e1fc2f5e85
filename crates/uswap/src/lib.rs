//! uswap: a memory region whose cold pages live compressed, faulted back with readahead.
//!
//! Issue 14 brings seed 002 (`002_cf10123acd5da2ad.txt`, VMA-based swap readahead) to any
//! program without kernel swap. A [`Region`] is an anonymous mapping registered with
//! userfaultfd: pages beyond a resident budget are evicted oldest first into a zram device,
//! dropped from the mapping, and brought back by a fault handler thread that also reads
//! ahead along the faulting sub-range's virtual addresses, as the seed does per VMA.
//!
//! - [`readahead`]: the seed's window as pure logic (per-range state, the rule that grows
//!   and shrinks it, the plan of pages to read ahead, the `vma_ra_*` settings);
//! - [`Region`], [`RegionConfig`], [`Part`]: the region and its safe API;
//! - [`RegionStats`]: its counters in the kernel's words and the fault latency
//!   ([`histogram`]); [`ProgramFigures`]: a served program's regions, as `zramd run`'s shim
//!   reports them;
//! - [`sys`]: the crate's only `unsafe` code: mappings, the userfaultfd, signal masks.

mod config;
mod error;
mod evict;
mod handler;
pub mod histogram;
mod program;
pub mod readahead;
mod region;
mod shared;
mod stats;
#[expect(
    unsafe_code,
    reason = "anonymous mappings and userfaultfd ioctls, behind the module's safety contract"
)]
pub mod sys;
mod table;

pub use config::{DEFAULT_HANDLERS, FailPoint, FaultMode, MIN_RESIDENT_PAGES, RegionConfig};
pub use error::{Error, Result};
pub use program::ProgramFigures;
pub use readahead::{Direction, PageState, Plan, ReadaheadConfig, ReadaheadStats, Window};
pub use region::{Monitor, Part, Region};
pub use stats::RegionStats;
