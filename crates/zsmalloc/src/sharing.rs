//! What a class shard keeps about its shared objects: the reference count of every anchor,
//! and the content index that `malloc_dedup` looks in (the mechanisms are in `share.rs`
//! and `fold.rs`).
//!
//! Representation. Both are hash maps under the class-shard lock, in [`Sharing`]:
//!
//! - `anchors`: anchor entry → [`Anchor`]: how many aliases name the anchor, from any shard
//!   of the class (at least 1: the anchor goes with its last alias) and the object's id for `Pool::object_id` (the raw
//!   handle that located the object before it was shared, so the id is the same for the
//!   object's whole life);
//! - `index`: content hash → the located entry (a direct handle's or an anchor) of a written
//!   object whose capacity bytes hash to it. An entry is in the index exactly when its
//!   `INDEXED` flag is set, so each object is in it at most once and each hash names one
//!   object of the shard; an object whose bytes change (`write`) leaves it. Other shards of
//!   the class have their own indexes (`malloc_dedup` looks in each).
//!
//! Content hashes are `xxh3_64` of an object's whole capacity (`write` zero-fills what the
//! caller did not write, so equal capacities mean equal reads); a hash only finds
//! candidates, and bytes are always compared in full before two objects become one.

use std::collections::HashMap;

/// One shared object's bookkeeping, keyed by its anchor entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Anchor {
    /// Aliases naming the anchor (the handles naming the object).
    pub refs: u32,
    /// The object's id (`Pool::object_id`).
    pub id: u64,
}

/// A class shard's anchors and content index.
#[derive(Debug, Default)]
pub(crate) struct Sharing {
    /// Anchor entry → its reference count and object id.
    pub anchors: HashMap<u32, Anchor>,
    /// Content hash → the located entry of the indexed object with those bytes.
    pub index: HashMap<u64, u32>,
}

impl Sharing {
    /// Bytes the maps hold, about: per slot of capacity the key, the value and one control
    /// byte (hashbrown's layout; its bucket count is a power of two at least 8/7 of the
    /// capacity, so this errs low by up to that slack).
    pub fn metadata_bytes(&self) -> usize {
        self.anchors.capacity() * (std::mem::size_of::<(u32, Anchor)>() + 1)
            + self.index.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
    }
}

/// The content hash of an object's capacity bytes.
#[inline]
pub(crate) fn content_hash(bytes: &[u8]) -> u64 {
    #[cfg(test)]
    if COLLIDE.with(std::cell::Cell::get) {
        return 0x0123_4567_89AB_CDEF;
    }
    xxhash_rust::xxh3::xxh3_64(bytes)
}

#[cfg(test)]
thread_local! {
    /// Tests: every content hash the calling thread computes is the same.
    static COLLIDE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Tests: make every content hash this thread computes collide (or stop).
#[cfg(test)]
pub(crate) fn collide_hashes(on: bool) {
    COLLIDE.with(|c| c.set(on));
}
