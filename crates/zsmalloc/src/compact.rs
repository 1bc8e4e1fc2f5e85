//! Compaction (the kernel's `zs_compact`): per class shard, from the largest class down,
//! objects move out of the emptiest zspages into the fullest ones (`migrate_zspage`), and
//! emptied zspages go back to the OS; then, beyond the kernel, each partly used zspage that
//! would fit in fewer pages is moved into a *short* zspage of just enough pages; and a
//! sharded class's other shards merge into its home shard (`merge.rs`).
//!
//! Objects need not carry their handle (`Header::Omitted`), so compaction finds the objects
//! of a zspage through an [`ObjectIndex`]: one pass over the shard's handle table threads
//! each zspage's located entries into a list (one per object: a shared object's anchor,
//! not its aliases, which follow the anchor, so a shared object moves once; aliases in other
//! shards of the class name the anchor's entry, which moving does not change). The index is
//! kept right as objects move, and kept across holds of the shard lock while nothing
//! changed which entries locate which objects (the shard's `epoch`).
//! The shard lock is held for a batch of steps at a time, so `malloc` and `free` of the
//! same shard wait at most one batch.

use std::sync::atomic::Ordering;

use crate::class::ClassGeometry;
use crate::handle::Location;
use crate::pool::Pool;
use crate::shard::{ClassShard, ShardInner};
use crate::sys::PAGE_SIZE;
use crate::zspage::{GROUP_EMPTY, GROUP_FULL, ZsPage};

impl Pool {
    /// Compacts every class, from the largest down, moving objects out of the emptiest
    /// zspages into the fullest ones, then moving each partly used zspage that would fit in
    /// fewer pages into a short zspage; a sharded class's other shards then merge their
    /// partly used zspages into its home shard (`merge.rs`). Returns the pages given back
    /// to the OS.
    pub fn compact(&self) -> usize {
        let freed: isize = (0..self.table.classes().len())
            .rev()
            .map(|class_pos| {
                let shards = self.shards.slice(self.shards.class_range(class_pos));
                if let [shard] = shards {
                    return self.compact_shard(shard) as isize;
                }
                // Pack each shard; merge the others' partly used zspages into the home shard
                // (before shortening, so that nothing moves into a short zspage); then pack
                // the home shard again and shorten what is left partly used.
                let packed: usize = shards.iter().rev().map(|s| self.pack_shard(s)).sum();
                let merged = self.merge_class(class_pos);
                let shortened: usize = shards.iter().rev().map(|s| self.compact_shard(s)).sum();
                (packed + shortened) as isize + merged
            })
            .sum();
        let freed = freed.max(0) as usize;
        self.pages_compacted
            .fetch_add(freed as u64, Ordering::Relaxed);
        freed
    }

    /// Compacts one class shard (the kernel's `__zs_compact`, then shortening); returns the
    /// pages freed.
    pub(crate) fn compact_shard(&self, shard: &ClassShard) -> usize {
        self.pack_shard(shard) + self.shorten_partial(shard)
    }

    /// Moves objects out of the emptiest zspages of a class shard into the fullest ones until
    /// at most one is partly used; returns the pages freed.
    fn pack_shard(&self, shard: &ClassShard) -> usize {
        let geom = shard.geom;
        let mut freed = 0;
        // Each step empties a zspage or fills one; bound the steps so that threads freeing
        // into this class all the while cannot keep compaction going forever.
        let mut steps = 2 * shard.inner.lock().zspage_count + 1;
        let mut released = Vec::new();
        let mut done = false;
        // The object index: one pass over the handle table, kept across lock holds while
        // nothing else changed which entries locate which objects (`epoch`: every malloc,
        // free of an object, new anchor, fold and migration bumps it; this compaction
        // follows its own).
        let mut index: Option<(u64, ObjectIndex)> = None;
        while !done {
            {
                let mut inner = shard.inner.lock();
                if index
                    .as_ref()
                    .is_some_and(|(epoch, _)| *epoch != inner.epoch)
                {
                    index = None;
                }
                // Steps per hold of the shard lock: enough that a rebuilt index (a pass
                // over the handle table) costs at most ~1024 entries per step.
                let batch = COMPACT_BATCH.max(inner.handles.entries() / 1024);
                for _ in 0..batch {
                    // Beyond the kernel, which stops once no whole zspage can be freed: go
                    // on until one partly used zspage is left, which `shorten_partial` fits.
                    let picked = inner
                        .fullest_with_room(None)
                        .and_then(|dst| Some((inner.emptiest(Some(dst))?, dst)));
                    let Some((src, dst)) = picked.filter(|_| steps > 0) else {
                        done = true;
                        break;
                    };
                    steps -= 1;
                    let (_, objects) =
                        index.get_or_insert_with(|| (inner.epoch, ObjectIndex::of(&inner)));
                    migrate(&mut inner, &geom, src, dst, objects);
                    // Objects moved: any other compaction of this shard (fold compacts the
                    // shards it folded, alongside `compact`) must rebuild its index; this
                    // one kept its own right.
                    inner.epoch += 1;
                    if let Some((epoch, _)) = index.as_mut() {
                        *epoch = inner.epoch;
                    }
                    inner.fix_group(dst);
                    if inner.meta(src).inuse == 0 {
                        released.push(inner.remove_zspage(src));
                    } else {
                        inner.fix_group(src);
                    }
                }
            }
            // Give the pages back without the shard lock held.
            for run in released.drain(..) {
                freed += self.release(run);
            }
        }
        freed
    }

    /// Beyond the kernel: once a class cannot free a whole zspage any more, each of its
    /// partly used zspages that would fit in fewer pages is moved into a *short* zspage of
    /// just enough pages, and its pages are freed. The kernel leaves these partly used
    /// zspages as they are — up to `chain_size - 1` pages of each class held for nothing.
    /// Returns the pages freed.
    fn shorten_partial(&self, shard: &ClassShard) -> usize {
        let geom = shard.geom;
        if geom.pages_per_zspage == 1 {
            return 0;
        }
        let candidates: Vec<u32> = {
            let inner = shard.inner.lock();
            (GROUP_EMPTY + 1..GROUP_FULL)
                .flat_map(|g| inner.groups[g as usize].iter().copied())
                .collect()
        };
        let mut freed: isize = 0;
        for src in candidates {
            let wanted = {
                let inner = shard.inner.lock();
                match inner.zspages.get(src as usize).and_then(Option::as_ref) {
                    Some(m) if m.shortenable(geom.size) > 0 => {
                        m.run.pages() - m.shortenable(geom.size)
                    }
                    _ => continue,
                }
            };
            // Get the pages without the shard lock, as malloc does; then check again.
            let Ok(run) = self.alloc_run(wanted) else {
                break;
            };
            let objs = wanted * PAGE_SIZE / geom.size;
            let released = {
                let mut inner = shard.inner.lock();
                match inner.zspages.get(src as usize).and_then(Option::as_ref) {
                    Some(m)
                        if m.inuse > 0 && m.inuse as usize <= objs && wanted < m.run.pages() =>
                    {
                        let dst = inner.add_zspage(ZsPage::new(run, objs));
                        let mut index = ObjectIndex::of(&inner);
                        migrate(&mut inner, &geom, src, dst, &mut index);
                        // Objects moved: another compaction's index is stale now.
                        inner.epoch += 1;
                        inner.fix_group(dst);
                        // Everything fits, so `src` is empty now.
                        debug_assert_eq!(inner.meta(src).inuse, 0);
                        if inner.meta(src).inuse == 0 {
                            Some(inner.remove_zspage(src))
                        } else {
                            inner.fix_group(src);
                            None
                        }
                    }
                    _ => Some(run),
                }
            };
            let given_back = released.map_or(0, |run| self.release(run));
            freed += given_back as isize - wanted as isize;
        }
        freed.max(0) as usize
    }
}

/// Steps of compaction per hold of a shard lock.
const COMPACT_BATCH: usize = 32;

/// The objects of each zspage of a class shard, as lists of located handle entries threaded
/// through `next`, from one pass over its handle table: objects need not carry their handle
/// (`Header::Omitted`), and one pass serves many migrations. Kept right by [`migrate`] while
/// the shard lock is held.
struct ObjectIndex {
    /// Per zspage id: its first entry, or `NIL`.
    first: Vec<u32>,
    /// Per handle entry: the next entry of the same zspage, or `NIL`.
    next: Vec<u32>,
}

const NIL: u32 = u32::MAX;

impl ObjectIndex {
    fn of(inner: &ShardInner) -> Self {
        let mut index = Self {
            first: vec![NIL; inner.zspages.len()],
            next: vec![NIL; inner.handles.entries()],
        };
        for (entry, _, loc, _) in inner.handles.iter_located() {
            index.push(loc.zspage, entry);
        }
        index
    }

    fn push(&mut self, zspage: u32, entry: u32) {
        self.next[entry as usize] = self.first[zspage as usize];
        self.first[zspage as usize] = entry;
    }
}

/// Moves objects from `src` into `dst` until `src` is empty or `dst` is full, re-pointing
/// their handles (the kernel's `migrate_zspage`). An in-object header moves with the
/// object's bytes and stays right, since the handle does not change.
fn migrate(
    inner: &mut ShardInner,
    geom: &ClassGeometry,
    src_id: u32,
    dst_id: u32,
    index: &mut ObjectIndex,
) {
    let huge = geom.is_huge();
    let size = geom.size;
    let mut cur = std::mem::replace(&mut index.first[src_id as usize], NIL);
    // Take both zspages out of the class to borrow them side by side; put them back after.
    let mut src = take(inner, src_id);
    let mut dst = take(inner, dst_id);
    while cur != NIL {
        let entry = cur;
        cur = index.next[entry as usize];
        if dst.inuse == dst.objs {
            index.push(src_id, entry);
            continue;
        }
        let obj = inner.handles.location(entry).obj;
        let new_obj = dst.take_free(size, huge);
        let (from, to) = (obj as usize * size, new_obj as usize * size);
        dst.run.bytes_mut()[to..to + size].copy_from_slice(&src.run.bytes()[from..from + size]);
        inner.handles.relocate(
            entry,
            Location {
                zspage: dst_id,
                obj: new_obj,
            },
        );
        src.put_free(size, huge, obj);
        index.push(dst_id, entry);
    }
    inner.zspages[src_id as usize] = Some(src);
    inner.zspages[dst_id as usize] = Some(dst);
}

fn take(inner: &mut ShardInner, id: u32) -> ZsPage {
    inner.zspages[id as usize]
        .take()
        .unwrap_or_else(|| unreachable!("compacting free zspage id {id}"))
}
