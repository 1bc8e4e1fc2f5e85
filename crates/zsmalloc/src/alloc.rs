//! Allocation: `malloc`, `write`, `read`, `with_object` and `free` (the kernel's
//! `zs_malloc`/`obj_malloc`, `zs_obj_write`, `zs_obj_read_begin`/`_end` and
//! `zs_free`/`obj_free`).
//!
//! A `malloc` takes the fullest zspage with room in its class shard, or a new zspage whose
//! pages it gets without the shard lock held; it takes an entry of the shard's handle table
//! and, with the kernel's layout, writes the handle into the object's header. The other
//! operations decode the handle (shard, entry, generation), check the entry's generation
//! under the shard lock and reach the object through the entry's location — or, for a
//! handle to a shared object (an alias), through its anchor's (`share.rs`), which may be in
//! another shard of the class: then the alias's shard lock is let go before the anchor's
//! shard lock is taken ([`Pool::with_target`]), so no operation holds two shard locks.
//!
//! A `write` stores the caller's bytes at the start of the object and zero-fills the rest of
//! its capacity, so two objects of a class hold equal capacities exactly when every read of
//! them is equal (what folding and deduplication compare); it marks the object written
//! (never-written objects are never folded) and refuses a shared object, which is
//! read-only (but writes a merged one, whose anchor is in its class's home shard, where its
//! one handle leads: `merge.rs`). A `free` is `free_shared` (`share.rs`): the object goes with its last handle,
//! and a zspage it empties gives its pages back at once, after the lock is released.

use crate::class::ClassGeometry;
use crate::error::{Error, Result};
use crate::handle::{Flags, Handle, Location, Slot};
use crate::pool::{Pool, check_size};
use crate::shard::{ClassShard, Resolved, ShardGuard, ShardInner, Target};
use crate::zspage::{ZsPage, set_header};

impl Pool {
    /// The class shard a handle names, its position, and the handle's entry and
    /// generation; the entry's generation is checked later, under the shard's lock.
    pub(crate) fn shard_of(&self, handle: Handle) -> Result<(usize, &ClassShard, u32, u64)> {
        let stale = || Error::StaleHandle(handle);
        let (pos, generation, entry) = handle.decode().ok_or_else(stale)?;
        let shard = self.shards.get(pos).ok_or_else(stale)?;
        Ok((pos, shard, entry, generation))
    }

    /// Runs `f` under the lock of the class shard that locates the object `handle` names,
    /// with that shard's position, the shard, its state and the object's [`Target`]: the
    /// handle's own shard, or for an alias of an anchor in another shard of the class, the
    /// anchor's. The alias's lock is let go before the anchor's is taken (one shard lock at
    /// a time); the alias's reference keeps the anchor meanwhile, as long as the caller does
    /// not free the handle while using it (the contract of every handle, as in the
    /// kernel's zsmalloc; breaking it is found out, as a stale handle).
    pub(crate) fn with_target<R>(
        &self,
        handle: Handle,
        f: impl FnOnce(usize, &ClassShard, &mut ShardInner, Target) -> R,
    ) -> Result<R> {
        let decoded = self.shard_of(handle)?;
        self.with_decoded_target(handle, decoded, f)
    }

    /// [`Pool::with_target`] for a handle [`Pool::shard_of`] decoded already.
    fn with_decoded_target<'a, R>(
        &'a self,
        handle: Handle,
        (pos, shard, entry, generation): (usize, &'a ClassShard, u32, u64),
        f: impl FnOnce(usize, &ClassShard, &mut ShardInner, Target) -> R,
    ) -> Result<R> {
        let stale = || Error::StaleHandle(handle);
        let mut inner = shard.inner.lock();
        let anchor = match inner.resolve(pos, entry, generation).ok_or_else(stale)? {
            Resolved::Direct(loc, _) => {
                let target = Target::Direct { entry, loc };
                return Ok(f(pos, shard, &mut inner, target));
            }
            Resolved::Alias { anchor, loc } => {
                let target = Target::Anchor { entry: anchor, loc };
                return Ok(f(pos, shard, &mut inner, target));
            }
            Resolved::Remote(anchor) => anchor,
        };
        drop(inner);
        let home = self.shards.get(anchor.shard).ok_or_else(stale)?;
        let mut inner = home.inner.lock();
        let loc = inner.anchor_location(anchor.entry).ok_or_else(stale)?;
        let target = Target::Anchor {
            entry: anchor.entry,
            loc,
        };
        Ok(f(anchor.shard, home, &mut inner, target))
    }

    /// Allocates an object of `size` bytes (1..=4096) and returns its handle. The object's
    /// contents are unspecified until written.
    pub fn malloc(&self, size: usize) -> Result<Handle> {
        check_size(size)?;
        let class_pos = self.table.position_for(size);
        let (pos, shard, inner) = self.shards.lock_for_malloc(class_pos);
        let (handle, _, _, _) = self.malloc_in(pos, shard, inner)?;
        Ok(handle)
    }

    /// Allocates an object in class shard `pos`, whose lock `inner` is; returns its handle,
    /// its entry, its place and the lock, which it let go of and took again if it needed new pages.
    pub(crate) fn malloc_in<'a>(
        &'a self,
        pos: usize,
        shard: &'a ClassShard,
        mut inner: ShardGuard<'a>,
    ) -> Result<(Handle, u32, Location, ShardGuard<'a>)> {
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
        Ok((handle, entry, loc, inner))
    }

    /// Stores `data` at the start of the object and zero-fills the rest of its capacity
    /// (`zs_obj_write`); the object counts as written from now on, so folding and
    /// deduplication may share it. A handle to a shared object is refused with
    /// [`Error::Shared`]: shared objects are read-only.
    pub fn write(&self, handle: Handle, data: &[u8]) -> Result<()> {
        self.store(handle, data, true)
    }

    /// Stores `data` like [`Pool::write`], but the object stays out of folding and
    /// deduplication: for bytes whose meaning is not in the bytes alone, such as an object
    /// holding the handles of other objects (a piece of a chain: two pieces with equal bytes
    /// still own different objects after them, so one must never serve both).
    pub fn write_opaque(&self, handle: Handle, data: &[u8]) -> Result<()> {
        self.store(handle, data, false)
    }

    /// `write` and `write_opaque`: `foldable` says whether the object counts as written.
    fn store(&self, handle: Handle, data: &[u8], foldable: bool) -> Result<()> {
        let (pos, shard, entry, generation) = self.shard_of(handle)?;
        let geom = shard.geom;
        check_len(&geom, data.len())?;
        let mut inner = shard.inner.lock();
        let (owner, loc, flags) = match inner.resolve(pos, entry, generation) {
            None => return Err(Error::StaleHandle(handle)),
            Some(Resolved::Alias { .. }) => return Err(Error::Shared(handle)),
            Some(Resolved::Direct(loc, flags)) => (entry, loc, flags),
            Some(Resolved::Remote(anchor)) => {
                // A moved object (`merge.rs`) is written where its anchor is, while no
                // other handle names it; any other remote alias's object is shared.
                drop(inner);
                let home = self
                    .shards
                    .get(anchor.shard)
                    .ok_or(Error::StaleHandle(handle))?;
                inner = home.inner.lock();
                let loc = inner
                    .anchor_location(anchor.entry)
                    .ok_or(Error::StaleHandle(handle))?;
                if !inner.anchor_mut(anchor.entry).moved {
                    return Err(Error::Shared(handle));
                }
                let Slot::Located(_, flags) = inner.handles.slot(anchor.entry) else {
                    unreachable!("a live anchor is located")
                };
                (anchor.entry, loc, flags)
            }
        };
        if flags.has(Flags::INDEXED) {
            // Its bytes change: out of the content index first, by its old hash.
            inner.unindex(&geom, owner);
        }
        inner.store_object(&geom, loc, data);
        inner.handles.set_flag(owner, Flags::WRITTEN, foldable);
        Ok(())
    }

    /// Lends the object's first `len` bytes to `f` (`zs_obj_read_begin`/`_end`). Zspages are
    /// virtually contiguous here, so every object is borrowed in place, never copied.
    ///
    /// `f` runs under the lock of the class shard holding the object (for a shared object,
    /// its anchor's shard): it must not call back into the pool.
    pub fn with_object<R>(
        &self,
        handle: Handle,
        len: usize,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        let decoded = self.shard_of(handle)?;
        check_len(&decoded.1.geom, len)?;
        // Every shard of a class has the class's geometry.
        self.with_decoded_target(handle, decoded, |_, home, inner, target| {
            f(&inner.object(&home.geom, target.location())[..len])
        })
    }

    /// Copies the object's first `buf.len()` bytes into `buf`.
    pub fn read(&self, handle: Handle, buf: &mut [u8]) -> Result<()> {
        self.with_object(handle, buf.len(), |bytes| buf.copy_from_slice(bytes))
    }

    /// Bytes of caller data the object behind `handle` can hold.
    pub fn capacity(&self, handle: Handle) -> Result<usize> {
        let (pos, shard, entry, generation) = self.shard_of(handle)?;
        // A live alias's anchor is live: the handle's own shard tells.
        shard
            .inner
            .lock()
            .resolve(pos, entry, generation)
            .ok_or(Error::StaleHandle(handle))?;
        Ok(shard.geom.capacity())
    }

    /// Frees the handle; it becomes stale. The object goes with its last handle (see
    /// [`Pool::free_shared`]), and a zspage left empty goes back to the OS.
    pub fn free(&self, handle: Handle) -> Result<()> {
        self.free_shared(handle).map(drop)
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
