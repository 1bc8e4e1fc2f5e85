//! Folding (seed 004): a pass over the pool that finds written objects with identical bytes
//! and keeps one of each, every handle of the others becoming another handle to the one
//! kept; the zspages this empties, and what compacting the folded classes then frees, go
//! back to the OS (`pages_folded`). Shared objects themselves are in `share.rs`.
//!
//! Per class shard, from the largest class down (as `compact`), in two phases that each
//! hold the shard's lock for a bounded batch at a time, so every other operation goes on
//! alongside:
//!
//! 1. *scan*: hash the capacity bytes of every written object (each located entry: a
//!    direct handle's or an anchor), [`SCAN_BATCH`] table entries per hold, into a local
//!    list of `(hash, entry, generation)`;
//! 2. *fold*: sort the list by hash; in each run of equal hashes, keep the objects met
//!    first (anchors first, up to [`MAX_KEEPERS`] different contents per hash) and fold
//!    every later object whose bytes, compared in full now, equal a kept one's: the kept
//!    object becomes shared if it is not yet, the later object's entry becomes an alias of
//!    its anchor, and the later object's place is freed. [`FOLD_BATCH`] candidates per
//!    hold; each candidate is checked again after every gap (still live, same generation,
//!    still written and located), since anything may have happened in between.
//!
//! An anchor is never folded into another object (its aliases would have to follow, and
//! aliases never name aliases); it can only be kept. Then a shard that folded anything is
//! compacted. Never-written objects are skipped: their bytes are not the caller's.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use crate::class::ClassGeometry;
use crate::handle::{Flags, Slot};
use crate::pool::Pool;
use crate::shard::{ClassShard, ShardInner};
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
pub const SCAN_BATCH: usize = 1024;
/// Candidates checked per hold of a shard lock (fold phase).
pub const FOLD_BATCH: usize = 1024;
/// Different contents kept per content hash: with a real hash one is plenty; the bound
/// keeps a run of colliding hashes linear.
pub const MAX_KEEPERS: usize = 8;

/// An object the scan hashed.
#[derive(Debug, Clone, Copy)]
struct Candidate {
    hash: u64,
    entry: u32,
    generation: u32,
    anchor: bool,
}

impl Pool {
    /// Scans every class shard and folds identical written objects into one (seed 004), then
    /// compacts the shards it folded in. Runs alongside every other operation, holding a
    /// shard's lock for one bounded step at a time.
    pub fn fold(&self) -> FoldReport {
        let mut report = FoldReport::default();
        for (pos, shard) in self.shards.iter().enumerate().rev() {
            self.fold_shard(pos, shard, &mut report);
        }
        self.pages_folded
            .fetch_add(report.pages_freed, Ordering::Relaxed);
        report
    }

    /// Pages given back by folding since the pool was made (seed 004's `pages_folded`).
    pub fn pages_folded(&self) -> u64 {
        self.pages_folded.load(Ordering::Relaxed)
    }

    /// Folds one class shard (class shard `pos`), adding to `report`.
    fn fold_shard(&self, pos: usize, shard: &ClassShard, report: &mut FoldReport) {
        let geom = shard.geom;
        let mut seen = scan(shard);
        report.objects_scanned += seen.len() as u64;
        if seen.len() < 2 {
            return;
        }
        seen.sort_unstable_by_key(|c| (c.hash, !c.anchor, c.entry));
        let mut folded = 0u64;
        let mut pages = 0;
        let mut released: Vec<PageRun> = Vec::new();
        let mut held = None;
        let mut budget = 0;
        for group in seen.chunk_by(|a, b| a.hash == b.hash) {
            if group.len() < 2 {
                continue;
            }
            // Located entries `(entry, generation)` of the distinct contents met so far.
            let mut keepers: Vec<(u32, u64)> = Vec::new();
            for candidate in group {
                if budget == 0 {
                    // Let go of the lock between batches; give pages back meanwhile.
                    drop(held.take());
                    pages += released
                        .drain(..)
                        .map(|run| self.release(run))
                        .sum::<usize>();
                    budget = FOLD_BATCH;
                }
                budget -= 1;
                let inner = held.get_or_insert_with(|| shard.inner.lock());
                if let Some(run) = fold_one(inner, pos, &geom, candidate, &mut keepers, &mut folded)
                {
                    released.push(run);
                }
            }
        }
        drop(held);
        pages += released
            .into_iter()
            .map(|run| self.release(run))
            .sum::<usize>();
        if folded > 0 {
            pages += self.compact_shard(shard);
        }
        report.objects_folded += folded;
        report.bytes_folded += folded * geom.size as u64;
        report.pages_freed += pages as u64;
    }
}

/// The scan phase: the content hash of every written located entry of the shard.
fn scan(shard: &ClassShard) -> Vec<Candidate> {
    let geom = shard.geom;
    let mut seen = Vec::new();
    let mut start = 0;
    loop {
        let inner = shard.inner.lock();
        let end = (start + SCAN_BATCH).min(inner.handles.entries());
        if start >= end {
            return seen;
        }
        for (entry, generation, slot) in inner.handles.iter_range(start..end) {
            if let Slot::Located(loc, flags) = slot
                && flags.has(Flags::WRITTEN)
            {
                seen.push(Candidate {
                    hash: content_hash(inner.object(&geom, loc)),
                    entry,
                    generation: generation as u32,
                    anchor: flags.has(Flags::ANCHOR),
                });
            }
        }
        start = end;
    }
}

/// Folds `candidate` into the first of `keepers` with the same bytes, or keeps it; returns
/// the pages of a zspage folding emptied, for the caller to release after unlocking.
fn fold_one(
    inner: &mut ShardInner,
    pos: usize,
    geom: &ClassGeometry,
    candidate: &Candidate,
    keepers: &mut Vec<(u32, u64)>,
    folded: &mut u64,
) -> Option<PageRun> {
    let entry = candidate.entry;
    let Some(Slot::Located(loc, flags)) = inner.handles.get(entry, u64::from(candidate.generation))
    else {
        return None;
    };
    if !flags.has(Flags::WRITTEN) {
        return None;
    }
    // Keepers may have gone, or become shared (follow them to their anchor) since.
    keepers.retain_mut(|(k, g)| match inner.handles.get(*k, *g) {
        Some(Slot::Located(..)) => true,
        Some(Slot::Alias(anchor)) => {
            (*k, *g) = (anchor, inner.handles.generation(anchor));
            true
        }
        None => false,
    });
    let bytes = inner.object(geom, loc);
    let same = keepers
        .iter()
        .position(|&(k, _)| k != entry && inner.object(geom, inner.handles.location(k)) == bytes);
    let Some(i) = same else {
        if keepers.len() < MAX_KEEPERS {
            keepers.push((entry, u64::from(candidate.generation)));
        }
        return None;
    };
    if flags.has(Flags::ANCHOR) {
        // Its aliases would have to follow: anchors are only ever kept.
        return None;
    }
    let anchor = inner.anchor_of(pos, geom, keepers[i].0)?;
    keepers[i] = (anchor, inner.handles.generation(anchor));
    if flags.has(Flags::INDEXED) {
        // The anchor has the same bytes, so the same key: it takes the candidate's place.
        let hash = content_hash(inner.object(geom, loc));
        if let Some(owner) = inner.sharing.index.get_mut(&hash)
            && *owner == entry
        {
            *owner = anchor;
            inner.handles.set_flag(anchor, Flags::INDEXED, true);
        }
    }
    inner.handles.set(entry, Slot::Alias(anchor));
    inner.anchor_mut(anchor).refs += 1;
    inner.epoch += 1;
    *folded += 1;
    inner.release_object(geom, loc)
}

#[cfg(test)]
mod tests;
