//! Shared objects, folding and deduplication (seed 004): several handles may name one
//! stored object.
//!
//! (Interface only so far: the implementation follows.)

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::handle::Handle;
use crate::pool::Pool;

/// What one [`Pool::fold`] pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldReport {
    /// Objects the pass hashed.
    pub objects_scanned: u64,
    /// Objects the pass freed because an identical object now serves their handle.
    pub objects_folded: u64,
    /// Bytes of those objects (their class size).
    pub bytes_folded: u64,
    /// Pages the pass gave back to the OS (the zspages folding emptied, and what compacting
    /// the folded classes freed): seed 004's `pages_folded`.
    pub pages_freed: u64,
}

/// The pool's shared objects and its content index, now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareStats {
    /// Stored objects that more than one handle names.
    pub shared_objects: u64,
    /// Handles naming shared objects beyond one per object (the objects sharing saves).
    pub extra_handles: u64,
    /// Objects in the content index (`malloc_dedup`'s candidates).
    pub index_entries: u64,
    /// Bytes of the index and of the reference counts (included in `metadata_bytes`).
    pub index_bytes: u64,
}

impl Pool {
    /// Another handle naming the object `handle` names. The object becomes shared: it is
    /// read-only (`write` through any of its handles fails with [`crate::Error::Shared`])
    /// and it is freed with its last handle.
    pub fn share(&self, handle: Handle) -> Result<Handle> {
        let _ = handle;
        todo!("shared objects")
    }

    /// Frees one handle; returns `true` when the object went with it (it was the last handle
    /// naming it), `false` when other handles still name it. A stale handle fails.
    pub fn free_shared(&self, handle: Handle) -> Result<bool> {
        let _ = handle;
        todo!("shared objects")
    }

    /// Handles naming the object `handle` names (1 for an object nobody shares).
    pub fn refs(&self, handle: Handle) -> Result<u32> {
        let _ = handle;
        todo!("shared objects")
    }

    /// A number naming the stored object behind `handle`: equal for every handle that names
    /// the same object, different for different live objects, stable while the object
    /// lives (compaction does not change it).
    pub fn object_id(&self, handle: Handle) -> Result<u64> {
        let _ = handle;
        todo!("shared objects")
    }

    /// Stores `data` (1..=4096 bytes): in a new object, or — when an object of the same
    /// class shard in the content index holds the same bytes (found by hash, checked in
    /// full) — as another handle to that object. Returns the handle and whether it shares.
    pub fn malloc_dedup(&self, data: &[u8]) -> Result<(Handle, bool)> {
        let _ = data;
        todo!("deduplication")
    }

    /// Scans every class shard and folds identical written objects into one (seed 004), then
    /// compacts the shards it folded in. Runs alongside every other operation, holding a
    /// shard's lock for one bounded step at a time.
    pub fn fold(&self) -> FoldReport {
        todo!("folding")
    }

    /// Pages given back by folding since the pool was made (seed 004's `pages_folded`).
    pub fn pages_folded(&self) -> u64 {
        todo!("folding")
    }

    /// Shared objects and the content index, now.
    pub fn share_stats(&self) -> ShareStats {
        todo!("shared objects")
    }
}
