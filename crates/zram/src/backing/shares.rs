//! Holders of objects in a backing store that more than one holder names: the one file copy
//! of a stream that several slots share (slots naming one shared object in memory, seed
//! 004, are written back once and share the copy on the file too).
//!
//! # Representation
//!
//! A map from an object's offset to its number of holders, for objects with more than one.
//! An object that is not in the map has exactly one holder: so the map holds only what is
//! really shared, a store's unshared objects cost nothing here, and a holder that lets go
//! of an object that is not in the map was its last and frees it.
//!
//! # Rules
//!
//! - Only a holder adds holders ([`SharedObjects::hold`]): the object is live while it
//!   holds it, so its offset names that object and no other.
//! - [`SharedObjects::release`] drops one holder: the count goes down, the entry goes when
//!   one holder is left, and the object is freed in the store when none is.
//!
//! Lock order: slot lock → this map's lock. The store is called without it.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::Backing;

/// Holders of the shared objects of one backing store (see the module's doc).
#[derive(Debug, Default)]
pub(crate) struct SharedObjects {
    holders: Mutex<HashMap<u64, u32>>,
}

impl SharedObjects {
    /// One more holder of the object at `offset`, which the caller holds.
    pub(crate) fn hold(&self, offset: u64) {
        *self.holders.lock().entry(offset).or_insert(1) += 1;
    }

    /// Drops one holder of the object of `len` bytes at `offset`; frees it in `backing`
    /// when that was the last.
    pub(crate) fn release(&self, backing: &dyn Backing, offset: u64, len: usize) {
        {
            let mut holders = self.holders.lock();
            if let Some(n) = holders.get_mut(&offset) {
                *n -= 1;
                if *n <= 1 {
                    holders.remove(&offset);
                }
                return;
            }
        }
        backing.free(offset, len);
    }

    /// Bytes of the holder map, about (per slot of capacity: the key, the count and one
    /// control byte, hashbrown's layout).
    pub(crate) fn metadata_bytes(&self) -> usize {
        self.holders.lock().capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
    }

    /// Holders of the object at `offset` (1 for one that is not shared, or not held).
    #[cfg(test)]
    fn holders(&self, offset: u64) -> u32 {
        self.holders.lock().get(&offset).copied().unwrap_or(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backing::MemBacking;

    #[test]
    fn an_object_goes_with_its_last_holder_and_the_map_keeps_only_shared_ones() {
        let store = MemBacking::new();
        let offsets = store.append(&[b"shared", b"alone"]).unwrap();
        let (shared, alone) = (offsets[0], offsets[1]);
        let s = SharedObjects::default();
        s.hold(shared);
        s.hold(shared);
        assert_eq!(s.holders(shared), 3);
        s.release(&store, shared, 6);
        s.release(&store, shared, 6);
        assert_eq!(s.holders.lock().len(), 0, "one holder left: no entry");
        assert_eq!(store.len(), 2);
        s.release(&store, shared, 6);
        s.release(&store, alone, 5);
        assert!(store.is_empty());
        assert_eq!(store.stats().live_bytes, 0);
    }
}
