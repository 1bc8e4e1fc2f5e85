//! Cleaning the backing store (beyond the kernel): moving written-back objects out of
//! sparse segments so that their space comes back.
//!
//! The kernel's backing device holds each written-back page in a block of its own, freed
//! with the page. Here objects are packed into segments (`backing/file.rs`), and a segment
//! is reused only once its last object is freed: a few long-lived objects can keep most of
//! a block device's segments from being reused, and appends then fail with `ENOSPC` while
//! the device is mostly empty. A cleaning pass reads the objects of sparse segments (sealed,
//! with dead bytes, as [`Backing::sparse`] lists them, sparsest first), appends them anew,
//! packed (a bounded store keeps a segment back for that, so a full one can still be
//! cleaned), and points each slot naming one at its new copy; the old copies are freed, and
//! with the last of them their segment. A pass on demand takes the segments at most half
//! live (`Pick::HalfDead`); writeback that finds the store full takes the sparsest, however
//! live, until they give back the room it needs (`Pick::Bytes`).
//!
//! # Rules
//!
//! - A pass runs under the post-processing lock (writeback and recompression exclude it).
//!   Writeback cleans when an append fails with `ENOSPC`, then tries the append again (a
//!   few times at most); [`Zram::clean_backing`](crate::Zram::clean_backing) cleans on
//!   demand.
//! - The pass holds each object it moves (one more holder, `backing/shares.rs`) from the
//!   moment it finds, under the slot's lock, a slot naming it, until it is done with it: the
//!   offset names that object and no other meanwhile, so a slot that still names the offset
//!   (written back, same length) when the pass comes to switch it holds these very bytes. A
//!   slot written, discarded or freed meanwhile names something else and is left alone.
//! - A switched slot keeps all but its handle: flags, priority and access time (cleaning is
//!   not an access). `bd_stat` does not move; the store counts the bytes moved
//!   ([`BackingStats::moved_bytes`](crate::backing::BackingStats::moved_bytes)).
//! - One append per segment cleaned, and only of a segment all of whose live objects the
//!   pass holds and has read (their bytes are the segment's live bytes,
//!   [`Backing::live_in`]): moving part of one would take room without giving it back. An
//!   object that cannot be read stays where it is (its slots read the same error as
//!   before), and so do the other objects of its segment (the read may work later). An
//!   object whose bytes are not those written (the check its slots keep: changed from
//!   outside) is moved as it is, with that check, so its slots still read `EIO` and its
//!   segment comes back; an append that finds no room ends the pass
//!   with what was moved so far; any other failed append ends it with the error. Neither
//!   loses or changes a slot.

use std::collections::BTreeMap;
use std::ops::Range;

use crate::backing::{Backing, Sparse};
use crate::error::{Error, Result};
use crate::slot::{Flags, SlotEntry, wb_check_of, wb_handle, wb_offset, wb_verify};
use crate::store::Store;

/// What a cleaning pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CleanReport {
    /// Sparse segments whose objects were moved (all of them: an object whose slots all
    /// changed meanwhile is freed instead).
    pub segments: u64,
    /// Objects moved.
    pub objects: u64,
    /// Slots switched to a moved object (more than `objects` where slots share one).
    pub slots: u64,
    /// Bytes moved.
    pub bytes: u64,
    /// Objects left where they were because they could not be read.
    pub unreadable: u64,
    /// Objects moved whose bytes are not those written (changed from outside): moved as
    /// they are, with the check of those written, so their slots still read `EIO`.
    #[serde(default)]
    pub mismatched: u64,
    /// Segments left as they were because not all their objects could be moved (some
    /// unreadable, or not found): moving the rest would not give them back.
    #[serde(default)]
    pub segments_left: u64,
}

/// The objects found in one sparse range: (handle, length) → the slots naming it (a
/// written-back slot's handle is the object's offset and the check of its bytes,
/// `slot::wb_handle`).
type Objects = BTreeMap<(u64, usize), Vec<usize>>;

/// An object the pass holds and has read, at `range` of the segment's buffer; `spoilt`:
/// its bytes are not those written (they fail the check its handle keeps).
struct Held {
    handle: u64,
    len: usize,
    slots: Vec<usize>,
    range: Range<usize>,
    spoilt: bool,
}

impl Held {
    fn offset(&self) -> u64 {
        wb_offset(self.handle)
    }
}

/// Drops the pass's holds on objects it does not move.
fn let_go(store: &Store, backing: &dyn Backing, held: &[Held]) {
    for h in held {
        store.shared_copies.release(backing, h.offset(), h.len);
    }
}

/// Which of the store's sparse ranges a pass cleans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pick {
    /// Those at most half live: each gives back at least as many bytes as it moves (a pass
    /// on demand).
    HalfDead,
    /// The sparsest first, until they give back this many bytes, at most [`MAX_PICKED`] of
    /// them; none if those cannot (writeback that found the store full: whatever it costs,
    /// as long as it gives the room).
    Bytes(u64),
}

/// Ranges one [`Pick::Bytes`] pass cleans at most.
pub(crate) const MAX_PICKED: usize = 64;

/// The ranges of `sparse` (sparsest first) that `pick` takes.
fn choose(sparse: Vec<Sparse>, pick: Pick) -> Vec<Range<u64>> {
    match pick {
        Pick::HalfDead => (sparse.into_iter())
            .filter(|s| s.live <= s.dead())
            .map(|s| s.range)
            .collect(),
        Pick::Bytes(want) => {
            let mut freed = 0;
            let mut picked = Vec::new();
            for s in sparse.into_iter().take(MAX_PICKED) {
                if freed >= want {
                    break;
                }
                freed += s.dead();
                picked.push(s.range);
            }
            // Moving what cannot give the room back would only cost (a store that is
            // really full).
            if freed < want { Vec::new() } else { picked }
        }
    }
}

/// Moves the objects of the backing store's sparse ranges that `pick` takes. The caller
/// holds the post-processing lock.
pub(crate) fn clean(store: &Store, backing: &dyn Backing, pick: Pick) -> Result<CleanReport> {
    let mut report = CleanReport::default();
    let ranges = choose(backing.sparse(), pick);
    if ranges.is_empty() {
        return Ok(report);
    }
    let mut buf = Vec::new();
    for (range, objects) in ranges.iter().zip(find(store, &ranges)) {
        let held = hold_and_read(store, backing, objects, &mut buf, &mut report);
        let held_bytes: u64 = held.iter().map(|h| h.len as u64).sum();
        // Moving only part of a segment's objects (some unreadable, or held by something no
        // slot scan finds) would take room without giving the segment back.
        if held.is_empty() || backing.live_in(range.clone()) != Some(held_bytes) {
            let_go(store, backing, &held);
            report.segments_left += u64::from(!held.is_empty());
            continue;
        }
        let streams: Vec<&[u8]> = held.iter().map(|h| &buf[h.range.clone()]).collect();
        let offsets = match backing.append_moved(&streams) {
            Ok(offsets) => offsets,
            Err(err) => {
                let_go(store, backing, &held);
                if err.raw_os_error() == Some(libc::ENOSPC) {
                    break;
                }
                return Err(Error::Backing(err));
            }
        };
        report.segments += 1;
        for (h, new) in held.iter().zip(offsets) {
            let switched = switch(store, backing, h, new);
            // The pass's holds: the new copy goes if no slot took it, the old one with
            // the last slot that left it.
            store.shared_copies.release(backing, new, h.len);
            store.shared_copies.release(backing, h.offset(), h.len);
            if switched > 0 {
                report.objects += 1;
                report.mismatched += u64::from(h.spoilt);
                report.slots += switched;
                report.bytes += h.len as u64;
            }
        }
    }
    Ok(report)
}

/// The written-back slots naming objects in `ranges`, grouped by range (in the order of
/// `ranges`) and object. Read slot by slot: a hint, checked again under each slot's lock.
fn find(store: &Store, ranges: &[Range<u64>]) -> Vec<Objects> {
    let mut by_start: Vec<(u64, u64, usize)> = (ranges.iter().enumerate())
        .map(|(n, r)| (r.start, r.end, n))
        .collect();
    by_start.sort_unstable();
    let mut found = vec![Objects::new(); ranges.len()];
    for index in 0..store.slots() {
        if !store.any_written_back(index..index + 1) {
            continue;
        }
        let e = store.entry(index);
        if !e.flags.contains(Flags::WB) {
            continue;
        }
        let offset = wb_offset(e.handle);
        let at = by_start.partition_point(|&(start, _, _)| start <= offset);
        if let Some(&(_, end, n)) = at.checked_sub(1).map(|i| &by_start[i])
            && offset < end
        {
            found[n].entry((e.handle, e.len)).or_default().push(index);
        }
    }
    found
}

/// Holds each of `objects` through a slot that still names it, and reads it into `buf`
/// (cleared first). Objects no slot names any more are skipped; unreadable ones are let go.
fn hold_and_read(
    store: &Store,
    backing: &dyn Backing,
    objects: Objects,
    buf: &mut Vec<u8>,
    report: &mut CleanReport,
) -> Vec<Held> {
    buf.clear();
    let mut held = Vec::new();
    for ((handle, len), slots) in objects {
        let offset = wb_offset(handle);
        let names =
            |e: SlotEntry| e.flags.contains(Flags::WB) && e.handle == handle && e.len == len;
        let holds = slots.iter().any(|&index| {
            let g = store.lock(index);
            let named = names(g.get());
            if named {
                // Under the lock of a slot holding it: the object is live.
                store.shared_copies.hold(offset);
            }
            named
        });
        if !holds {
            continue;
        }
        let range = buf.len()..buf.len() + len;
        buf.resize(range.end, 0);
        // Bytes that are not those written (changed from outside) are moved as they are,
        // with the check of those written: their slots read `EIO` there as here, and the
        // segment comes back. A read that fails leaves the object (and its segment) where
        // it is: it may work later.
        let out = &mut buf[range.clone()];
        let spoilt = match (backing.read(offset, out)).and_then(|()| wb_verify(handle, out)) {
            Ok(()) => false,
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => true,
            Err(_) => {
                buf.truncate(range.start);
                store.shared_copies.release(backing, offset, len);
                report.unreadable += 1;
                continue;
            }
        };
        held.push(Held {
            handle,
            len,
            slots,
            range,
            spoilt,
        });
    }
    held
}

/// Points the slots of `h` that still name it at its copy at `new`; returns how many.
fn switch(store: &Store, backing: &dyn Backing, h: &Held, new: u64) -> u64 {
    let mut switched = 0;
    for &index in &h.slots {
        let mut g = store.lock(index);
        let e = g.get();
        if e.flags.contains(Flags::WB) && e.handle == h.handle && e.len == h.len {
            store.shared_copies.hold(new);
            let handle = wb_handle(new, wb_check_of(h.handle));
            g.set(SlotEntry { handle, ..e });
            // Not the old copy's last holder: the pass holds it too.
            store.shared_copies.release(backing, h.offset(), h.len);
            switched += 1;
        }
    }
    switched
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sparse(list: &[(u64, u64)]) -> Vec<Sparse> {
        (list.iter().enumerate())
            .map(|(i, &(used, live))| {
                let start = i as u64 * 1000;
                Sparse {
                    range: start..start + used,
                    live,
                }
            })
            .collect()
    }

    #[test]
    fn a_pass_on_demand_takes_half_dead_segments_a_full_store_what_gives_the_room() {
        // Sparsest first, as the store lists them: dead 900, 700, 500, 200, 100.
        let list = sparse(&[
            (1000, 100),
            (1000, 300),
            (1000, 500),
            (1000, 800),
            (1000, 900),
        ]);
        assert_eq!(
            choose(list.clone(), Pick::HalfDead),
            [0..1000, 1000..2000, 2000..3000]
        );
        assert_eq!(choose(list.clone(), Pick::Bytes(900)), vec![0..1000]);
        assert_eq!(
            choose(list.clone(), Pick::Bytes(901)),
            [0..1000, 1000..2000]
        );
        assert_eq!(choose(list.clone(), Pick::Bytes(2400)).len(), 5);
        // Not enough dead bytes anywhere: nothing is moved for nothing.
        assert!(choose(list, Pick::Bytes(2401)).is_empty());
        let many = sparse(&[(1000, 990); MAX_PICKED + 1]);
        assert!(choose(many, Pick::Bytes(10 * MAX_PICKED as u64 + 1)).is_empty());
    }
}
