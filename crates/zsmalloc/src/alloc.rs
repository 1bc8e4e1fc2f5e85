//! Allocation: `malloc`, `write`, `read`, `with_object` and `free` (the kernel's
//! `zs_malloc`/`obj_malloc`, `zs_obj_write`, `zs_obj_read_begin`/`_end` and
//! `zs_free`/`obj_free`).
//!
//! A `malloc` takes the fullest zspage with room in its class shard, or a new zspage whose
//! pages it gets without the shard lock held; it takes an entry of the shard's handle table
//! and, with the kernel's layout, writes the handle into the object's header. The other
//! operations decode the handle (shard, entry, generation), check the entry's generation
//! under the shard lock and reach the object through the entry's location. A `free` that
//! empties a zspage gives its pages back at once, after the lock is released.

use crate::class::ClassGeometry;
use crate::error::{Error, Result};
use crate::handle::{Handle, Location};
use crate::pool::{Pool, check_size};
use crate::shard::ClassShard;
use crate::zspage::{ZsPage, set_header};

impl Pool {
    /// The class shard a handle names, and its entry and generation; the entry's
    /// generation is checked later, under the shard's lock.
    fn shard_of(&self, handle: Handle) -> Result<(&ClassShard, u32, u64)> {
        let stale = || Error::StaleHandle(handle);
        let (pos, generation, entry) = handle.decode().ok_or_else(stale)?;
        let shard = self.shards.get(pos).ok_or_else(stale)?;
        Ok((shard, entry, generation))
    }

    /// Allocates an object of `size` bytes (1..=4096) and returns its handle. The object's
    /// contents are unspecified until written.
    pub fn malloc(&self, size: usize) -> Result<Handle> {
        check_size(size)?;
        let class_pos = self.table.position_for(size);
        let (pos, shard, mut inner) = self.shards.lock_for_malloc(class_pos);
        let geom = shard.geom;
        let huge = geom.is_huge();
        let id = match inner.fullest_with_room(None) {
            Some(id) => id,
            None => {
                // Get the pages without holding the shard lock, as the kernel does.
                drop(inner);
                let run = self.alloc_run(geom.pages_per_zspage)?;
                inner = shard.inner.lock();
                inner.add_zspage(ZsPage::new(run, geom.objs_per_zspage))
            }
        };
        let obj = inner.meta_mut(id).take_free(geom.size, huge);
        let loc = Location { zspage: id, obj };
        let Some((entry, generation)) = inner.handles.alloc(loc) else {
            inner.meta_mut(id).put_free(geom.size, huge, obj);
            // A zspage made for this object alone must not stay behind empty.
            if inner.meta(id).inuse == 0 {
                let run = inner.remove_zspage(id);
                drop(inner);
                self.release(run);
            }
            return Err(Error::TooManyObjects);
        };
        inner.epoch += 1;
        let handle = Handle::encode(pos, generation, entry);
        let meta = inner.meta_mut(id);
        if geom.header > 0 {
            set_header(
                meta.run.bytes_mut(),
                geom.size,
                obj as usize,
                handle.to_raw(),
            );
        }
        inner.fix_group(id);
        Ok(handle)
    }

    /// Stores `data` at the start of the object (`zs_obj_write`).
    pub fn write(&self, handle: Handle, data: &[u8]) -> Result<()> {
        let (shard, entry, generation) = self.shard_of(handle)?;
        let geom = shard.geom;
        check_len(&geom, data.len())?;
        let mut inner = shard.inner.lock();
        let loc = inner
            .handles
            .get(entry, generation)
            .ok_or(Error::StaleHandle(handle))?;
        let off = data_offset(&geom, loc.obj);
        inner.meta_mut(loc.zspage).run.bytes_mut()[off..off + data.len()].copy_from_slice(data);
        Ok(())
    }

    /// Lends the object's first `len` bytes to `f` (`zs_obj_read_begin`/`_end`). Zspages are
    /// virtually contiguous here, so every object is borrowed in place, never copied.
    ///
    /// `f` runs under the class-shard lock: it must not call back into the pool.
    pub fn with_object<R>(
        &self,
        handle: Handle,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let (shard, entry, generation) = self.shard_of(handle)?;
        let geom = shard.geom;
        check_len(&geom, len)?;
        let inner = shard.inner.lock();
        let loc = inner
            .handles
            .get(entry, generation)
            .ok_or(Error::StaleHandle(handle))?;
        let off = data_offset(&geom, loc.obj);
        Ok(f(&inner.meta(loc.zspage).run.bytes()[off..off + len]))
    }

    /// Copies the object's first `buf.len()` bytes into `buf`.
    pub fn read(&self, handle: Handle, buf: &mut [u8]) -> Result<()> {
        self.with_object(handle, buf.len(), |bytes| buf.copy_from_slice(bytes))
    }

    /// Bytes of caller data the object behind `handle` can hold.
    pub fn capacity(&self, handle: Handle) -> Result<usize> {
        let (shard, entry, generation) = self.shard_of(handle)?;
        shard
            .inner
            .lock()
            .handles
            .get(entry, generation)
            .ok_or(Error::StaleHandle(handle))?;
        Ok(shard.geom.capacity())
    }

    /// Frees the object; the handle becomes stale. A zspage left empty goes back to the OS.
    pub fn free(&self, handle: Handle) -> Result<()> {
        let (shard, entry, generation) = self.shard_of(handle)?;
        let geom = shard.geom;
        let released = {
            let mut inner = shard.inner.lock();
            let loc = inner
                .handles
                .free(entry, generation)
                .ok_or(Error::StaleHandle(handle))?;
            inner.epoch += 1;
            let meta = inner.meta_mut(loc.zspage);
            if meta.inuse == 1 {
                meta.inuse = 0;
                Some(inner.remove_zspage(loc.zspage))
            } else {
                meta.put_free(geom.size, geom.is_huge(), loc.obj);
                inner.fix_group(loc.zspage);
                None
            }
        };
        if let Some(run) = released {
            self.release(run);
        }
        Ok(())
    }
}

/// `len` bytes of caller data fit in an object of the class.
fn check_len(geom: &ClassGeometry, len: usize) -> Result<()> {
    if len > geom.capacity() {
        Err(Error::TooLarge {
            len,
            capacity: geom.capacity(),
        })
    } else {
        Ok(())
    }
}

/// Byte offset of an object's caller data inside its zspage.
fn data_offset(geom: &ClassGeometry, obj: u16) -> usize {
    obj as usize * geom.size + geom.header
}
