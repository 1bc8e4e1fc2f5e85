//! The interface every object store offers, so that zram runs on zsmalloc or on an
//! alternative allocator (afmalloc, zbud, plain malloc) and the lab can compare them:
//! [`Backend`] (and its implementation for zsmalloc's [`Pool`]). [`crate::open`] (in
//! `open.rs`, so that the allocators' files, which implement this trait, are not imported
//! back from here) builds the one a `PoolConfig` names.
//!
//! Sharing (several handles naming one object: [`Backend::share`], inline deduplication,
//! folding) is zsmalloc's; the other allocators keep the defaults below, under which every
//! object has exactly one handle and the sharing operations answer
//! [`Error::Unsupported`]. zram refuses `dedup` and `fold` on them up front.

use crate::allocator::Allocator;
use crate::error::{Error, Result};
use crate::fold::{FoldReport, ShareStats};
use crate::handle::Handle;
use crate::pool::Pool;

/// An allocator of variable-size objects (1..=4096 bytes) named by stable handles.
///
/// Every implementation: gives emptied pages back to the OS (so process RSS follows
/// [`Backend::total_pages`]); refuses a size of 0 or over 4096 with
/// [`Error::InvalidSize`] and a freed or foreign handle with [`Error::StaleHandle`], never
/// panicking; keeps handles valid across compaction; is safe to call from many threads.
///
/// A freed handle is refused until its table entry has been reused as many times as its
/// generation field counts (zsmalloc 2^19, malloc 2^20, afmalloc 2^21–2^22, zbud 2^24);
/// after that a handle kept past its `free` may name a new object (a bounded window, as
/// with any generation counter; zram never keeps one).
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// Which allocator this is.
    fn allocator(&self) -> Allocator;
    /// Allocates an object of `size` bytes (1..=4096).
    fn malloc(&self, size: usize) -> Result<Handle>;
    /// Stores `data` at the start of the object.
    fn write(&self, handle: Handle, data: &[u8]) -> Result<()>;
    /// Stores `data`, and keeps the object out of folding and deduplication (its bytes do
    /// not say everything about it: a chain link).
    fn write_opaque(&self, handle: Handle, data: &[u8]) -> Result<()> {
        self.write(handle, data)
    }
    /// Lends the object's first `len` bytes to `f`, which must not call back into the
    /// allocator (zsmalloc, zbud and malloc run it under a lock).
    fn read_with(&self, handle: Handle, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()>;
    /// Copies the object's first `buf.len()` bytes into `buf`.
    fn read(&self, handle: Handle, buf: &mut [u8]) -> Result<()> {
        self.read_with(handle, buf.len(), &mut |bytes| buf.copy_from_slice(bytes))
    }
    /// Frees the object.
    fn free(&self, handle: Handle) -> Result<()>;
    /// Compacts; returns pages given back to the OS.
    fn compact(&self) -> usize;
    /// Pages of memory the objects occupy (the kernel's `zs_get_total_pages`): what the
    /// allocator holds from the OS for them.
    fn total_pages(&self) -> usize;
    /// Pages compaction could free now.
    fn freeable_pages(&self) -> usize;
    /// Pages compaction could free once the pool stops growing (zsmalloc: also by
    /// shortening partly used zspages); `freeable_pages` where there is nothing more.
    fn compactable_pages(&self) -> usize {
        self.freeable_pages()
    }
    /// Objects of this size or larger cost as much as a page: zram stores them raw.
    fn huge_class_size(&self) -> usize;
    /// Bookkeeping bytes outside `total_pages` (handle tables, records, indexes).
    fn metadata_bytes(&self) -> usize;
    /// Pages freed by compaction so far.
    fn pages_compacted(&self) -> u64;
    /// Live objects.
    fn objects(&self) -> usize;
    /// Bytes of memory an object of `size` bytes takes (its size class, rounded chunks, …):
    /// recompression keeps a new encoding only when it takes less.
    fn footprint(&self, size: usize) -> Result<usize>;
    /// Pages of freed memory kept resident for reuse (counted in no object).
    fn cached_pages(&self) -> usize {
        0
    }
    /// Gives the cached pages back to the OS; returns how many.
    fn trim(&self) -> usize {
        0
    }
    /// Checks the allocator's internal identities; the first broken one as an error.
    fn check_invariants(&self) -> std::result::Result<(), String>;

    /// Whether handles may share objects ([`Backend::share`], deduplication, folding).
    fn supports_sharing(&self) -> bool {
        false
    }
    /// Another handle to the object `handle` names.
    fn share(&self, handle: Handle) -> Result<Handle> {
        let _ = handle;
        Err(self.unsupported("sharing objects"))
    }
    /// Frees a handle; returns whether the object went with it (its last handle).
    fn free_shared(&self, handle: Handle) -> Result<bool> {
        self.free(handle).map(|()| true)
    }
    /// Handles naming the object `handle` names.
    fn refs(&self, handle: Handle) -> Result<u32> {
        self.read_with(handle, 0, &mut |_| {}).map(|()| 1)
    }
    /// An id of the object `handle` names, stable for the object's life.
    fn object_id(&self, handle: Handle) -> Result<u64> {
        self.read_with(handle, 0, &mut |_| {})
            .map(|()| handle.to_raw())
    }
    /// Allocates an object holding `data`, or shares a stored object holding the same
    /// bytes; returns the handle and whether it shares.
    fn malloc_dedup(&self, data: &[u8]) -> Result<(Handle, bool)> {
        let _ = data;
        Err(self.unsupported("deduplication"))
    }
    /// Folds identical objects into one.
    fn fold(&self) -> Result<FoldReport> {
        Err(self.unsupported("folding"))
    }
    /// Pages freed by folding so far.
    fn pages_folded(&self) -> u64 {
        0
    }
    /// What sharing costs and saves now.
    fn share_stats(&self) -> ShareStats {
        ShareStats::default()
    }
    /// The zsmalloc pool, when this is one (its classes, its stats table).
    fn as_zsmalloc(&self) -> Option<&Pool> {
        None
    }
    /// The error for an operation this allocator does not offer.
    fn unsupported(&self, what: &'static str) -> Error {
        Error::Unsupported {
            allocator: self.allocator().name(),
            what,
        }
    }
}

impl Backend for Pool {
    fn allocator(&self) -> Allocator {
        Allocator::Zsmalloc
    }
    fn malloc(&self, size: usize) -> Result<Handle> {
        Pool::malloc(self, size)
    }
    fn write(&self, handle: Handle, data: &[u8]) -> Result<()> {
        Pool::write(self, handle, data)
    }
    fn write_opaque(&self, handle: Handle, data: &[u8]) -> Result<()> {
        Pool::write_opaque(self, handle, data)
    }
    fn read_with(&self, handle: Handle, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        self.with_object(handle, len, f)
    }
    fn read(&self, handle: Handle, buf: &mut [u8]) -> Result<()> {
        Pool::read(self, handle, buf)
    }
    fn free(&self, handle: Handle) -> Result<()> {
        Pool::free(self, handle)
    }
    fn compact(&self) -> usize {
        Pool::compact(self)
    }
    fn total_pages(&self) -> usize {
        Pool::total_pages(self)
    }
    fn freeable_pages(&self) -> usize {
        Pool::freeable_pages(self)
    }
    fn compactable_pages(&self) -> usize {
        Pool::compactable_pages(self)
    }
    fn huge_class_size(&self) -> usize {
        Pool::huge_class_size(self)
    }
    fn metadata_bytes(&self) -> usize {
        Pool::metadata_bytes(self)
    }
    fn pages_compacted(&self) -> u64 {
        Pool::pages_compacted(self)
    }
    fn objects(&self) -> usize {
        self.stats().obj_used
    }
    fn footprint(&self, size: usize) -> Result<usize> {
        Ok(self.lookup_class(size)?.size)
    }
    fn cached_pages(&self) -> usize {
        Pool::cached_pages(self)
    }
    fn trim(&self) -> usize {
        Pool::trim(self)
    }
    fn check_invariants(&self) -> std::result::Result<(), String> {
        Pool::check_invariants(self)
    }
    fn supports_sharing(&self) -> bool {
        true
    }
    fn share(&self, handle: Handle) -> Result<Handle> {
        Pool::share(self, handle)
    }
    fn free_shared(&self, handle: Handle) -> Result<bool> {
        Pool::free_shared(self, handle)
    }
    fn refs(&self, handle: Handle) -> Result<u32> {
        Pool::refs(self, handle)
    }
    fn object_id(&self, handle: Handle) -> Result<u64> {
        Pool::object_id(self, handle)
    }
    fn malloc_dedup(&self, data: &[u8]) -> Result<(Handle, bool)> {
        Pool::malloc_dedup(self, data)
    }
    fn fold(&self) -> Result<FoldReport> {
        Ok(Pool::fold(self))
    }
    fn pages_folded(&self) -> u64 {
        Pool::pages_folded(self)
    }
    fn share_stats(&self) -> ShareStats {
        Pool::share_stats(self)
    }
    fn as_zsmalloc(&self) -> Option<&Pool> {
        Some(self)
    }
}
