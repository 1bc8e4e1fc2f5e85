//! Compaction of a heap (the seed's idea): chunks move out of the sparsest slabs into free
//! chunks of the fullest ones, so the emptied slabs' pages go back to the OS.
//!
//! Per cache, all but the fullest `ceil(used / chunks per slab)` slabs are marked for
//! evacuation (`Cache::plan_evacuation`); the kept ones have room for every chunk of the
//! others, and are refilled fullest first, lowest chunk first. Owners are found by one walk
//! over the heap's handle table (no back pointers are kept, so no metadata is spent on
//! them): every live object's chunks that lie in an evacuating slab are copied to a new
//! chunk and its table word or record is pointed at it; the old chunk is freed, and the
//! slab is dropped when its last chunk leaves. The whole pass runs under the heap's lock,
//! so no reader sees a chunk half moved and no handle ever names a freed chunk. Cost:
//! O(table entries + slabs log slabs) time, a temporary vector of the slabs' fill counts,
//! no lasting memory. The allocator's `compact` then shrinks the heap's metadata under the
//! same lock (`Heap::shrink`, `shrink.rs`).

use std::sync::Arc;

use super::heap::Heap;
use super::slab::orders;
use super::slab::units;
use super::table::Object;
use crate::sys::{PAGE_SIZE, PageSource};

impl Heap {
    /// Compacts every cache; returns the slabs (pages) dropped.
    pub fn compact(&mut self, source: &Arc<PageSource>) -> usize {
        let before: usize = self.caches.iter().map(|c| c.live_slabs()).sum();
        let planned: usize = self.caches.iter_mut().map(|c| c.plan_evacuation()).sum();
        if planned > 0 {
            for entry in 0..self.table.len() {
                let Some(object) = self.table.object(entry) else {
                    continue;
                };
                match object {
                    Object::Single { order, size, loc } => {
                        if let Some(to) = self.move_chunk(order, loc, source) {
                            self.table.relocate(
                                entry,
                                Object::Single {
                                    order,
                                    size,
                                    loc: to,
                                },
                            );
                        }
                    }
                    Object::Record { size, record } => {
                        let u = units(size);
                        for (i, order) in orders(u).enumerate() {
                            let loc = self.records.get(record, i);
                            if let Some(to) = self.move_chunk(order, loc, source) {
                                self.records.set(record, i, to);
                            }
                        }
                    }
                }
            }
            for cache in &mut self.caches {
                cache.end_evacuation();
            }
        }
        let after: usize = self.caches.iter().map(|c| c.live_slabs()).sum();
        before.saturating_sub(after)
    }

    /// Moves the chunk at `loc` of cache `order` when its slab is being evacuated; its new
    /// location, or `None` when it stays (not evacuating, or no memory for a new chunk).
    fn move_chunk(&mut self, order: usize, loc: u32, source: &Arc<PageSource>) -> Option<u32> {
        let cache = &mut self.caches[order];
        if !cache.evacuating(loc) {
            return None;
        }
        let to = cache.alloc(source).ok()?;
        let size = cache.chunk_size();
        let mut buf = [0u8; PAGE_SIZE];
        buf[..size].copy_from_slice(cache.chunk(loc));
        cache.chunk_mut(to).copy_from_slice(&buf[..size]);
        cache.free(loc);
        Some(to)
    }
}
