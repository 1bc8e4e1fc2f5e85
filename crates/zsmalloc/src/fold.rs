//! Folding (seed 004): a pass over the pool that finds written objects with identical bytes
//! and keeps one of each, every handle of the others becoming another handle to the one
//! kept; the zspages this empties, and what compacting the folded shards then frees, go
//! back to the OS (`pages_folded`). Shared objects themselves are in `share.rs`.
//!
//! Per size class, from the largest down (as `compact`), over all the class's shards (a
//! copy in one shard is folded into an object kept in another), in two phases that each
//! hold one class-shard lock at a time, for a bounded batch, so every other operation goes
//! on alongside:
//!
//! 1. *scan*: hash the capacity bytes of every written object (each located entry: a
//!    direct handle's or an anchor) of each shard of the class, `SCAN_BATCH` table
//!    entries per hold, into a local list of `(hash, shard, entry, generation)`;
//! 2. *fold*: sort the list by hash; in each run of equal hashes, keep the objects met
//!    first (anchors first, then by shard; up to `MAX_KEEPERS` different contents per
//!    hash) and fold every later object whose bytes, compared in full now, equal a kept
//!    one's: the kept object becomes shared if it is not yet, the later object's entry
//!    becomes an alias of its anchor, and the later object's place is freed. Each candidate
//!    is checked again after every gap (still live, same generation, still written and
//!    located), since anything may have happened in between; a lock is held for at most
//!    `FOLD_BATCH` steps.
//!
//! A later object D in the kept object K's shard is folded in one hold of that lock. When K
//! is in another shard (T) than D (S), without ever holding both locks:
//!
//! 1. under S: check D, copy its bytes;
//! 2. under T: check K (following it to its anchor if it became shared), compare its bytes
//!    with D's copy (unless K is an anchor whose bytes are known: anchors are read-only);
//!    if equal, make K shared if it is not yet and take a *reservation*: one more
//!    reference to its anchor, so the anchor stays whatever happens to its other handles;
//! 3. under S: check D again (live, same generation, direct, written, bytes equal to the
//!    copy) and turn its entry into an alias of (T, anchor), freeing D's place; if D
//!    changed, take the lock of T again and give the reservation back (dropping the
//!    anchor with it, if every other handle went meanwhile).
//!
//! An anchor is never folded into another object (its aliases would have to follow, and
//! aliases never name aliases); it can only be kept. Then every shard that lost objects is
//! compacted. Never-written objects are skipped: their bytes are not the caller's.

use std::collections::hash_map::Entry;
use std::sync::atomic::Ordering;

use crossbeam_utils::CachePadded;
use serde::{Deserialize, Serialize};

use crate::class::ClassGeometry;
use crate::handle::{AnchorRef, Flags, Location, Slot};
use crate::pool::Pool;
use crate::shard::{ClassShard, ShardInner, UpkeepGuard};
use crate::sharing::content_hash;
use crate::sys::PageRun;

/// What one [`Pool::fold`] pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoldReport {
    /// Objects the pass hashed.
    pub objects_scanned: u64,
    /// Objects the pass freed because an identical object now serves their handle.
    pub objects_folded: u64,
    /// Bytes of those objects (their class size).
    pub bytes_folded: u64,
    /// Pages the pass gave back to the OS (the zspages folding emptied, and what compacting
    /// the folded classes freed): seed 004's `pages_folded`.
    pub pages_freed: u64,
}

/// The pool's shared objects and its content index, now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShareStats {
    /// Stored objects that more than one handle names.
    pub shared_objects: u64,
    /// Handles naming shared objects beyond one per object (the objects sharing saves).
    pub extra_handles: u64,
    /// Objects in the content index (`malloc_dedup`'s candidates).
    pub index_entries: u64,
    /// Bytes of the index and of the reference counts (included in `metadata_bytes`).
    pub index_bytes: u64,
}

/// Table entries hashed per hold of a shard lock (scan phase).
const SCAN_BATCH: usize = 1024;
/// Candidates checked per hold of a shard lock (fold phase).
const FOLD_BATCH: usize = 1024;
/// Different contents kept per content hash: with a real hash one is plenty; the bound
/// keeps a run of colliding hashes linear.
const MAX_KEEPERS: usize = 8;

/// An object the scan hashed.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    hash: u64,
    entry: u32,
    generation: u32,
    /// Its shard, among the class's shards.
    shard: u16,
    anchor: bool,
}

/// An object kept in a run of equal hashes: the first met with its bytes.
#[derive(Debug)]
struct Keeper {
    /// Its shard among the class's, its located entry and the entry's generation.
    shard: usize,
    entry: u32,
    generation: u64,
    /// Its bytes, once known while it is an anchor (read-only, so they stay right).
    bytes: Option<Box<[u8]>>,
}

impl Pool {
    /// Scans every size class and folds identical written objects into one (seed 004),
    /// across the shards of each class, then compacts the shards that lost objects. Runs
    /// alongside every other operation, holding one class-shard lock at a time, for one
    /// bounded step.
    pub fn fold(&self) -> FoldReport {
        let mut report = FoldReport::default();
        for class_pos in (0..self.table.classes().len()).rev() {
            self.fold_class(class_pos, &mut report);
        }
        self.pages_folded
            .fetch_add(report.pages_freed, Ordering::Relaxed);
        report
    }

    /// Pages given back by folding since the pool was made (seed 004's `pages_folded`).
    pub fn pages_folded(&self) -> u64 {
        self.pages_folded.load(Ordering::Relaxed)
    }

    /// Folds one size class (class `class_pos` of the table), adding to `report`.
    fn fold_class(&self, class_pos: usize, report: &mut FoldReport) {
        let range = self.shards.class_range(class_pos);
        let shards = self.shards.slice(range.clone());
        let mut seen = Vec::new();
        for (i, shard) in shards.iter().enumerate() {
            scan(shard, i as u16, &mut seen);
        }
        report.objects_scanned += seen.len() as u64;
        if seen.len() < 2 {
            return;
        }
        seen.sort_unstable_by_key(|c| (c.hash, !c.anchor, c.shard, c.entry));
        let mut folder = Folder {
            first: range.start,
            geom: shards[0].geom,
            cursor: Cursor {
                pool: self,
                shards,
                held: None,
                budget: 0,
                released: Vec::new(),
                pages: 0,
            },
            copy: Vec::new(),
            folded: 0,
            lost: vec![false; shards.len()],
        };
        for group in seen.chunk_by(|a, b| a.hash == b.hash) {
            if group.len() < 2 {
                continue;
            }
            let mut keepers: Vec<Keeper> = Vec::new();
            for candidate in group {
                folder.fold_one(candidate, &mut keepers);
            }
        }
        folder.cursor.unlock();
        let mut pages = folder.cursor.pages;
        for (shard, _) in shards.iter().zip(&folder.lost).filter(|(_, lost)| **lost) {
            pages += self.compact_shard(shard);
        }
        report.objects_folded += folder.folded;
        report.bytes_folded += folder.folded * folder.geom.size as u64;
        report.pages_freed += pages as u64;
    }
}

/// The scan phase: the content hash of every written located entry of the shard (`index`
/// among its class's shards), added to `seen`.
fn scan(shard: &ClassShard, index: u16, seen: &mut Vec<Candidate>) {
    let geom = shard.geom;
    let mut start = 0;
    loop {
        let inner = shard.inner.lock_for_upkeep();
        let end = (start + SCAN_BATCH).min(inner.handles.entries());
        if start >= end {
            return;
        }
        for (entry, generation, slot) in inner.handles.iter_range(start..end) {
            if let Slot::Located(loc, flags) = slot
                && flags.has(Flags::WRITTEN)
            {
                seen.push(Candidate {
                    hash: content_hash(inner.object(&geom, loc)),
                    entry,
                    generation: generation as u32,
                    shard: index,
                    anchor: flags.has(Flags::ANCHOR),
                });
            }
        }
        start = end;
    }
}

/// The one class-shard lock folding holds, kept across steps on the same shard for up to
/// [`FOLD_BATCH`] steps; pages of emptied zspages are given back whenever it is let go.
struct Cursor<'a> {
    pool: &'a Pool,
    shards: &'a [CachePadded<ClassShard>],
    /// The shard (among the class's) whose lock is held, and the lock.
    held: Option<(usize, UpkeepGuard<'a>)>,
    /// Steps left in this hold.
    budget: usize,
    /// Runs to give back once no lock is held, and the pages given back so far.
    released: Vec<PageRun>,
    pages: usize,
}

impl Cursor<'_> {
    /// The state of shard `shard`, under its lock: the lock held already, or taken after
    /// letting go of the one held (never two at once).
    fn lock(&mut self, shard: usize) -> &mut ShardInner {
        let stay = self.budget > 0 && matches!(&self.held, Some((s, _)) if *s == shard);
        if !stay {
            self.unlock();
            self.held = Some((shard, self.shards[shard].inner.lock_for_upkeep()));
        }
        self.budget -= 1;
        match &mut self.held {
            Some((_, inner)) => inner,
            None => unreachable!("a lock was just taken"),
        }
    }

    /// Lets go of the lock held, if any, and gives the pages waiting for it back.
    fn unlock(&mut self) {
        self.held = None;
        self.budget = FOLD_BATCH;
        let pool = self.pool;
        self.pages += self
            .released
            .drain(..)
            .map(|run| pool.release(run))
            .sum::<usize>();
    }
}

/// The fold phase of one class.
struct Folder<'a> {
    /// The position of the class's first shard, and the class.
    first: usize,
    geom: ClassGeometry,
    cursor: Cursor<'a>,
    /// A copy of the candidate's bytes, to compare with objects of other shards.
    copy: Vec<u8>,
    folded: u64,
    /// Per shard of the class: did it lose objects (so it is compacted)?
    lost: Vec<bool>,
}

/// What folding a candidate into a kept object of another shard came to.
enum Remote {
    Folded,
    /// The candidate changed or went: nothing more to do with it.
    Changed,
    NoMatch,
}

impl Folder<'_> {
    /// Folds `candidate` into the first of `keepers` with the same bytes, or keeps it.
    fn fold_one(&mut self, candidate: &Candidate, keepers: &mut Vec<Keeper>) {
        let geom = self.geom;
        let s = usize::from(candidate.shard);
        let pos = self.first + s;
        let generation = u64::from(candidate.generation);
        let inner = self.cursor.lock(s);
        let Some(Slot::Located(loc, flags)) = inner.handles.get(candidate.entry, generation) else {
            return;
        };
        if !flags.has(Flags::WRITTEN) {
            return;
        }
        refresh_local(inner, pos, s, keepers);
        let bytes = inner.object(&geom, loc);
        let same = keepers.iter().position(|k| {
            k.shard == s
                && k.entry != candidate.entry
                && inner.object(&geom, inner.handles.location(k.entry)) == bytes
        });
        let anchor = flags.has(Flags::ANCHOR);
        if let Some(i) = same {
            // Anchors are only ever kept (their aliases would have to follow).
            if !anchor
                && let Some(run) = fold_local(
                    inner,
                    pos,
                    &geom,
                    candidate.entry,
                    loc,
                    flags,
                    &mut keepers[i],
                )
            {
                self.cursor.released.extend(run);
                self.folded += 1;
                self.lost[s] = true;
            }
            return;
        }
        let remote = keepers.iter().any(|k| k.shard != s);
        let keep = |keepers: &mut Vec<Keeper>, bytes: Option<Box<[u8]>>| {
            if keepers.len() < MAX_KEEPERS {
                keepers.push(Keeper {
                    shard: s,
                    entry: candidate.entry,
                    generation,
                    bytes,
                });
            }
        };
        if !remote && !anchor {
            keep(keepers, None);
            return;
        }
        self.copy.clear();
        self.copy.extend_from_slice(bytes);
        if anchor {
            // Its bytes stay as they are while it lives: known for later comparisons. (Not
            // a moved object's, which its one handle may still write: `merge.rs`.)
            let moved = inner
                .sharing
                .anchors
                .get(&candidate.entry)
                .is_some_and(|a| a.moved);
            if !keepers
                .iter()
                .any(|k| k.bytes.as_deref() == Some(&self.copy[..]))
            {
                keep(keepers, (!moved).then(|| self.copy.as_slice().into()));
            }
            return;
        }
        let indexed = flags.has(Flags::INDEXED);
        if let Remote::NoMatch = self.fold_remote(candidate, indexed, keepers) {
            keep(keepers, None);
        }
    }

    /// Folds `candidate` (not an anchor; its bytes in `self.copy`) into a kept object of
    /// another shard with the same bytes, if there is one: see the module docs.
    fn fold_remote(
        &mut self,
        candidate: &Candidate,
        indexed: bool,
        keepers: &mut Vec<Keeper>,
    ) -> Remote {
        let geom = self.geom;
        let s = usize::from(candidate.shard);
        let mut i = 0;
        while i < keepers.len() {
            let t = keepers[i].shard;
            let known_other = keepers[i]
                .bytes
                .as_deref()
                .is_some_and(|b| b != &self.copy[..]);
            if t == s || known_other {
                i += 1;
                continue;
            }
            let home = self.first + t;
            let inner = self.cursor.lock(t);
            let anchor = match reserve(inner, home, &geom, &mut keepers[i], &self.copy, indexed) {
                Reserve::Gone => {
                    keepers.remove(i);
                    continue;
                }
                Reserve::Differs => {
                    i += 1;
                    continue;
                }
                Reserve::Full => return Remote::Changed,
                Reserve::Taken(anchor) => anchor,
            };
            let target = AnchorRef {
                shard: home,
                entry: anchor,
            };
            let inner = self.cursor.lock(s);
            if let Some(run) = alias_remote(inner, &geom, candidate, target, &self.copy) {
                self.cursor.released.extend(run);
                self.folded += 1;
                self.lost[s] = true;
                return Remote::Folded;
            }
            // It changed: the reservation goes back.
            let (_, run) = self.cursor.lock(t).put_anchor(&geom, anchor);
            self.cursor.released.extend(run);
            return Remote::Changed;
        }
        Remote::NoMatch
    }
}

/// Keepers of shard `s` (at position `pos`) may have gone, or become shared (follow them to
/// their anchor) since; one that became an alias of another shard's anchor is let go.
fn refresh_local(inner: &ShardInner, pos: usize, s: usize, keepers: &mut Vec<Keeper>) {
    keepers.retain_mut(|k| {
        if k.shard != s {
            return true;
        }
        match inner.handles.get(k.entry, k.generation) {
            Some(Slot::Located(..)) => true,
            Some(Slot::Alias(anchor)) if anchor.shard == pos => {
                (k.entry, k.generation) = (anchor.entry, inner.handles.generation(anchor.entry));
                true
            }
            _ => false,
        }
    });
}

/// Folds the direct entry `entry` (at `loc`, with `flags`) into `keeper`, of the same shard
/// (at `pos`): returns `None` if the table is full, else the pages of a zspage this emptied.
fn fold_local(
    inner: &mut ShardInner,
    pos: usize,
    geom: &ClassGeometry,
    entry: u32,
    loc: Location,
    flags: Flags,
    keeper: &mut Keeper,
) -> Option<Option<PageRun>> {
    let anchor = inner.anchor_of(pos, geom, keeper.entry)?;
    (keeper.entry, keeper.generation) = (anchor, inner.handles.generation(anchor));
    // The anchor has the same bytes, so the same key: it takes the candidate's place.
    if flags.has(Flags::INDEXED) && inner.reindex(geom, loc, entry, anchor) {
        inner.handles.set_flag(anchor, Flags::INDEXED, true);
    }
    inner.handles.set(
        entry,
        Slot::Alias(AnchorRef {
            shard: pos,
            entry: anchor,
        }),
    );
    inner.add_ref(anchor);
    Some(inner.release_object(geom, loc))
}

/// What taking a reservation on a kept object came to.
enum Reserve {
    /// The kept object went.
    Gone,
    /// Its bytes differ from the candidate's.
    Differs,
    /// The handle table is full: no anchor could be made.
    Full,
    /// A reference to this anchor is taken.
    Taken(u32),
}

/// Step 2 of a fold across shards, under the lock of `keeper`'s shard (at `pos`): if the
/// kept object still holds `bytes`, makes it shared if it is not yet and takes a reference
/// to its anchor. If the candidate was indexed (`indexed`), the anchor takes its place in
/// this shard's index when the anchor is not indexed and the bytes' hash is free here.
fn reserve(
    inner: &mut ShardInner,
    pos: usize,
    geom: &ClassGeometry,
    keeper: &mut Keeper,
    bytes: &[u8],
    indexed: bool,
) -> Reserve {
    let loc = match inner.handles.get(keeper.entry, keeper.generation) {
        Some(Slot::Located(loc, _)) => loc,
        Some(Slot::Alias(anchor)) if anchor.shard == pos => {
            let generation = inner.handles.generation(anchor.entry);
            (keeper.entry, keeper.generation) = (anchor.entry, generation);
            inner.handles.location(anchor.entry)
        }
        _ => return Reserve::Gone,
    };
    if keeper.bytes.is_none() && inner.object(geom, loc) != bytes {
        return Reserve::Differs;
    }
    let Some(anchor) = inner.anchor_of(pos, geom, keeper.entry) else {
        return Reserve::Full;
    };
    (keeper.entry, keeper.generation) = (anchor, inner.handles.generation(anchor));
    keeper.bytes.get_or_insert_with(|| bytes.into());
    inner.add_ref(anchor);
    if indexed
        && let Slot::Located(loc, flags) = inner.handles.slot(anchor)
        && !flags.has(Flags::INDEXED)
        && let Entry::Vacant(slot) = inner.sharing.index.entry(content_hash(bytes))
    {
        slot.insert(anchor);
        inner
            .handles
            .set(anchor, Slot::Located(loc, flags.with(Flags::INDEXED, true)));
    }
    Reserve::Taken(anchor)
}

/// Step 3 of a fold across shards, under the candidate's shard lock: if the candidate is
/// still the direct, written object with `bytes` it was, its entry becomes an alias of
/// `target` (whose reference is reserved) and its place is freed; returns the pages of a
/// zspage this emptied. `None`: it changed, nothing was done.
fn alias_remote(
    inner: &mut ShardInner,
    geom: &ClassGeometry,
    candidate: &Candidate,
    target: AnchorRef,
    bytes: &[u8],
) -> Option<Option<PageRun>> {
    let generation = u64::from(candidate.generation);
    let Some(Slot::Located(loc, flags)) = inner.handles.get(candidate.entry, generation) else {
        return None;
    };
    if !flags.has(Flags::WRITTEN) || flags.has(Flags::ANCHOR) || inner.object(geom, loc) != bytes {
        return None;
    }
    if flags.has(Flags::INDEXED) {
        inner.unindex(geom, candidate.entry);
    }
    inner.handles.set(candidate.entry, Slot::Alias(target));
    Some(inner.release_object(geom, loc))
}

#[cfg(test)]
mod tests;
