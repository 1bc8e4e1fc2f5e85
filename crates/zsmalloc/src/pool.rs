//! The pool: size classes of zspages, each class shard under its own lock.
//!
//! Where each mechanism lives (as the kernel's `mm/zsmalloc.c` names them):
//!
//! - this file: the [`Pool`], its construction, its class table, and the pages it gets from
//!   and gives back to the page source (`alloc_zspage`/`free_zspage`'s page half);
//! - `shard`: a class shard's zspages, fullness lists and handle table (`struct
//!   size_class`), and which shard a `malloc` uses;
//! - `alloc`: `malloc`, `write`, `read`, `with_object`, `free` (`zs_malloc`/`obj_malloc`,
//!   `zs_obj_write`, `zs_obj_read_begin`, `zs_free`/`obj_free`);
//! - `compact`: `compact`, shortening, the object index and `migrate_zspage`;
//! - `merge`: moving the objects of a sharded class's partly used zspages into its home
//!   shard, during `compact`;
//! - `sharing`, `share`, `fold`: shared objects (several handles, one object), inline
//!   deduplication and folding (seed 004): a shard's anchors and content index, and the
//!   operations on them;
//! - `stats`: the class table rows, metadata and the freeable/shortenable counts
//!   (`zs_stats_size_show`, `zs_can_compact`);
//! - `invariants`: [`Pool::check_invariants`].
//!
//! Lock order (never taken the other way round):
//!
//! 1. a class-shard lock (`ClassShard::inner`) — protects everything of one class shard:
//!    its zspages (their memory and bookkeeping), fullness lists, handle table, reference
//!    counts and content index. At most one is held at a time, by every operation, also
//!    those that cross shards (a handle in one shard naming an anchor in another of its
//!    class): they take the shards' locks one after the other, the alias's first, and
//!    keep the anchor alive in between by a reference (see `share.rs` and `fold.rs`).
//!    Object copies (at most 4 KiB) happen under it; compaction and folding take it per
//!    batch of steps and let go in between. The one exception: merging (`merge.rs`) holds
//!    another shard's lock and then its class's home shard's (the first), never the other
//!    way round; since every other operation holds one, no cycle of waits can form.
//! 2. the page-source lock (`sys::PageSource`) — a leaf, never held while taking another.
//!    Zspage pages are obtained and given back without the class-shard lock held.
//!
//! With [`Locking::Pool`](crate::Locking) every class-shard lock takes the pool's one lock
//! first (0. in this order): the seed's consolidation, under which every operation of any
//! class waits for every other. It is safe because no operation holds two class-shard
//! locks at once.
//!
//! The pool-wide page counters are atomics, taken under no lock.
//!
//! Beyond the kernel, with the default [`Locking::Sharded`](crate::Locking), each size class
//! is split into up to 16 *shards* (`PoolConfig::shards`, 16 by default, each made only once
//! a thread uses it), each with its own lock, zspages and handle table; an object
//! stays in its shard until compaction merges it into its class's home shard. A class uses its first shard until threads contend for it,
//! then each thread its own (see `shard.rs`), so a class one thread uses packs exactly as
//! the kernel's; compaction merges the other shards' partly used zspages back (`merge`). Sharing, deduplication and folding work across the shards of a class.
//!
//! The kernel also has a per-zspage lock so that a mapped object can be read without the
//! class lock; here an object is only borrowed for the span of a closure
//! ([`Pool::with_object`]), under the class-shard lock, which that closure therefore must
//! not re-enter (it would deadlock). Callers who decompress should copy out with
//! [`Pool::read`] when other threads use the same class heavily.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use crossbeam_utils::CachePadded;

use crate::class::{ClassGeometry, ClassTable, MAX_ALLOC_SIZE, MAX_CHAIN_SIZE, MIN_CHAIN_SIZE};
use crate::config::PoolConfig;
use crate::error::{Error, Result};
use crate::shard::{MAX_SHARDS_PER_CLASS, Shards};
use crate::sync::{AtomicU64, AtomicUsize};
use crate::sys::{PageRun, PageSource};

/// A zsmalloc pool.
#[derive(Debug)]
pub struct Pool {
    pub(crate) table: ClassTable,
    pub(crate) shards: Shards,
    pub(crate) source: Arc<PageSource>,
    /// Pages held by zspages.
    pub(crate) pages_allocated: CachePadded<AtomicUsize>,
    /// Pages freed by compaction so far.
    pub(crate) pages_compacted: AtomicU64,
    /// Pages freed by folding so far (its compaction included, which `pages_compacted`
    /// does not count).
    pub(crate) pages_folded: AtomicU64,
}

impl Pool {
    /// A pool whose zspages have at most `chain_size` pages (the kernel's default is 8),
    /// otherwise with the default settings (the zram device's layout: see [`PoolConfig`]).
    pub fn new(chain_size: usize) -> Result<Self> {
        Self::with_config(PoolConfig {
            chain_size,
            ..PoolConfig::default()
        })
    }

    /// A pool with explicit configuration.
    pub fn with_config(config: PoolConfig) -> Result<Self> {
        if !(MIN_CHAIN_SIZE..=MAX_CHAIN_SIZE).contains(&config.chain_size) {
            return Err(Error::InvalidChainSize(config.chain_size));
        }
        let table = ClassTable::with_layout(config.chain_size, config.geometry, config.header);
        let per_class =
            config.shards_or(|| MAX_SHARDS_PER_CLASS, MAX_SHARDS_PER_CLASS, "zsmalloc")?;
        Ok(Self {
            shards: Shards::new(&table, config.locking, per_class),
            table,
            source: PageSource::new(config.populate, config.page_cache_pages, config.fault_ahead),
            pages_allocated: CachePadded::new(AtomicUsize::new(0)),
            pages_compacted: AtomicU64::new(0),
            pages_folded: AtomicU64::new(0),
        })
    }

    /// The class table (geometry of every distinct class).
    pub fn classes(&self) -> &ClassTable {
        &self.table
    }

    /// The chain size the pool was built with.
    pub fn chain_size(&self) -> usize {
        self.table.chain_size()
    }

    /// Smallest size that `malloc` serves from the huge class (the kernel's
    /// `zs_huge_class_size`): zram stores pages that compress to this or more uncompressed.
    pub fn huge_class_size(&self) -> usize {
        self.table.huge_class_size()
    }

    /// The class an object of `size` bytes lands in (`zs_lookup_class_index`).
    pub fn lookup_class(&self, size: usize) -> Result<&ClassGeometry> {
        check_size(size)?;
        Ok(self.table.class_for(size))
    }

    /// Pages held by zspages (the kernel's `zs_get_total_pages`).
    pub fn total_pages(&self) -> usize {
        self.pages_allocated.load(Ordering::Relaxed)
    }

    /// Pages freed by compaction since the pool was made.
    pub fn pages_compacted(&self) -> u64 {
        self.pages_compacted.load(Ordering::Relaxed)
    }

    /// Pages of freed zspages kept resident for reuse (not in `total_pages`).
    pub fn cached_pages(&self) -> usize {
        self.source.cached_pages()
    }

    /// Gives cached free pages back to the OS; returns how many.
    pub fn trim(&self) -> usize {
        self.source.trim()
    }

    /// Pages for a new zspage (call without a class-shard lock).
    #[inline]
    pub(crate) fn alloc_run(&self, pages: usize) -> std::io::Result<PageRun> {
        let run = self.source.alloc(pages)?;
        self.pages_allocated.fetch_add(pages, Ordering::Relaxed);
        Ok(run)
    }

    /// Gives a removed zspage's pages back (call without a class-shard lock); returns how
    /// many.
    #[inline]
    pub(crate) fn release(&self, run: PageRun) -> usize {
        let pages = run.pages();
        self.pages_allocated.fetch_sub(pages, Ordering::Relaxed);
        drop(run);
        pages
    }
}

/// `malloc` sizes are 1..=4096 bytes.
#[inline]
pub(crate) fn check_size(size: usize) -> Result<()> {
    if size == 0 || size > MAX_ALLOC_SIZE {
        Err(Error::InvalidSize(size))
    } else {
        Ok(())
    }
}
