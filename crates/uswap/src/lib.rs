//! uswap: a memory region whose cold pages live compressed, faulted back with readahead.
//!
//! Issue 14 brings seed 002 (`002_cf10123acd5da2ad.txt`, VMA-based swap readahead) to any
//! program without kernel swap. When it is complete, a uswap *region* is an anonymous mapping
//! registered with userfaultfd: pages beyond a resident budget are evicted coldest first into a
//! zram device, dropped from the mapping, and brought back by a fault handler that also reads
//! ahead along the faulting sub-range's virtual addresses, as the seed does per VMA. `zramd run`
//! will serve an unmodified program's large anonymous mappings this way.
//!
//! What exists so far is the readahead window itself, as pure logic with no I/O
//! ([`readahead`]): the per-range state, the rule that grows and shrinks it, the plan of pages
//! to read ahead for one fault, the `vma_ra_enabled` / `vma_ra_max_order` settings and the
//! readahead counters. Under it lies the system layer ([`sys`], the crate's only `unsafe`
//! code): anonymous mappings and a userfaultfd wrapper (register, copy, zero page,
//! write-protect, wake, timed fault reads). The region, the fault handler, eviction and
//! `zramd run` come next.

pub mod readahead;
#[expect(
    unsafe_code,
    reason = "anonymous mappings and userfaultfd ioctls, behind the module's safety contract"
)]
pub mod sys;

pub use readahead::{Direction, PageState, Plan, ReadaheadConfig, ReadaheadStats, Window};
