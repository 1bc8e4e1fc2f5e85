//! [`Backend`] for [`Afmalloc`]: the object operations, each under the lock of the heap
//! the handle names (see the parent module for the lock order).

use std::sync::atomic::Ordering;

use crossbeam_utils::CachePadded;

use super::heap::Heap;
use super::slab::{MIN_CHUNK, units};
use super::{Afmalloc, table};
use crate::allocator::Allocator;
use crate::backend::Backend;
use crate::error::{Error, Result};
use crate::handle::Handle;
use crate::sync::Mutex;
use crate::sys::{PAGE_SIZE, malloc_trim};

impl Backend for Afmalloc {
    fn allocator(&self) -> Allocator {
        Allocator::Afmalloc
    }

    fn malloc(&self, size: usize) -> Result<Handle> {
        if !(1..=PAGE_SIZE).contains(&size) {
            return Err(Error::InvalidSize(size));
        }
        let (at, mut heap) = self.home();
        let (entry, generation) = heap.malloc(size, &self.source)?;
        drop(heap);
        self.objects.fetch_add(1, Ordering::Relaxed);
        Ok(table::encode(at, generation, entry))
    }

    fn write(&self, handle: Handle, data: &[u8]) -> Result<()> {
        let (mut heap, entry, generation) = self.heap_of(handle)?;
        let object = heap
            .lookup(entry, generation)
            .ok_or(Error::StaleHandle(handle))?;
        heap.write(object, data)
    }

    fn read_with(&self, handle: Handle, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        let mut buf = [0u8; PAGE_SIZE];
        {
            let (heap, entry, generation) = self.heap_of(handle)?;
            let object = heap
                .lookup(entry, generation)
                .ok_or(Error::StaleHandle(handle))?;
            if len > object.size() {
                return Err(Error::TooLarge {
                    len,
                    capacity: object.size(),
                });
            }
            heap.read(object, &mut buf[..len])?;
        }
        f(&buf[..len]);
        Ok(())
    }

    fn read(&self, handle: Handle, buf: &mut [u8]) -> Result<()> {
        let (heap, entry, generation) = self.heap_of(handle)?;
        let object = heap
            .lookup(entry, generation)
            .ok_or(Error::StaleHandle(handle))?;
        heap.read(object, buf)
    }

    fn free(&self, handle: Handle) -> Result<()> {
        let (mut heap, entry, generation) = self.heap_of(handle)?;
        let object = heap
            .lookup(entry, generation)
            .ok_or(Error::StaleHandle(handle))?;
        heap.free(entry, object);
        drop(heap);
        self.objects.fetch_sub(1, Ordering::Relaxed);
        Ok(())
    }

    /// Evacuates sparse slabs, then shrinks each heap's metadata (`shrink.rs`); when that
    /// gave blocks back, asks malloc to return its free memory to the OS (`malloc_trim`),
    /// as it keeps freed 4 KiB blocks otherwise. Returns the slabs (pages) dropped.
    fn compact(&self) -> usize {
        let mut freed = 0;
        let mut shrunk = 0;
        for heap in self.heaps.iter() {
            let mut heap = heap.lock();
            freed += heap.compact(&self.source);
            shrunk += heap.shrink();
        }
        if shrunk > 0 {
            malloc_trim();
        }
        self.pages_compacted
            .fetch_add(freed as u64, Ordering::Relaxed);
        freed
    }

    fn total_pages(&self) -> usize {
        self.source.pages_live()
    }

    fn freeable_pages(&self) -> usize {
        self.heaps.iter().map(|heap| heap.lock().freeable()).sum()
    }

    /// The slabs compaction could free and the metadata blocks (4 KiB) it would give
    /// back from the slab arrays and record stores, so that a quiet pool whose objects
    /// were mostly freed is compacted for its metadata too.
    fn compactable_pages(&self) -> usize {
        self.heaps
            .iter()
            .map(|heap| {
                let heap = heap.lock();
                heap.freeable() + heap.shrinkable_blocks()
            })
            .sum()
    }

    fn huge_class_size(&self) -> usize {
        self.huge_class_size
    }

    fn metadata_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.source.metadata_bytes()
            + self.heaps.len() * std::mem::size_of::<CachePadded<Mutex<Heap>>>()
            + self
                .heaps
                .iter()
                .map(|heap| heap.lock().metadata_bytes())
                .sum::<usize>()
    }

    fn pages_compacted(&self) -> u64 {
        self.pages_compacted.load(Ordering::Relaxed)
    }

    fn objects(&self) -> usize {
        self.objects.load(Ordering::Relaxed)
    }

    fn footprint(&self, size: usize) -> Result<usize> {
        if !(1..=PAGE_SIZE).contains(&size) {
            return Err(Error::InvalidSize(size));
        }
        Ok(units(size) * MIN_CHUNK)
    }

    fn cached_pages(&self) -> usize {
        self.source.cached_pages()
    }

    fn trim(&self) -> usize {
        self.source.trim()
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        let mut live = 0;
        let mut slabs = 0;
        for (i, heap) in self.heaps.iter().enumerate() {
            let heap = heap.lock();
            heap.check().map_err(|e| format!("heap {i}: {e}"))?;
            live += heap.table.live();
            slabs += heap.caches.iter().map(|c| c.live_slabs()).sum::<usize>();
        }
        let objects = self.objects();
        if live != objects {
            return Err(format!("{live} live objects, counted {objects}"));
        }
        let pages = self.source.pages_live();
        if slabs != pages {
            return Err(format!("{slabs} slabs, {pages} pages held"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::PoolConfig;

    #[test]
    fn an_empty_allocator_counts_each_heap_once() {
        let a = Afmalloc::with_config(PoolConfig {
            shards: 16,
            ..PoolConfig::default()
        })
        .unwrap();
        let heaps = 16 * std::mem::size_of::<CachePadded<Mutex<Heap>>>();
        let own = std::mem::size_of::<Afmalloc>() + a.source.metadata_bytes() + heaps;
        let tables: usize = a.heaps.iter().map(|h| h.lock().metadata_bytes()).sum();
        assert_eq!(a.metadata_bytes(), own + tables);
        // The heap struct is counted in the array above, not again by each heap: an empty
        // heap's own figure is its tables alone, less than the struct.
        for h in a.heaps.iter() {
            assert!(h.lock().metadata_bytes() < std::mem::size_of::<Heap>());
        }
    }
}
