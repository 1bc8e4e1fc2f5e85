//! Merging shards (beyond the kernel): when threads stop contending for a sharded class,
//! the objects in the partly used zspages of its other shards move into its *home* shard
//! (its first), so that the class again holds at most about one partly used zspage, as an
//! unsharded class does, and the pool's pages do not grow with the number of threads that
//! once wrote into it.
//!
//! Handles stay stable. A handle names its shard, so an object that leaves its shard leaves
//! its entry behind: the object becomes located by a new *anchor* in the home shard (the
//! mechanism of shared objects, `share.rs`), and its entry becomes that anchor's one alias,
//! a remote alias (as those `fold` and `malloc_dedup` make). Every operation on the handle
//! then goes from its shard to the anchor's, as for any remote alias. The anchor is marked
//! *moved* ([`Anchor::moved`](crate::sharing::Anchor)): while no other handle was added to
//! it, its one alias may still `write` the object, which is the caller's alone. An anchor
//! of a shared object never moves (its aliases, in any shard, would have to follow), nor do
//! the other objects of its zspage (which could not empty). New pages are taken only for
//! objects of full-length zspages, which all empty, so a merge never takes more pages than
//! it gives back; a short zspage's objects only fill room the home shard has.
//!
//! Locks. Moving an object holds two class-shard locks at once, the other shard's and
//! then the home shard's: only merging does this, and only in that order, and every other
//! operation holds at most one (`pool.rs`), so no cycle of waits can form. Shards exist
//! only with `Locking::Sharded`, where class-shard locks take no pool lock. New pages for
//! the home shard are got with neither lock held.
//!
//! When. [`Pool::compact`] merges each class, after packing its shards (so each other
//! shard has at most one partly used zspage left to move) and before packing the home
//! shard once more and shortening (so that nothing moves into a short zspage); then the class counts as unsharded again, so new objects go to the
//! home shard until threads contend for it anew. The device's automatic compaction counts
//! what merging would give back ([`Pool::compactable_pages`]) once the pool stops growing,
//! or at once when a thread that allocated outside the home shards ends (it tells the
//! compactor: [`crate::watch_shard_thread_exits`]): the end of a write burst merges what
//! it spread.

use crate::class::ClassGeometry;
use crate::compact::HOLD_BYTES;
use crate::handle::{AnchorRef, Flags, Handle, Location, Slot};
use crate::index::ObjectIndex;
use crate::pool::Pool;
use crate::shard::{ClassShard, ShardInner};
use crate::sharing::{Anchor, content_hash};
use crate::sys::{PAGE_SIZE, PageRun};
use crate::zspage::{GROUP_EMPTY, GROUP_FULL, ZsPage, set_header};

impl Pool {
    /// Moves the objects of the partly used zspages of the other shards of class
    /// `class_pos` into its home shard; marks the class unsharded. Returns the pages given
    /// back less those taken (the caller compacts the home shard after).
    pub(crate) fn merge_class(&self, class_pos: usize) -> isize {
        let range = self.shards.class_range(class_pos);
        let home_pos = range.start;
        let shards = self.shards.slice(range);
        let Some((home, others)) = shards.split_first() else {
            return 0;
        };
        let mut net = 0;
        for (i, shard) in others.iter().enumerate() {
            if !shard.inner.is_made() {
                continue;
            }
            let step = self.merge_shard((home_pos, home), (home_pos + 1 + i, shard));
            net += step.given as isize - step.taken as isize;
        }
        self.shards.unshard(class_pos);
        net
    }

    /// Moves the objects of `shard`'s partly used zspages (but anchors) into `home`, up to
    /// [`HOLD_BYTES`] per hold of the two locks, the objects found with an [`ObjectIndex`]
    /// (built a few thousand entries per hold): a pass over the handle table and every move
    /// in one hold kept a uswap region's faults waiting 140–340 µs.
    fn merge_shard(
        &self,
        (home_pos, home): (usize, &ClassShard),
        (pos, shard): (usize, &ClassShard),
    ) -> MergeStep {
        let geom = shard.geom;
        let mut step = MergeStep::default();
        let mut spare: Option<PageRun> = None;
        let mut released = Vec::new();
        let mut index: Option<ObjectIndex> = None;
        // Holds of the locks: enough for what there is to move at the first, plus a round
        // for each new zspage it needs, so that threads allocating in `shard` all the while
        // cannot keep the merge going forever.
        let mut holds = None;
        loop {
            let index = index.get_or_insert_with(|| ObjectIndex::build(shard));
            let mut stop = Stop::Done;
            {
                let mut src = shard.inner.lock_for_upkeep();
                let zspages = movable(&src);
                if zspages.is_empty() {
                    break;
                }
                let holds = holds.get_or_insert_with(|| {
                    let objects: usize = zspages.iter().map(|&z| src.meta(z).inuse as usize).sum();
                    objects * geom.size / HOLD_BYTES + 2 * (objects / geom.objs_per_zspage) + 2
                });
                if *holds == 0 {
                    break;
                }
                *holds -= 1;
                index.fit(&src);
                // The second lock: the home shard's, after the other's (see the module docs).
                let mut dst = home.inner.lock_for_upkeep();
                let mut moved = 0;
                for z in zspages {
                    let mut cur = index.take(z);
                    while let Some((entry, loc, flags)) = index.next_object(&mut cur, &src.handles)
                    {
                        if stop != Stop::Done {
                            // Stopped: the rest of the list goes back.
                            index.push(z, entry);
                            continue;
                        }
                        if moved >= HOLD_BYTES {
                            stop = Stop::Hold;
                            index.push(z, entry);
                            continue;
                        }
                        // New pages only for objects of full-length zspages, which all
                        // empty: a merge never takes more pages than it gives back. A short
                        // zspage's objects only fill room the home shard has.
                        let short = src.meta(z).run.pages() < geom.pages_per_zspage;
                        let room = dst.fullest_with_room(None).or_else(|| {
                            let run = if short { None } else { spare.take() }?;
                            Some(dst.add_zspage(ZsPage::new(run, geom.objs_per_zspage)))
                        });
                        let Some(to) = room else {
                            index.push(z, entry);
                            if !short {
                                stop = Stop::OutOfRoom;
                            }
                            continue;
                        };
                        let from = Moving {
                            pos,
                            entry,
                            loc,
                            flags,
                        };
                        match move_object(&mut src, &mut dst, home_pos, &geom, from, to) {
                            Ok(run) => {
                                released.extend(run);
                                moved += geom.size;
                            }
                            Err(run) => {
                                // The home shard's handle table is full: leave the rest.
                                released.extend(run);
                                index.push(z, entry);
                                stop = Stop::TableFull;
                            }
                        }
                    }
                    if stop != Stop::Done {
                        break;
                    }
                }
            }
            for run in released.drain(..) {
                step.given += self.release(run);
            }
            match stop {
                Stop::Done | Stop::TableFull => break,
                Stop::Hold => {}
                Stop::OutOfRoom => {
                    // Pages for the home shard, with neither lock held.
                    match self.alloc_run(geom.pages_per_zspage) {
                        Ok(run) => {
                            step.taken += run.pages();
                            spare = Some(run);
                        }
                        Err(_) => break,
                    }
                }
            }
        }
        if let Some(run) = spare {
            step.given += self.release(run);
        }
        step
    }

    /// Pages merging the shards of every class could give back now, about: per class
    /// with objects in partly used zspages of more than one shard, the pages those zspages
    /// need (once shortened) less the pages their objects need together.
    pub(crate) fn mergeable_pages(&self) -> usize {
        self.shards
            .by_class()
            .filter(|shards| shards.len() > 1)
            .map(|shards| {
                let (mut used, mut pages, mut bytes) = (0, 0, 0);
                for (i, shard) in shards.iter().enumerate() {
                    if !shard.inner.is_made() {
                        continue;
                    }
                    let inner = shard.inner.lock_for_upkeep();
                    // Anchors stay where they are: a shard that has some is left out (an
                    // estimate, which must not promise pages a merge cannot give).
                    if i > 0 && !inner.sharing.anchors.is_empty() {
                        continue;
                    }
                    let size = shard.geom.size;
                    let partial = (GROUP_EMPTY + 1..GROUP_FULL)
                        .flat_map(|g| inner.groups[g as usize].iter())
                        .map(|&id| inner.meta(id).inuse as usize * size);
                    let mut any = false;
                    for b in partial {
                        any = true;
                        pages += b.div_ceil(PAGE_SIZE);
                        bytes += b;
                    }
                    used += usize::from(any);
                }
                if used > 1 {
                    pages.saturating_sub(bytes.div_ceil(PAGE_SIZE))
                } else {
                    0
                }
            })
            .sum()
    }
}

/// What merging one shard did.
#[derive(Debug, Default)]
struct MergeStep {
    /// Pages given back (emptied zspages, an unused spare run).
    given: usize,
    /// Pages taken for the home shard.
    taken: usize,
}

/// The zspages a merge empties out of a shard: its partly used ones that hold no anchor
/// (anchors stay, so such a zspage could not empty).
fn movable(inner: &ShardInner) -> Vec<u32> {
    let anchored: std::collections::HashSet<u32> = inner
        .sharing
        .anchors
        .keys()
        .map(|&anchor| inner.handles.location(anchor).zspage)
        .collect();
    (GROUP_EMPTY + 1..GROUP_FULL)
        .flat_map(|g| inner.groups[g as usize].iter().copied())
        .filter(|z| !anchored.contains(z))
        .collect()
}

/// Why a hold of a merge's locks ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Nothing left to move.
    Done,
    /// It moved [`HOLD_BYTES`]: the others' turn.
    Hold,
    /// The home shard needs a new zspage.
    OutOfRoom,
    /// The home shard's handle table is full.
    TableFull,
}

/// The object a merge moves: its shard's position, its entry there, its place and flags.
#[derive(Debug, Clone, Copy)]
struct Moving {
    pos: usize,
    entry: u32,
    loc: Location,
    flags: Flags,
}

/// Moves one object of `src` (its direct entry `from.entry`) into the zspage `to` (with
/// room) of `dst`, the home shard at `home_pos`: a new moved anchor there locates it, and
/// its entry becomes the anchor's alias. Returns the pages of a zspage of `src` it emptied,
/// to release after unlocking; or, when `dst`'s handle table is full (nothing moved), the
/// pages of `to` if it was left empty.
fn move_object(
    src: &mut ShardInner,
    dst: &mut ShardInner,
    home_pos: usize,
    geom: &ClassGeometry,
    from: Moving,
    to: u32,
) -> Result<Option<PageRun>, Option<PageRun>> {
    let (size, huge) = (geom.size, geom.is_huge());
    let obj = dst.meta_mut(to).take_free(size, huge);
    let loc = Location { zspage: to, obj };
    let anchored = from
        .flags
        .with(Flags::INDEXED, false)
        .with(Flags::ANCHOR, true);
    let Some((anchor, anchor_gen)) = dst.handles.alloc_slot(Slot::Located(loc, anchored)) else {
        dst.meta_mut(to).put_free(size, huge, obj);
        if dst.meta(to).inuse == 0 {
            return Err(Some(dst.remove_zspage(to)));
        }
        dst.fix_group(to);
        return Err(None);
    };
    // The object's bytes (its header too, rewritten below).
    let (at, off) = (from.loc.obj as usize * size, obj as usize * size);
    dst.meta_mut(to).run.bytes_mut()[off..off + size]
        .copy_from_slice(&src.meta(from.loc.zspage).run.bytes()[at..at + size]);
    if geom.header > 0 {
        let name = Handle::encode(home_pos, anchor_gen, anchor).to_raw();
        set_header(dst.meta_mut(to).run.bytes_mut(), size, obj as usize, name);
    }
    if from.flags.has(Flags::INDEXED) {
        // Out of its old shard's index; into the home shard's if its hash is free there.
        src.unindex(geom, from.entry);
        let hash = content_hash(dst.object(geom, loc));
        if let std::collections::hash_map::Entry::Vacant(slot) = dst.sharing.index.entry(hash) {
            slot.insert(anchor);
            dst.handles.set_flag(anchor, Flags::INDEXED, true);
        }
    }
    let id = Handle::encode(from.pos, src.handles.generation(from.entry), from.entry).to_raw();
    dst.sharing.anchors.insert(
        anchor,
        Anchor {
            refs: 1,
            id,
            moved: true,
        },
    );
    src.handles.set(
        from.entry,
        Slot::Alias(AnchorRef {
            shard: home_pos,
            entry: anchor,
        }),
    );
    dst.fix_group(to);
    Ok(src.release_object(geom, from.loc))
}
