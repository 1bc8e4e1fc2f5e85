//! What a class shard keeps about its shared objects: the reference count of every anchor,
//! and the content index that `malloc_dedup` looks in (the mechanisms are in `share.rs`
//! and `fold.rs`).
//!
//! Representation. Both are hash maps under the class-shard lock, in [`Sharing`]:
//!
//! - `anchors`: anchor entry → [`Anchor`]: how many aliases name the anchor, from any shard
//!   of the class (at least 1: the anchor goes with its last alias), the object's id for `Pool::object_id` (the raw
//!   handle that located the object before it was shared, so the id is the same for the
//!   object's whole life), and whether it is a *moved* object's (merged from another
//!   shard, `merge.rs`: not shared, its one alias may write it);
//! - `index`: content hash → the located entry (a direct handle's or an anchor) of a written
//!   object whose capacity bytes hash to it. An entry is in the index exactly when its
//!   `INDEXED` flag is set, so each object is in it at most once and each hash names one
//!   object of the shard; an object whose bytes change (`write`) leaves it. Other shards of
//!   the class have their own indexes (`malloc_dedup` looks in each).
//!
//! Content hashes are `xxh3_64` of an object's whole capacity without its trailing zero
//! bytes (`write` zero-fills what the caller did not write, so equal capacities mean equal
//! reads; leaving the zeros out lets `malloc_dedup` hash the caller's bytes as they are); a
//! hash only finds candidates, and bytes are always compared in full before two objects
//! become one. The index's keys are such hashes already, so its map does not hash them
//! again ([`HashKey`]).

use std::collections::HashMap;

/// One shared object's bookkeeping, keyed by its anchor entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Anchor {
    /// Aliases naming the anchor (the handles naming the object).
    pub refs: u32,
    /// The object's id (`Pool::object_id`).
    pub id: u64,
    /// The object moved here from another shard of its class (`merge.rs`) and no handle
    /// was added to it since: its one alias owns it alone and may still `write` it.
    pub moved: bool,
}

/// A class shard's anchors and content index.
#[derive(Debug, Default)]
pub(crate) struct Sharing {
    /// Anchor entry → its reference count and object id.
    pub anchors: HashMap<u32, Anchor>,
    /// Content hash → the located entry of the indexed object with those bytes.
    pub index: HashMap<u64, u32, HashKey>,
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

/// The map of keys that are content hashes: a key is its own hash.
pub(crate) type HashKey = std::hash::BuildHasherDefault<KeyHasher>;

/// Passes a `u64` key (an xxh3 hash, evenly spread in every bit) through as its hash.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed; anything else is folded in, to stay a hasher.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, key: u64) {
        self.0 = key;
    }
}

/// The content hash of an object's capacity bytes (or of bytes about to be stored in one):
/// xxh3 of them without their trailing zeros.
#[inline]
pub(crate) fn content_hash(bytes: &[u8]) -> u64 {
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    let bytes = &bytes[..end];
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trailing_zeros_do_not_change_the_hash_and_other_bytes_do() {
        let data = b"compressed stream\x00\x07";
        let mut padded = data.to_vec();
        padded.resize(64, 0);
        assert_eq!(content_hash(data), content_hash(&padded));
        assert_ne!(content_hash(data), content_hash(&padded[..data.len() - 1]));
        assert_eq!(content_hash(&[0; 32]), content_hash(&[]));
    }

    #[test]
    fn hash_keys_pass_through_the_index_map() {
        use std::hash::{BuildHasher as _, Hasher as _};
        let key = 0x9E37_79B9_7F4A_7C15_u64;
        assert_eq!(HashKey::default().hash_one(key), key);
        let mut h = KeyHasher::default();
        h.write(&[1, 2]);
        assert_ne!(h.finish(), 0);
    }
}
