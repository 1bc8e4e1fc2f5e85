//! Shared objects: several handles naming one stored object (`share`, `free_shared`,
//! `refs`, `object_id`), and inline deduplication (`malloc_dedup`); folding (`fold.rs`)
//! uses the same steps.
//!
//! An object becomes shared by getting an *anchor*: a new entry of its shard's handle
//! table, never handed out, that locates the object (it takes over the object's flags and,
//! with the kernel's layout, its header, which then names the anchor). The entry of the
//! handle that located it so far becomes an *alias* of the anchor, and so does every
//! handle issued for the object later; the anchor's reference count, in the shard's
//! [`Sharing`](crate::sharing::Sharing), counts its aliases. Reads go through the alias to
//! the anchor's location, so compaction moves a shared object once (it only sees located
//! entries). Freeing an alias drops one reference; the last takes the anchor and the
//! object with it. A shared object is read-only for good (`write` refuses its handles with
//! [`Error::Shared`]), even when one handle is left: its anchor stays until the object
//! goes.
//!
//! Across shards. An alias may live in another shard of the object's class than its anchor
//! (a *remote* alias: `fold` and `malloc_dedup` find copies in every shard of a class), and
//! still only one class-shard lock is held at a time:
//!
//! - resolving a remote alias (`read`, `with_object`, `refs`, `object_id`, `share`): read
//!   the alias under its shard's lock, let go, take the anchor's shard lock, check the
//!   anchor is live and use it ([`Pool::with_target`]);
//! - `share` of any alias takes the reference and issues the new alias in the anchor's
//!   shard, in one hold of its lock, so the new handle names the anchor's shard;
//! - `free_shared` of a remote alias frees the alias entry under its shard's lock (its
//!   generation moves on), lets go, then drops the anchor's reference under the anchor's
//!   shard lock, freeing anchor and object with the last;
//! - `malloc_dedup` looks in the content index of its own shard, then of each other shard of
//!   the class, one lock at a time, and a hit issues an alias in the hit's shard;
//! - `fold` takes a reference (a reservation) under the anchor's shard lock before turning
//!   a copy in another shard into an alias of it, and gives it back if the copy changed.
//!
//! This holds because a live alias's reference keeps its anchor live, and a caller never
//! uses a handle while freeing that same handle (the contract of every handle, as in the
//! kernel's zsmalloc: the pool finds stale handles, not a caller's races; a remote anchor
//! found gone is reported as a stale handle). In between the two steps of a remote free
//! or of a fold, an anchor's count may be one more than the aliases naming it; a reference
//! is never missing, so the anchor never goes early.

use std::collections::hash_map::Entry;

use crate::class::ClassGeometry;
use crate::error::{Error, Result};
use crate::fold::ShareStats;
use crate::handle::{AnchorRef, Flags, Handle, Location, Slot};
use crate::pool::{Pool, check_size};
use crate::shard::{Resolved, ShardGuard, ShardInner, Target};
use crate::sharing::{Anchor, content_hash};
use crate::sys::PageRun;
use crate::zspage::set_header;

impl ShardInner {
    /// Takes an indexed located entry out of the content index (its bytes are about to
    /// change or go); the key is the hash of its bytes now.
    pub fn unindex(&mut self, geom: &ClassGeometry, entry: u32) {
        let hash = content_hash(self.object(geom, self.handles.location(entry)));
        if self.sharing.index.get(&hash) == Some(&entry) {
            self.sharing.index.remove(&hash);
        }
        self.handles.set_flag(entry, Flags::INDEXED, false);
    }

    /// Makes the object of the direct entry `entry` (of class shard `pos`) shared: a new
    /// anchor locates it, with its flags and (with headers) in its header, and `entry`
    /// becomes the anchor's one alias; an index entry follows the object to the anchor.
    /// Returns the anchor, or `None` when the handle table is full (nothing changed).
    pub fn make_shared(&mut self, pos: usize, geom: &ClassGeometry, entry: u32) -> Option<u32> {
        let Slot::Located(loc, flags) = self.handles.slot(entry) else {
            unreachable!("sharing alias entry {entry}")
        };
        debug_assert!(!flags.has(Flags::ANCHOR));
        let anchored = Slot::Located(loc, flags.with(Flags::ANCHOR, true));
        let (anchor, anchor_gen) = self.handles.alloc_slot(anchored)?;
        if geom.header > 0 {
            let name = Handle::encode(pos, anchor_gen, anchor).to_raw();
            let meta = self.meta_mut(loc.zspage);
            set_header(meta.run.bytes_mut(), geom.size, loc.obj as usize, name);
        }
        let id = Handle::encode(pos, self.handles.generation(entry), entry).to_raw();
        self.handles.set(
            entry,
            Slot::Alias(AnchorRef {
                shard: pos,
                entry: anchor,
            }),
        );
        self.sharing.anchors.insert(
            anchor,
            Anchor {
                refs: 1,
                id,
                moved: false,
            },
        );
        if flags.has(Flags::INDEXED) {
            self.reindex(geom, loc, entry, anchor);
        }
        Some(anchor)
    }

    /// Hands the content-index slot of the bytes of the object at `loc` from the entry
    /// `from` to `to` (an entry locating the same bytes, so the same key), if `from` holds
    /// it; returns whether it did. The caller sees to the entries' `INDEXED` flags.
    pub fn reindex(&mut self, geom: &ClassGeometry, loc: Location, from: u32, to: u32) -> bool {
        let hash = content_hash(self.object(geom, loc));
        match self.sharing.index.get_mut(&hash) {
            Some(owner) if *owner == from => {
                *owner = to;
                true
            }
            _ => false,
        }
    }

    /// A new alias of `anchor` of this shard (at `pos`): `(entry, generation)`, or `None`
    /// when the table is full.
    pub fn add_alias(&mut self, pos: usize, anchor: u32) -> Option<(u32, u64)> {
        let here = AnchorRef {
            shard: pos,
            entry: anchor,
        };
        let issued = self.handles.alloc_slot(Slot::Alias(here))?;
        self.add_ref(anchor);
        Some(issued)
    }

    /// One more reference to the live anchor `anchor`: its object is shared from now on
    /// (also a moved one, whose one alias could write it so far).
    pub fn add_ref(&mut self, anchor: u32) {
        let count = self.anchor_mut(anchor);
        count.refs += 1;
        count.moved = false;
    }

    /// The bookkeeping of a live anchor.
    pub fn anchor_mut(&mut self, anchor: u32) -> &mut Anchor {
        self.sharing
            .anchors
            .get_mut(&anchor)
            .unwrap_or_else(|| unreachable!("anchor entry {anchor} has no count"))
    }

    /// The anchor of the shared object the direct or anchor entry `owner` locates, making
    /// the object shared if it is not yet; `None` when the table is full.
    pub fn anchor_of(&mut self, pos: usize, geom: &ClassGeometry, owner: u32) -> Option<u32> {
        match self.handles.slot(owner) {
            Slot::Located(_, flags) if flags.has(Flags::ANCHOR) => Some(owner),
            _ => self.make_shared(pos, geom, owner),
        }
    }
}

impl ShardInner {
    /// Drops one reference to the anchor `anchor`; with the last, the anchor and its object
    /// go. Returns whether they went, and the pages of a zspage that emptied, for the caller
    /// to release after unlocking.
    pub fn put_anchor(&mut self, geom: &ClassGeometry, anchor: u32) -> (bool, Option<PageRun>) {
        let count = self.anchor_mut(anchor);
        count.refs -= 1;
        if count.refs > 0 {
            return (false, None);
        }
        self.sharing.anchors.remove(&anchor);
        (true, self.free_located(geom, anchor))
    }

    /// Frees a located entry (a direct handle's, or an anchor without references) and its
    /// object; returns the pages of a zspage that emptied, to release after unlocking.
    pub fn free_located(&mut self, geom: &ClassGeometry, owner: u32) -> Option<PageRun> {
        let Slot::Located(loc, flags) = self.handles.slot(owner) else {
            unreachable!("entry {owner} resolved to an object")
        };
        if flags.has(Flags::INDEXED) {
            self.unindex(geom, owner);
        }
        let owner_gen = self.handles.generation(owner);
        self.handles.free(owner, owner_gen);
        self.release_object(geom, loc)
    }

    /// The entry of the object this shard indexes under `hash` whose capacity bytes are
    /// `data` (compared in full), if there is one.
    fn indexed(&self, geom: &ClassGeometry, hash: u64, data: &[u8]) -> Option<u32> {
        let &owner = self.sharing.index.get(&hash)?;
        holds(self.object(geom, self.handles.location(owner)), data).then_some(owner)
    }

    /// A new handle, in this shard (at `pos`), to the object of entry `owner`.
    fn share_entry(&mut self, pos: usize, geom: &ClassGeometry, owner: u32) -> Result<Handle> {
        let anchor = self
            .anchor_of(pos, geom, owner)
            .ok_or(Error::TooManyObjects)?;
        let (entry, generation) = self.add_alias(pos, anchor).ok_or(Error::TooManyObjects)?;
        Ok(Handle::encode(pos, generation, entry))
    }
}

/// A new handle to the object the shard at `pos` (locked by `inner`) indexes under `hash`
/// with the bytes `data`, if it has one; `None` otherwise. The lookup only reads, so a
/// shard whose state is not made yet (its index is empty) stays unmade.
fn share_indexed(
    inner: &mut ShardGuard<'_>,
    pos: usize,
    geom: &ClassGeometry,
    hash: u64,
    data: &[u8],
) -> Result<Option<Handle>> {
    match inner.indexed(geom, hash, data) {
        Some(owner) => inner.share_entry(pos, geom, owner).map(Some),
        None => Ok(None),
    }
}

impl Pool {
    /// Another handle naming the object `handle` names. The object becomes shared: it is
    /// read-only (`write` through any of its handles fails with [`crate::Error::Shared`])
    /// and it is freed with its last handle. The new handle is issued in the shard of the
    /// object's anchor (which may differ from `handle`'s).
    pub fn share(&self, handle: Handle) -> Result<Handle> {
        self.with_target(handle, |pos, shard, inner, target| {
            let anchor = match target {
                Target::Anchor { entry, .. } => entry,
                Target::Direct { entry, .. } => inner
                    .make_shared(pos, &shard.geom, entry)
                    .ok_or(Error::TooManyObjects)?,
            };
            let (entry, generation) = inner.add_alias(pos, anchor).ok_or(Error::TooManyObjects)?;
            Ok(Handle::encode(pos, generation, entry))
        })?
    }

    /// Frees one handle; returns `true` when the object went with it (it was the last handle
    /// naming it), `false` when other handles still name it. A stale handle fails.
    pub fn free_shared(&self, handle: Handle) -> Result<bool> {
        let stale = || Error::StaleHandle(handle);
        let (pos, shard, entry, generation) = self.shard_of(handle)?;
        let geom = shard.geom;
        let mut inner = shard.inner.lock();
        let (gone, released) = match inner.resolve(pos, entry, generation).ok_or_else(stale)? {
            Resolved::Direct(..) => (true, inner.free_located(&geom, entry)),
            Resolved::Alias { anchor, .. } => {
                inner.handles.free(entry, generation);
                inner.put_anchor(&geom, anchor)
            }
            Resolved::Remote(anchor) => {
                // The alias first, under its shard's lock; then the reference, under the
                // anchor's (one lock at a time: the reference keeps the anchor meanwhile).
                inner.handles.free(entry, generation);
                drop(inner);
                let home = self.shards.get(anchor.shard).ok_or_else(stale)?;
                inner = home.inner.lock();
                inner.anchor_location(anchor.entry).ok_or_else(stale)?;
                inner.put_anchor(&geom, anchor.entry)
            }
        };
        drop(inner);
        if let Some(run) = released {
            self.release(run);
        }
        Ok(gone)
    }

    /// Handles naming the object `handle` names (1 for an object nobody shares).
    pub fn refs(&self, handle: Handle) -> Result<u32> {
        self.with_target(handle, |_, _, inner, target| match target {
            Target::Direct { .. } => 1,
            Target::Anchor { entry, .. } => inner.anchor_mut(entry).refs,
        })
    }

    /// A number naming the stored object behind `handle`: equal for every handle that names
    /// the same object, different for different live objects, stable while the object
    /// lives (compaction does not change it).
    ///
    /// It is the raw value of the handle that named the object before it was shared (so
    /// sharing does not change it either); like handles, ids of objects that lived at
    /// different times may repeat only after 2^19 reuses of a handle-table entry.
    pub fn object_id(&self, handle: Handle) -> Result<u64> {
        self.with_target(handle, |_, _, inner, target| match target {
            Target::Direct { .. } => handle.to_raw(),
            Target::Anchor { entry, .. } => inner.anchor_mut(entry).id,
        })
    }

    /// Stores `data` (1..=4096 bytes): in a new object, or — when an object of the same
    /// class in a content index holds the same bytes (found by hash, checked in full) — as
    /// another handle to that object. Returns the handle and whether it shares.
    ///
    /// It looks in the index of the shard `malloc` would use first, then (once the class
    /// is sharded) in each other shard of the class, one lock at a time; a hit in another
    /// shard issues the handle there. A new object is written (as by [`Pool::write`]) and,
    /// unless another object of its shard already holds its hash in the index, indexed.
    /// Either way the object may become shared by a later `malloc_dedup` or `fold`, so
    /// callers must not rewrite it in place.
    pub fn malloc_dedup(&self, data: &[u8]) -> Result<(Handle, bool)> {
        check_size(data.len())?;
        let class_pos = self.table.position_for(data.len());
        // The hash of the object's bytes as they would be stored: `data`, zero-filled to the
        // capacity (trailing zeros do not count, see `content_hash`).
        let hash = content_hash(data);
        let (pos, shard, mut inner) = self.shards.lock_for_malloc(class_pos);
        let geom = shard.geom;
        if let Some(handle) = share_indexed(&mut inner, pos, &geom, hash, data)? {
            return Ok((handle, true));
        }
        // The other shards may hold the bytes too: look while the class is sharded, and
        // whenever this thread was given one of its other shards. That shard was chosen
        // while the class was sharded, and a merge may have unsharded it since: asked only
        // whether it is sharded now, a thread on shard 1 would not look at the home shard,
        // where the bytes are indexed, and would store them again (a race the shuttle test
        // of cross-shard folding found).
        let range = self.shards.class_range(class_pos);
        if pos != range.start || self.shards.is_sharded(class_pos) {
            drop(inner);
            for other in range.filter(|&p| p != pos) {
                let Some(there) = self.shards.get(other) else {
                    continue;
                };
                let mut inner = there.inner.lock();
                if let Some(handle) = share_indexed(&mut inner, other, &geom, hash, data)? {
                    return Ok((handle, true));
                }
            }
            inner = shard.inner.lock();
            // Stored here meanwhile?
            if let Some(handle) = share_indexed(&mut inner, pos, &geom, hash, data)? {
                return Ok((handle, true));
            }
        }
        let (handle, entry, loc, mut inner) = self.malloc_in(pos, shard, inner)?;
        inner.store_object(&geom, loc, data);
        let mut flags = Flags::WRITTEN;
        // A hash already taken (by other bytes, or by the same bytes stored meanwhile while
        // the lock was let go for new pages) keeps its object: this one stays out.
        if let Entry::Vacant(slot) = inner.sharing.index.entry(hash) {
            slot.insert(entry);
            flags = flags.with(Flags::INDEXED, true);
        }
        inner.handles.set(entry, Slot::Located(loc, flags));
        Ok((handle, false))
    }

    /// Shared objects and the content index, now: a shared object counts once, at its
    /// anchor, whose reference count counts its handles in every shard.
    pub fn share_stats(&self) -> ShareStats {
        let mut stats = ShareStats::default();
        for shard in self.shards.iter_made() {
            let inner = shard.inner.lock_for_upkeep();
            for anchor in inner.sharing.anchors.values().filter(|a| a.refs > 1) {
                stats.shared_objects += 1;
                stats.extra_handles += u64::from(anchor.refs - 1);
            }
            stats.index_entries += inner.sharing.index.len() as u64;
            stats.index_bytes += inner.sharing.metadata_bytes() as u64;
        }
        stats
    }
}

/// Does an object's capacity hold exactly `data` followed by zeros (what storing `data`
/// leaves there)?
fn holds(object: &[u8], data: &[u8]) -> bool {
    object.len() >= data.len()
        && object[..data.len()] == *data
        && object[data.len()..].iter().all(|&b| b == 0)
}
