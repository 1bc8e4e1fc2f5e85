//! Chunk caches: power-of-two chunks (8..=4096 bytes) carved from one-page slabs.
//!
//! # Representation
//!
//! A [`Cache`] of order `k` serves chunks of `8 << k` bytes, `512 >> k` per slab. A slab is
//! a one-page [`PageRun`] with a few counters ([`Slab`], 32 bytes): chunks below `bump`
//! were handed out at least once, those at or above it never were (so a fresh slab needs no
//! initialising); freed chunks below `bump` are linked through their first two bytes (the
//! chunk index of the next free one), so a slab needs no bitmap. Slabs live in an array
//! (in blocks, `blocks.rs`) indexed by *slab id* (ids of dropped slabs are reused), and a
//! chunk's *location* is a `u32`: slab id × 512 + chunk index. Compaction renumbers the
//! slabs ([`Cache::renumber`]) so that the live ones take ids `0..live`, and drops the
//! array's blocks past them; the owners' locations are rewritten by the heap
//! (`shrink.rs`).
//!
//! # Rules
//!
//! - A slab is on the cache's partial list exactly when it has a free chunk and is not
//!   being evacuated by compaction; chunks are taken from the last partial slab.
//! - A slab whose last chunk is freed is dropped at once: its page goes back to the OS
//!   (or to the page source's bounded cache).
//! - Compaction marks slabs `evacuate`: they leave the partial list, so no chunk is taken
//!   from them, until compaction has moved every chunk out (then they are dropped) or gives
//!   up on them.

use std::sync::Arc;

use super::blocks::Blocks;
use crate::error::{Error, Result};
use crate::sys::{PAGE_SIZE, PageRun, PageSource};

/// Smallest chunk, in bytes.
pub(super) const MIN_CHUNK: usize = 8;
/// Chunk caches: orders 0 (8 bytes) ..= 9 (4096 bytes).
pub(super) const CACHES: usize = 10;
const _: () = assert!(MIN_CHUNK << (CACHES - 1) == PAGE_SIZE);
/// Bits of a location that hold the chunk index (at most 512 chunks per slab).
const INDEX_BITS: u32 = 9;
const _: () = assert!(PAGE_SIZE / MIN_CHUNK == 1 << INDEX_BITS);
/// Slab ids are below this (2^23 slabs, 32 GiB, per cache of a heap).
const MAX_SLABS: usize = 1 << (32 - INDEX_BITS);
const NO_CHUNK: u16 = (1 << 10) - 1;
const NOT_PARTIAL: u32 = u32::MAX;

/// The location of chunk `index` of slab `slab`.
pub(super) fn location(slab: u32, index: usize) -> u32 {
    (slab << INDEX_BITS) | index as u32
}

/// `(slab id, chunk index)` of a location.
pub(super) fn split(loc: u32) -> (usize, usize) {
    (
        (loc >> INDEX_BITS) as usize,
        (loc & ((1 << INDEX_BITS) - 1)) as usize,
    )
}

/// An object of `size` bytes (1..=4096) in 8-byte units.
pub(super) fn units(size: usize) -> usize {
    size.div_ceil(MIN_CHUNK)
}

/// The chunk orders an object of `units` units is built from, largest first (its one
/// bits).
pub(super) fn orders(units: usize) -> impl Iterator<Item = usize> {
    (0..CACHES).rev().filter(move |k| units & (1 << k) != 0)
}

/// One page of chunks (32 bytes).
#[derive(Debug)]
pub(super) struct Slab {
    run: PageRun,
    /// Position in the partial list, or `NOT_PARTIAL`.
    partial_pos: u32,
    /// Packed, 10 bits each: chunks in use (bits 0..10); `bump` (10..20): chunks at or above
    /// it were never handed out; `free_head` (20..30): the first freed chunk below `bump`,
    /// or `NO_CHUNK`; bit 30: `evacuate`, compaction is moving this slab's chunks out.
    state: u32,
}

const FIELD: u32 = 10;
const FIELD_MASK: u32 = (1 << FIELD) - 1;
const EVACUATE: u32 = 1 << (3 * FIELD);
const USED: u32 = 0;
const BUMP: u32 = FIELD;
const FREE_HEAD: u32 = 2 * FIELD;
const _: () = assert!(PAGE_SIZE / MIN_CHUNK < NO_CHUNK as usize);
const _: () = assert!(std::mem::size_of::<Option<Slab>>() == 32);

impl Slab {
    fn field(&self, shift: u32) -> u16 {
        ((self.state >> shift) & FIELD_MASK) as u16
    }

    fn set_field(&mut self, shift: u32, value: u16) {
        self.state = (self.state & !(FIELD_MASK << shift)) | (u32::from(value) << shift);
    }

    /// Chunks in use.
    pub fn used(&self) -> usize {
        usize::from(self.field(USED))
    }

    /// Chunks at or above this were never handed out.
    pub fn bump(&self) -> usize {
        usize::from(self.field(BUMP))
    }

    pub fn evacuating(&self) -> bool {
        self.state & EVACUATE != 0
    }

    fn set_evacuate(&mut self, on: bool) {
        self.state = (self.state & !EVACUATE) | if on { EVACUATE } else { 0 };
    }

    /// The free chunks below `bump`, walked from the list's head; `None` when the list
    /// is broken (out of range or longer than the slab).
    pub fn free_listed(&self, size: usize) -> Option<Vec<usize>> {
        let mut out = Vec::new();
        let mut next = self.field(FREE_HEAD);
        while next != NO_CHUNK {
            let i = usize::from(next);
            if i >= self.bump() || out.len() > self.bump() {
                return None;
            }
            out.push(i);
            next = self.next_free(i, size);
        }
        Some(out)
    }

    /// The free chunk after free chunk `i` (its first two bytes).
    fn next_free(&self, i: usize, size: usize) -> u16 {
        let bytes = &self.run.bytes()[i * size..];
        u16::from_le_bytes([bytes[0], bytes[1]])
    }
}

/// The chunk cache of one order in one heap.
#[derive(Debug)]
pub(super) struct Cache {
    order: usize,
    slabs: Blocks<Option<Slab>>,
    /// Ids of dropped slabs, for reuse.
    free_ids: Vec<u32>,
    /// Slabs with a free chunk (not evacuating).
    partial: Vec<u32>,
    /// Chunks in use.
    used: usize,
    /// Slabs held.
    live_slabs: usize,
}

impl Cache {
    pub fn new(order: usize) -> Self {
        Self {
            order,
            slabs: Blocks::new(),
            free_ids: Vec::new(),
            partial: Vec::new(),
            used: 0,
            live_slabs: 0,
        }
    }

    /// Bytes per chunk.
    pub fn chunk_size(&self) -> usize {
        MIN_CHUNK << self.order
    }

    /// Chunks per slab.
    pub fn per_slab(&self) -> usize {
        PAGE_SIZE / self.chunk_size()
    }

    pub fn used(&self) -> usize {
        self.used
    }

    pub fn live_slabs(&self) -> usize {
        self.live_slabs
    }

    /// Slab ids in use or free.
    pub fn ids(&self) -> usize {
        self.slabs.len()
    }

    /// The slab of id `id` (`None`: a dropped slab's id).
    pub fn slab(&self, id: usize) -> Option<&Slab> {
        self.slabs.get(id).as_ref()
    }

    fn slab_mut(&mut self, id: usize) -> &mut Slab {
        self.slabs.get_mut(id).as_mut().expect("live slab")
    }

    pub fn free_ids(&self) -> &[u32] {
        &self.free_ids
    }

    pub fn partial(&self) -> &[u32] {
        &self.partial
    }

    /// Slabs compaction could free now: those beyond what the chunks in use need.
    pub fn freeable(&self) -> usize {
        self.live_slabs - self.used.div_ceil(self.per_slab())
    }

    /// Takes a chunk; its location. A new slab comes from `source` when no slab has room.
    pub fn alloc(&mut self, source: &Arc<PageSource>) -> Result<u32> {
        let id = match self.partial.last() {
            Some(&id) => id,
            None => self.new_slab(source)?,
        };
        let size = self.chunk_size();
        let per_slab = self.per_slab();
        let slab = self.slab_mut(id as usize);
        let index = match slab.field(FREE_HEAD) {
            NO_CHUNK => {
                let i = slab.field(BUMP);
                slab.set_field(BUMP, i + 1);
                usize::from(i)
            }
            i => {
                let next = slab.next_free(usize::from(i), size);
                slab.set_field(FREE_HEAD, next);
                usize::from(i)
            }
        };
        slab.set_field(USED, slab.field(USED) + 1);
        let full = slab.used() == per_slab;
        self.used += 1;
        if full {
            self.unlist(id);
        }
        Ok(location(id, index))
    }

    fn new_slab(&mut self, source: &Arc<PageSource>) -> Result<u32> {
        let id = match self.free_ids.last() {
            Some(&id) => id,
            None if self.slabs.len() < MAX_SLABS => self.slabs.len() as u32,
            None => return Err(Error::TooManyObjects),
        };
        let run = source.alloc(1)?;
        if self.free_ids.pop().is_none() {
            self.slabs.push(None);
        }
        *self.slabs.get_mut(id as usize) = Some(Slab {
            run,
            partial_pos: NOT_PARTIAL,
            state: u32::from(NO_CHUNK) << FREE_HEAD,
        });
        self.live_slabs += 1;
        self.list(id);
        Ok(id)
    }

    /// Gives a chunk back; `true` when its slab was emptied and dropped.
    pub fn free(&mut self, loc: u32) -> bool {
        let (id, index) = split(loc);
        let size = self.chunk_size();
        let per_slab = self.per_slab();
        let slab = self.slab_mut(id);
        debug_assert!(index < slab.bump() && slab.used() > 0);
        let was_full = slab.used() == per_slab;
        let head = slab.field(FREE_HEAD);
        slab.run.bytes_mut()[index * size..index * size + 2].copy_from_slice(&head.to_le_bytes());
        slab.set_field(FREE_HEAD, index as u16);
        slab.set_field(USED, slab.field(USED) - 1);
        let (emptied, evacuating) = (slab.used() == 0, slab.evacuating());
        let listed = slab.partial_pos != NOT_PARTIAL;
        self.used -= 1;
        if emptied {
            if listed {
                self.unlist(id as u32);
            }
            // Dropping the run gives the page back.
            *self.slabs.get_mut(id) = None;
            self.free_ids.push(id as u32);
            self.live_slabs -= 1;
            return true;
        }
        if was_full && !evacuating {
            self.list(id as u32);
        }
        false
    }

    /// The bytes of the chunk at `loc`.
    pub fn chunk(&self, loc: u32) -> &[u8] {
        let (id, index) = split(loc);
        let size = self.chunk_size();
        let slab = self.slab(id).expect("live slab");
        &slab.run.bytes()[index * size..(index + 1) * size]
    }

    /// The bytes of the chunk at `loc`, mutably.
    pub fn chunk_mut(&mut self, loc: u32) -> &mut [u8] {
        let (id, index) = split(loc);
        let size = self.chunk_size();
        let slab = self.slab_mut(id);
        &mut slab.run.bytes_mut()[index * size..(index + 1) * size]
    }

    /// Whether the chunk at `loc` lies in a slab being evacuated.
    pub fn evacuating(&self, loc: u32) -> bool {
        let (id, _) = split(loc);
        self.slab(id).is_some_and(Slab::evacuating)
    }

    /// Puts slab `id` on the partial list.
    fn list(&mut self, id: u32) {
        let pos = self.partial.len() as u32;
        let slab = self.slab_mut(id as usize);
        debug_assert_eq!(slab.partial_pos, NOT_PARTIAL);
        slab.partial_pos = pos;
        self.partial.push(id);
    }

    /// Takes slab `id` off the partial list.
    fn unlist(&mut self, id: u32) {
        let pos = std::mem::replace(&mut self.slab_mut(id as usize).partial_pos, NOT_PARTIAL);
        self.partial.swap_remove(pos as usize);
        if let Some(&moved) = self.partial.get(pos as usize) {
            self.slab_mut(moved as usize).partial_pos = pos;
        }
    }

    /// Chooses the slabs to empty: all but the fullest `ceil(used / per_slab)`, which
    /// together have room for every chunk of the others. Marks them `evacuate`, and
    /// rebuilds the partial list from the kept slabs, fullest last (taken first). Returns
    /// how many slabs are to be emptied.
    pub fn plan_evacuation(&mut self) -> usize {
        let keep = self.used.div_ceil(self.per_slab());
        if self.live_slabs <= keep {
            return 0;
        }
        let mut by_use: Vec<(u16, u32)> = (0..self.slabs.len())
            .filter_map(|id| self.slab(id).map(|s| (s.field(USED), id as u32)))
            .collect();
        // Fullest first; among equals, lowest id first.
        by_use.sort_unstable_by_key(|&(used, id)| (std::cmp::Reverse(used), id));
        for i in 0..self.partial.len() {
            let id = self.partial[i];
            self.slab_mut(id as usize).partial_pos = NOT_PARTIAL;
        }
        self.partial.clear();
        let per_slab = self.per_slab();
        for &(used, id) in by_use[..keep].iter().rev() {
            if usize::from(used) < per_slab {
                self.list(id);
            }
        }
        for &(_, id) in &by_use[keep..] {
            self.slab_mut(id as usize).set_evacuate(true);
        }
        by_use.len() - keep
    }

    /// Ends an evacuation: slabs compaction could not empty (none, unless memory ran out)
    /// take chunks again.
    pub fn end_evacuation(&mut self) {
        let per_slab = self.per_slab();
        for id in 0..self.slabs.len() {
            let Some(slab) = self.slabs.get_mut(id).as_mut() else {
                continue;
            };
            if slab.evacuating() {
                slab.set_evacuate(false);
                if slab.used() < per_slab {
                    self.list(id as u32);
                }
            }
        }
    }

    /// Whether the slab array holds exactly the blocks its ids need.
    pub fn is_tight(&self) -> bool {
        self.slabs.is_tight()
    }

    /// Blocks of the slab array renumbering would drop.
    pub fn shrinkable_blocks(&self) -> usize {
        self.slabs.blocks() - Blocks::<Option<Slab>>::blocks_for(self.live_slabs)
    }

    /// Gives the live slabs the ids `0..live`: each live slab of a higher id moves (its
    /// page is not copied) to a free lower id, and the array is cut at `live`. Returns the
    /// map of the moves, `map[old - live] = new` (`u32::MAX`: not a live slab), by which
    /// the caller must rewrite every location in a moved slab before the next operation.
    /// Not while evacuating.
    pub fn renumber(&mut self) -> Vec<u32> {
        let live = self.live_slabs;
        let mut low: Vec<u32> = self
            .free_ids
            .iter()
            .copied()
            .filter(|&id| (id as usize) < live)
            .collect();
        let above = (live..self.slabs.len())
            .filter(|&id| self.slabs.get(id).is_some())
            .count();
        // As many free ids below `live` as live slabs above it, unless the counts are
        // broken (then nothing moves; `check_invariants` reports it).
        if above != low.len() {
            return Vec::new();
        }
        let mut map = vec![u32::MAX; self.slabs.len() - live];
        for old in live..self.slabs.len() {
            let Some(new) = (if self.slabs.get(old).is_some() {
                low.pop()
            } else {
                None
            }) else {
                continue;
            };
            let slab = self.slabs.get_mut(old).take();
            if let Some(pos) = slab.as_ref().map(|s| s.partial_pos)
                && pos != NOT_PARTIAL
            {
                self.partial[pos as usize] = new;
            }
            *self.slabs.get_mut(new as usize) = slab;
            map[old - live] = new;
        }
        self.free_ids = Vec::new();
        self.partial.shrink_to_fit();
        self.slabs.truncate(live);
        map
    }

    /// Bytes of bookkeeping this cache holds.
    pub fn metadata_bytes(&self) -> usize {
        self.slabs.metadata_bytes()
            + (self.free_ids.capacity() + self.partial.capacity()) * std::mem::size_of::<u32>()
    }
}
