//! afmalloc (seed 003): objects built from power-of-two chunks of page-backed chunk caches,
//! named by a handle to a record of their chunks; compaction moves chunks out of sparse
//! slabs so that whole slabs go back to the OS.
//!
//! # Representation
//!
//! - Memory comes in one-page *slabs* ([`PageRun`](crate::sys::PageRun)s of one page from
//!   the allocator's [`PageSource`]), each serving chunks of one power-of-two size: 8, 16,
//!   …, 4096 bytes, the ten *chunk caches* (`slab.rs`). A page holds a whole number of
//!   chunks, so no page has a tail it cannot use (zsmalloc's zspages do).
//! - An object of `n` bytes takes the chunks of `n` rounded up to 8 written in binary,
//!   largest first: 400 bytes take 256 + 128 + 16; its bytes are laid out across them in
//!   that order (`heap.rs`). Its footprint is `n` rounded up to 8.
//! - Its handle names an entry of a handle table (`table.rs`): one `u64` per object. An
//!   object of one chunk (a power-of-two size in 8-byte units) has the chunk's place in its
//!   word (the seed's tagged handle); any other has its size and the offset of a *record*
//!   in a record store (`records.rs`): one `u32` location (slab id, chunk index) per chunk.
//!   Metadata per object: 8 bytes for a one-chunk object, `8 + 4 × chunks` otherwise (a
//!   1–2 KiB object has 1 to 8 chunks, 4.5 on average: 26 bytes). Besides: 32 bytes per
//!   slab (0.8% of the slabs' memory; 12 bytes per 1.5 KiB object), the tables' spare
//!   room (they grow in 4 KiB blocks, `blocks.rs`: at most a block each) and the page
//!   source's lists of free pages, all counted in
//!   [`Backend::metadata_bytes`](crate::Backend::metadata_bytes). Between compactions
//!   the tables only grow (freed entries wait for reuse); compaction shrinks them to what
//!   the live objects need (`shrink.rs`): it renumbers the slabs and cuts the slab arrays,
//!   packs the record store, and trims the handle table's free entries past the last live
//!   one (live entries cannot move, so free ones between them stay), then asks malloc to
//!   return the freed blocks (`malloc_trim`). `compactable_pages` counts those blocks.
//! - The allocator is split into up to 16 *heaps* (one per CPU by default, or
//!   `PoolConfig::shards`), each a handle table, a record store and ten chunk caches under
//!   one lock. A thread allocates from its own heap (taking another that is free when its
//!   own is busy); an object stays in its heap for life, and its handle names the heap.
//!
//! # Rules
//!
//! Lock order: a heap lock, then the page-source lock (a leaf, taken when a slab is made or
//! dropped). At most one heap lock is held at a time, by every operation, compaction
//! included, which takes each heap's lock in turn for a whole pass over it: a chunk is
//! copied and its owner's word or record updated under the same lock every reader and
//! writer of the object takes, so no one sees it half moved. `read_with` copies the object
//! out under the lock and calls its closure after letting go, so the closure may use the
//! allocator. The object and page counters are atomics, under no lock.
//!
//! Costs of that choice: a slab's page is obtained and given back with the heap lock held
//! (one page at a time), and a compaction pass blocks its heap's other users for the pass
//! (some tens of milliseconds for a heap of 200 000 objects); other heaps stay usable.
//!
//! Sharing objects (several handles to one object) is zsmalloc's: afmalloc keeps the
//! [`Backend`](crate::Backend) defaults, which refuse it.

mod backend;
mod blocks;
mod check;
mod compact;
mod heap;
mod records;
mod shrink;
mod slab;
mod table;

use std::sync::Arc;

use crossbeam_utils::CachePadded;

use crate::config::PoolConfig;
use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::sync::{AtomicU64, AtomicUsize, Mutex, MutexGuard};
use crate::sys::PageSource;
use heap::Heap;
use table::MAX_HEAPS;

/// The afmalloc allocator (see the module docs).
#[derive(Debug)]
pub struct Afmalloc {
    heaps: Box<[CachePadded<Mutex<Heap>>]>,
    source: Arc<PageSource>,
    huge_class_size: usize,
    objects: AtomicUsize,
    pages_compacted: AtomicU64,
}

impl Afmalloc {
    /// An allocator with `config`'s page settings (`populate`, `page_cache_pages`), its
    /// heap count (`shards`) and, so that devices store the same streams on every
    /// allocator, zsmalloc's huge-class watermark for its layout (`chain_size`, `geometry`,
    /// `header`).
    pub fn with_config(config: PoolConfig) -> Result<Self> {
        let huge_class_size = config.huge_class_size()?;
        let heaps = config.shards_or(crate::config::cpus, MAX_HEAPS, "afmalloc")?;
        Ok(Self {
            heaps: (0..heaps)
                .map(|_| CachePadded::new(Mutex::new(Heap::new())))
                .collect(),
            source: PageSource::new(config.populate, config.page_cache_pages, config.fault_ahead),
            huge_class_size,
            objects: AtomicUsize::new(0),
            pages_compacted: AtomicU64::new(0),
        })
    }

    /// A heap to allocate from, locked: this thread's, or the next free one when that is
    /// busy, or this thread's after waiting.
    fn home(&self) -> (usize, MutexGuard<'_, Heap>) {
        let n = self.heaps.len();
        let home = crate::thread_number() % n;
        for i in 0..n {
            let at = (home + i) % n;
            if let Some(heap) = self.heaps[at].try_lock() {
                return (at, heap);
            }
        }
        (home, self.heaps[home].lock())
    }

    /// The heap a handle names, locked, with the handle's entry and generation; an error
    /// for a handle of no heap.
    fn heap_of(&self, handle: Handle) -> Result<(MutexGuard<'_, Heap>, u32, u64)> {
        let (heap, generation, entry) = table::decode(handle).ok_or(Error::StaleHandle(handle))?;
        let heap = self.heaps.get(heap).ok_or(Error::StaleHandle(handle))?;
        Ok((heap.lock(), entry, generation))
    }

    /// Heaps in use.
    pub fn heaps(&self) -> usize {
        self.heaps.len()
    }

    /// Chunks of each size in use (8, 16, …, 4096 bytes), over all heaps.
    pub fn chunks_in_use(&self) -> [usize; 10] {
        let mut out = [0; 10];
        for heap in self.heaps.iter() {
            let heap = heap.lock();
            for (n, cache) in out.iter_mut().zip(&heap.caches) {
                *n += cache.used();
            }
        }
        out
    }
}
