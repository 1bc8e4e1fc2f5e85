//! Folding and deduplication on a device (seed 004, and inline dedup beyond it).
//!
//!
//! Folding is the allocator's ([`zsmalloc::Pool::fold`]; zsmalloc's alone: on another
//! allocator the `fold` trigger and the `dedup` setting are refused): it scans every class for objects
//! with equal bytes and lets one object serve all their handles. With the `dedup` setting
//! a write goes further: a page (or unit) whose stream is one object that the pool
//! already holds shares it at once ([`zsmalloc::Pool::malloc_dedup`]). Same-filled pages
//! keep their own path (no object at all). A stream of several objects (a unit larger than
//! a page that compresses to more than 4 KiB) is not deduplicated on write; folding can
//! still fold its last piece.
//!
//! Slots keep their own handles, so every rule of the storage path holds unchanged: a
//! write stores a new object and frees the slot's handle; the shared object goes with
//! its last handle (`chain.rs`). `compr_data_size` stays the sum of the slots'
//! stream lengths, as the kernel counts it; what sharing saves shows in `mem_used_total`,
//! in `pages_folded` and in [`FoldStats`].

use serde::{Deserialize, Serialize};
use zsmalloc::FoldReport;

use crate::stats::Counters;
use crate::store::Store;

/// A device's folding and deduplication figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldStats {
    /// Is inline deduplication on?
    pub dedup: bool,
    /// `fold` passes run.
    pub folds: u64,
    /// Objects folding freed because an identical object now serves their slots.
    pub objects_folded: u64,
    /// Pages folding gave back (`mm_stat` field 10, seed 004's `pages_folded`).
    pub pages_folded: u64,
    /// Pages whose write shared an identical stored object (inline dedup).
    pub dedup_pages: u64,
    /// Compressed bytes those writes did not store again.
    pub dedup_bytes: u64,
    /// Stored objects that more than one slot names now.
    pub shared_objects: u64,
    /// Bytes of the allocator's content index and reference counts (in metadata).
    pub index_bytes: u64,
}

/// Runs a fold pass over the store's pool and counts it.
pub(crate) fn fold(store: &Store) -> crate::error::Result<FoldReport> {
    let report = store.pool().fold()?;
    let c = store.counters();
    Counters::add(&c.folds, 1);
    Counters::add(&c.objects_folded, report.objects_folded);
    Ok(report)
}

/// The store's folding and deduplication figures.
pub(crate) fn fold_stats(store: &Store) -> FoldStats {
    let c = store.counters();
    let shares = store.pool().share_stats();
    FoldStats {
        dedup: store.dedup(),
        folds: Counters::get(&c.folds),
        objects_folded: Counters::get(&c.objects_folded),
        pages_folded: store.pages_folded(),
        dedup_pages: Counters::get(&c.dedup_pages),
        dedup_bytes: Counters::get(&c.dedup_bytes),
        shared_objects: shares.shared_objects,
        index_bytes: shares.index_bytes,
    }
}
