//! The interface every object store offers, so that zram can run on zsmalloc or on an
//! alternative allocator (afmalloc-style, plain malloc, zbud) and the lab can compare them.
//!
//! Nothing uses it yet: it is here for the alternative allocators that come next (the
//! layers in the design: "alternative backends … chosen per device"), and zsmalloc's
//! implementation below is the reference they are measured against.

use crate::error::Result;
use crate::handle::Handle;
use crate::pool::Pool;

/// An allocator of variable-size objects named by stable handles.
pub trait Backend: Send + Sync + std::fmt::Debug {
    /// A short name for reports ("zsmalloc", …).
    fn name(&self) -> &'static str;
    /// Allocates an object of `size` bytes (1..=4096).
    fn malloc(&self, size: usize) -> Result<Handle>;
    /// Stores `data` at the start of the object.
    fn write(&self, handle: Handle, data: &[u8]) -> Result<()>;
    /// Lends the object's first `len` bytes to `f`.
    fn read_with(&self, handle: Handle, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()>;
    /// Frees the object.
    fn free(&self, handle: Handle) -> Result<()>;
    /// Compacts; returns pages given back to the OS.
    fn compact(&self) -> usize;
    /// Pages of memory the objects occupy (the kernel's `zs_get_total_pages`).
    fn total_pages(&self) -> usize;
    /// Pages compaction could free now.
    fn freeable_pages(&self) -> usize;
    /// Objects of this size or larger take a whole page: zram stores them uncompressed.
    fn huge_class_size(&self) -> usize;
    /// Bookkeeping bytes outside `total_pages`.
    fn metadata_bytes(&self) -> usize;
    /// Pages freed by compaction so far.
    fn pages_compacted(&self) -> u64;
}

impl Backend for Pool {
    fn name(&self) -> &'static str {
        "zsmalloc"
    }
    fn malloc(&self, size: usize) -> Result<Handle> {
        Pool::malloc(self, size)
    }
    fn write(&self, handle: Handle, data: &[u8]) -> Result<()> {
        Pool::write(self, handle, data)
    }
    fn read_with(&self, handle: Handle, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        self.with_object(handle, len, f)
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
    fn huge_class_size(&self) -> usize {
        Pool::huge_class_size(self)
    }
    fn metadata_bytes(&self) -> usize {
        Pool::metadata_bytes(self)
    }
    fn pages_compacted(&self) -> u64 {
        Pool::pages_compacted(self)
    }
}
