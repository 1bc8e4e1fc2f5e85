//! Folding and deduplication on a device (seed 004, and inline dedup beyond it).
//!
//! (Interface only so far: the implementation follows.)

use serde::{Deserialize, Serialize};
use zsmalloc::FoldReport;

use crate::device::Zram;

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

impl Zram {
    /// Folds identical stored objects into one (the `fold` attribute); runs alongside I/O.
    pub fn fold(&self) -> FoldReport {
        todo!("folding")
    }

    /// Is inline deduplication on?
    pub fn dedup(&self) -> bool {
        todo!("deduplication")
    }

    /// Folding and deduplication figures.
    pub fn fold_stats(&self) -> FoldStats {
        todo!("folding")
    }
}
