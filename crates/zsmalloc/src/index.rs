//! Compaction's object index: the objects of each zspage of a class shard, found from
//! the handle table (objects need not carry their handle, `Header::Omitted`). Used by
//! compaction (`compact.rs`) and by merging shards (`merge.rs`).

use crate::handle::{Flags, HandleTable, Location, Slot};
use crate::shard::{ClassShard, ShardInner};

/// Handle-table entries the object index reads per hold of a shard lock (a few
/// microseconds). A class shard's whole table at once (60,000 entries in a uswap region's
/// device) kept its faults waiting 100–250 µs.
const BUILD_ENTRIES: usize = 1024;

/// The objects of each zspage of a class shard, as lists of located handle entries threaded
/// through `next`, from one pass over its handle table: objects need not carry their handle
/// (`Header::Omitted`), and one pass serves many migrations. A migration keeps it right for
/// what it moves; what others changed between lock holds, it checks entry by entry (an
/// entry is in at most one list, the one of the zspage where it was last seen).
pub(crate) struct ObjectIndex {
    /// Per zspage id: its first entry, or `NIL`.
    first: Vec<u32>,
    /// Per handle entry: the next entry of the same zspage, or `NIL`.
    next: Vec<u32>,
}

/// The end of a list.
const NIL: u32 = u32::MAX;

/// A list taken out of the index ([`ObjectIndex::take`]), read with
/// [`ObjectIndex::next_object`]; what is not put back ([`ObjectIndex::push`]) leaves it.
pub(crate) struct Cursor {
    zspage: u32,
    at: u32,
}

impl ObjectIndex {
    /// One pass over the shard's handle table, [`BUILD_ENTRIES`] entries per hold of the
    /// shard lock: what changes between holds, its users check entry by entry.
    pub(crate) fn build(shard: &ClassShard) -> Self {
        let mut index = Self {
            first: Vec::new(),
            next: Vec::new(),
        };
        let mut start = 0;
        loop {
            let inner = shard.inner.lock_for_upkeep();
            index.fit(&inner);
            let end = (start + BUILD_ENTRIES).min(inner.handles.entries());
            for (entry, _, slot) in inner.handles.iter_range(start..end) {
                if let Slot::Located(loc, _) = slot {
                    index.push(loc.zspage, entry);
                }
            }
            if end >= inner.handles.entries() {
                return index;
            }
            start = end;
        }
    }

    /// Grows the index to the shard's zspage ids and entries now (new ones are in no list:
    /// a zspage made since has no objects in it, or ones the index misses, which the caller
    /// notices).
    pub(crate) fn fit(&mut self, inner: &ShardInner) {
        if self.first.len() < inner.zspages.len() {
            self.first.resize(inner.zspages.len(), NIL);
        }
        if self.next.len() < inner.handles.entries() {
            self.next.resize(inner.handles.entries(), NIL);
        }
    }

    /// Takes the list of `zspage`, leaving it empty: a cursor for
    /// [`next_object`](Self::next_object).
    pub(crate) fn take(&mut self, zspage: u32) -> Cursor {
        Cursor {
            zspage,
            at: std::mem::replace(&mut self.first[zspage as usize], NIL),
        }
    }

    /// The next object of the taken list, as `(entry, location, flags)`: entries that no
    /// longer locate an object of that zspage (freed, made an alias, or moved since the
    /// index was built) are passed over, and leave the index.
    pub(crate) fn next_object(
        &self,
        cur: &mut Cursor,
        handles: &HandleTable,
    ) -> Option<(u32, Location, Flags)> {
        while cur.at != NIL {
            let entry = cur.at;
            cur.at = self.next[entry as usize];
            match handles.live_slot(entry) {
                Some(Slot::Located(loc, flags)) if loc.zspage == cur.zspage => {
                    return Some((entry, loc, flags));
                }
                _ => {}
            }
        }
        None
    }

    /// Puts `entry` at the head of `zspage`'s list (it must be in no list now).
    pub(crate) fn push(&mut self, zspage: u32, entry: u32) {
        self.next[entry as usize] = self.first[zspage as usize];
        self.first[zspage as usize] = entry;
    }
}
