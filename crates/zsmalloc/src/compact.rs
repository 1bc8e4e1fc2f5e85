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
//! built once per compaction of a shard and kept across holds of the shard lock, while
//! `malloc` and `free` go on between them: an entry is checked against the handle table
//! before its object moves (one freed, made an alias or moved by another compaction since
//! is dropped from the index), and a zspage that the index missed objects of (stored since
//! it was built) is noticed when it does not come out empty, and the index is built anew.
//! So a pass over the handle table is paid once per compaction, not once per hold, which
//! under a steady stream of frees (a uswap region frees a slot per fault) was every hold.
//! The shard lock is held for steps that move up to [`HOLD_BYTES`] at a time (a step
//! empties one zspage or fills one), so a `malloc`, `free` or read of the same shard waits
//! for a few microseconds of copying at most, not for a batch of whole zspages.

use std::sync::atomic::Ordering;

use crate::class::ClassGeometry;
use crate::handle::Location;
use crate::index::ObjectIndex;
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
                let made = || shards.iter().rev().filter(|s| s.inner.is_made());
                let packed: usize = made().map(|s| self.pack_shard(s)).sum();
                let merged = self.merge_class(class_pos);
                let shortened: usize = made().map(|s| self.compact_shard(s)).sum();
                (packed + shortened) as isize + merged
            })
            .sum();
        let freed = freed.max(0) as usize;
        self.pages_compacted
            .fetch_add(freed as u64, Ordering::Relaxed);
        freed
    }

    /// Compacts one class shard (the kernel's `__zs_compact`, then shortening); returns the
    /// pages freed. A shard left with nothing lets go of its bookkeeping
    /// ([`release_if_empty`]).
    pub(crate) fn compact_shard(&self, shard: &ClassShard) -> usize {
        let freed = self.pack_shard(shard) + self.shorten_partial(shard);
        if shard.inner.is_made() {
            release_if_empty(shard);
        }
        freed
    }

    /// Moves objects out of the emptiest zspages of a class shard into the fullest ones until
    /// at most one is partly used; returns the pages freed.
    fn pack_shard(&self, shard: &ClassShard) -> usize {
        self.pack_shard_with(shard, None)
    }

    /// [`pack_shard`](Self::pack_shard) starting from `index` (tests: one gone stale).
    fn pack_shard_with(&self, shard: &ClassShard, mut index: Option<ObjectIndex>) -> usize {
        let geom = shard.geom;
        let mut freed = 0;
        // Each step empties a zspage or fills one; bound the steps so that threads freeing
        // into this class all the while cannot keep compaction going forever.
        let mut steps = 2 * shard.inner.lock_for_upkeep().zspage_count + 1;
        let mut released = Vec::new();
        let mut done = false;
        // The object index: one pass over the handle table, kept across lock holds (see the
        // module's comment).
        while !done {
            if index.is_none() {
                index = Some(ObjectIndex::build(shard));
            }
            {
                let mut inner = shard.inner.lock_for_upkeep();
                let mut moved = 0;
                while moved < HOLD_BYTES {
                    let Some(objects) = index.as_mut() else {
                        // Built anew below, outside the lock.
                        break;
                    };
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
                    objects.fit(&inner);
                    moved += migrate(&mut inner, &geom, src, dst, objects) * geom.size;
                    inner.fix_group(dst);
                    if inner.meta(src).inuse == 0 {
                        released.push(inner.remove_zspage(src));
                    } else {
                        let d = inner.meta(dst);
                        if d.inuse < d.objs {
                            // Objects stored since the index was built: build it anew.
                            index = None;
                        }
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
        self.shorten_partial_with(shard, None)
    }

    /// [`shorten_partial`](Self::shorten_partial) starting from `index` (tests: one gone
    /// stale).
    fn shorten_partial_with(&self, shard: &ClassShard, mut index: Option<ObjectIndex>) -> usize {
        let geom = shard.geom;
        if geom.pages_per_zspage == 1 {
            return 0;
        }
        let candidates: Vec<u32> = {
            let inner = shard.inner.lock_for_upkeep();
            (GROUP_EMPTY + 1..GROUP_FULL)
                .flat_map(|g| inner.groups[g as usize].iter().copied())
                .collect()
        };
        let mut freed: isize = 0;
        for src in candidates {
            // Built outside the lock; anew after a zspage it missed objects of.
            let objects = index.get_or_insert_with(|| ObjectIndex::build(shard));
            let wanted = {
                let inner = shard.inner.lock_for_upkeep();
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
                let mut inner = shard.inner.lock_for_upkeep();
                match inner.zspages.get(src as usize).and_then(Option::as_ref) {
                    Some(m)
                        if m.inuse > 0 && m.inuse as usize <= objs && wanted < m.run.pages() =>
                    {
                        let dst = inner.add_zspage(ZsPage::new(run, objs));
                        objects.fit(&inner);
                        migrate(&mut inner, &geom, src, dst, objects);
                        // Everything fits, so `src` is empty now, unless the index missed
                        // objects stored since it was built: then it is built anew for the
                        // next, and what moved stays in `dst` (which goes if nothing did).
                        if inner.meta(src).inuse == 0 {
                            inner.fix_group(dst);
                            Some(inner.remove_zspage(src))
                        } else {
                            index = None;
                            inner.fix_group(src);
                            if inner.meta(dst).inuse == 0 {
                                Some(inner.remove_zspage(dst))
                            } else {
                                inner.fix_group(dst);
                                None
                            }
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

/// Bytes of objects compaction moves per hold of a shard lock (then it lets waiters in):
/// about 2–4 µs of copying. Holds of 32 whole zspages (up to 2 MiB) kept a uswap region's
/// faults waiting 130–200 µs for their reads.
pub(crate) const HOLD_BYTES: usize = 32 * 1024;

/// Moves objects from `src` into `dst` until `src` is empty or `dst` is full, re-pointing
/// their handles (the kernel's `migrate_zspage`); returns how many moved. An in-object
/// header moves with the object's bytes and stays right, since the handle does not change.
fn migrate(
    inner: &mut ShardInner,
    geom: &ClassGeometry,
    src_id: u32,
    dst_id: u32,
    index: &mut ObjectIndex,
) -> usize {
    let huge = geom.is_huge();
    let size = geom.size;
    let mut cur = index.take(src_id);
    // Take both zspages out of the class to borrow them side by side; put them back after.
    let mut src = take(inner, src_id);
    let mut dst = take(inner, dst_id);
    let mut moved = 0;
    while let Some((entry, Location { obj, .. }, _)) = index.next_object(&mut cur, &inner.handles) {
        if dst.inuse == dst.objs {
            index.push(src_id, entry);
            continue;
        }
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
        moved += 1;
    }
    inner.zspages[src_id as usize] = Some(src);
    inner.zspages[dst_id as usize] = Some(dst);
    moved
}

fn take(inner: &mut ShardInner, id: u32) -> ZsPage {
    inner.zspages[id as usize]
        .take()
        .unwrap_or_else(|| unreachable!("compacting free zspage id {id}"))
}

/// Lets go of the bookkeeping of a made class shard left with no zspage and no live handle
/// (its lists, zspage ids and handle table keep the capacity of their fullest day
/// otherwise: threads that came and went, each writing into shards of its own, left
/// `metadata_bytes` growing from 4.5 to 9.9 MB over eight fill-and-discard cycles of 150
/// MB through new NBD connections). The shard stays made; a thread that stores in it
/// again grows the lists anew.
fn release_if_empty(shard: &ClassShard) {
    let mut inner = shard.inner.lock_for_upkeep();
    // The handle table lets go only when no entry is live (a remote alias has no zspage
    // here), and only once: the rest goes with it.
    if inner.zspage_count == 0 && inner.handles.release_if_empty() {
        inner.zspages = Vec::new();
        inner.free_ids = Vec::new();
        inner.groups = Default::default();
        inner.sharing = Default::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Handle, PoolConfig};

    fn object(i: usize, size: usize) -> Vec<u8> {
        (0..size).map(|j| (i * 131 + j * 7) as u8).collect()
    }

    fn check(pool: &Pool, live: &[(Handle, Vec<u8>)]) {
        pool.check_invariants().unwrap();
        let mut buf = Vec::new();
        for (h, data) in live {
            buf.resize(data.len(), 0);
            pool.read(*h, &mut buf).unwrap();
            assert_eq!(&buf, data, "{h:?}");
        }
    }

    /// An index built before frees (entries that leave, some reused for new objects
    /// elsewhere) and mallocs (objects it misses): packing and shortening with it move
    /// only objects still where it saw them, keep every byte, leave no empty zspage, and
    /// still give pages back.
    #[test]
    fn compaction_with_an_index_gone_stale_keeps_every_object() {
        let pool = Pool::with_config(PoolConfig {
            shards: 1,
            ..PoolConfig::default()
        })
        .unwrap();
        let pos = pool
            .classes()
            .classes()
            .iter()
            .position(|c| c.pages_per_zspage >= 4 && c.size >= 500)
            .unwrap();
        let geom = pool.classes().classes()[pos];
        let shard = &pool.shards.slice(pool.shards.class_range(pos))[0];
        let new = |i: usize| {
            let data = object(i, geom.size);
            let h = pool.malloc(geom.size).unwrap();
            pool.write(h, &data).unwrap();
            (h, data)
        };
        // Full zspages, all indexed; then every other object freed, and new objects stored
        // into the room with the freed entries (each listed under the zspage of the object
        // it named before): an index that lists entries now naming objects elsewhere, and
        // misses objects it has no list for.
        let all: Vec<_> = (0..8 * geom.objs_per_zspage).map(new).collect();
        let stale = ObjectIndex::build(shard);
        let mut live = Vec::new();
        for (i, x) in all.into_iter().enumerate() {
            if i % 2 == 0 {
                pool.free(x.0).unwrap();
            } else {
                live.push(x);
            }
        }
        for i in 0..geom.objs_per_zspage {
            live.push(new(10_000 + i));
        }
        let before = pool.total_pages();
        let freed = pool.pack_shard_with(shard, Some(stale));
        assert!(freed > 0);
        check(&pool, &live);
        assert!(pool.total_pages() < before);

        // Shortening: objects stored into the partly used zspage after the index was built.
        let stale = ObjectIndex::build(shard);
        let partial = {
            let inner = shard.inner.lock_for_upkeep();
            (GROUP_EMPTY + 1..GROUP_FULL)
                .flat_map(|g| inner.groups[g as usize].iter().copied())
                .map(|id| inner.meta(id).inuse as usize)
                .sum::<usize>()
        };
        for i in 0..(geom.objs_per_zspage - partial % geom.objs_per_zspage).min(2) {
            live.push(new(20_000 + i));
        }
        pool.shorten_partial_with(shard, Some(stale));
        check(&pool, &live);
        pool.compact();
        check(&pool, &live);
        for (h, _) in live {
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
    }
}
