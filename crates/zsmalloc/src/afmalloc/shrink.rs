//! Shrinking a heap's metadata to what its live objects need (the second half of
//! compaction, after the slabs are evacuated).
//!
//! - Slab arrays: each cache whose array has a block more than its live slabs need is
//!   renumbered (`Cache::renumber`): live slabs move to the free ids below the live count
//!   (the slab's 32-byte entry moves, its page does not) and the array is cut there.
//! - Record store: when it holds a block more than the live records need, the live
//!   records slide to the front in offset order and the tail blocks are dropped
//!   (`Records::move_down`, `Records::truncate_packed`).
//! - Handle table: the free entries past the last live one are trimmed (`Table::trim`),
//!   when that frees a block and keeps stale handles refused. Live entries never move (a
//!   handle names its entry), so free entries between live ones stay.
//!
//! The owners of moved slabs' chunks and of moved records are found by one walk over the
//! handle table, as compaction finds them; the walk collects `(record, entry)` pairs, 8
//! bytes per live record, sorted and dropped at the end. Everything runs under the heap's
//! lock, so no one sees a location or record half rewritten.

use super::heap::Heap;
use super::slab::{CACHES, location, orders, split, units};
use super::table::Object;

/// `loc` after renumbering: its slab's new id when `map` moved it (`map[id - base]`).
fn renumbered(map: &[u32], base: usize, loc: u32) -> u32 {
    let (id, index) = split(loc);
    match id.checked_sub(base).and_then(|i| map.get(i)) {
        Some(&new) if new != u32::MAX => location(new, index),
        _ => loc,
    }
}

impl Heap {
    /// Metadata blocks (4 KiB each) `shrink` would drop from the slab arrays and the
    /// record store now (the handle table's trimmable tail is not counted: finding it
    /// takes a walk).
    pub fn shrinkable_blocks(&self) -> usize {
        self.records.shrinkable_blocks()
            + self
                .caches
                .iter()
                .map(|c| c.shrinkable_blocks())
                .sum::<usize>()
    }

    /// Shrinks the slab arrays, the record store and the handle table to what the live
    /// objects need (see the module docs); returns the metadata bytes given back.
    pub fn shrink(&mut self) -> usize {
        let before = self.metadata_bytes();
        let mut maps: [(usize, Vec<u32>); CACHES] = std::array::from_fn(|_| (0, Vec::new()));
        for (cache, (base, map)) in self.caches.iter_mut().zip(&mut maps) {
            if cache.shrinkable_blocks() > 0 {
                *map = cache.renumber();
                *base = cache.ids();
            }
        }
        let renumber = maps.iter().any(|(_, map)| !map.is_empty());
        let pack = self.records.shrinkable_blocks() > 0;
        let mut records: Vec<(u32, u32)> = Vec::new();
        if renumber || pack {
            for entry in 0..self.table.len() {
                match self.table.object(entry) {
                    None => {}
                    Some(Object::Single { order, size, loc }) => {
                        let (base, map) = &maps[order];
                        let to = renumbered(map, *base, loc);
                        if to != loc {
                            let object = Object::Single {
                                order,
                                size,
                                loc: to,
                            };
                            self.table.relocate(entry, object);
                        }
                    }
                    Some(Object::Record { size, record }) => {
                        if renumber {
                            for (i, order) in orders(units(size)).enumerate() {
                                let (base, map) = &maps[order];
                                let loc = self.records.get(record, i);
                                let to = renumbered(map, *base, loc);
                                if to != loc {
                                    self.records.set(record, i, to);
                                }
                            }
                        }
                        if pack {
                            records.push((record, entry as u32));
                        }
                    }
                }
            }
        }
        if pack {
            records.sort_unstable();
            let mut end = 0u32;
            for &(from, entry) in &records {
                let Some(Object::Record { size, .. }) = self.table.object(entry as usize) else {
                    continue;
                };
                let len = units(size).count_ones();
                self.records.move_down(from, end, len as usize);
                self.table
                    .relocate(entry as usize, Object::Record { size, record: end });
                end += len;
            }
            drop(records);
            self.records.truncate_packed(end as usize);
        }
        self.table.trim();
        before.saturating_sub(self.metadata_bytes())
    }
}
