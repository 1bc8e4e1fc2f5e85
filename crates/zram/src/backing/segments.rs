//! The file store's allocation state: which bytes of the file hold which objects. No I/O;
//! [`FileBacking`](super::FileBacking) keeps one of these under its allocation lock and does
//! the writes, punches and reads outside it.
//!
//! # Representation
//!
//! The file is cut into segments of `size` bytes; segment `i` is bytes
//! `[i × size, (i + 1) × size)`. `segs` has an entry for every segment the file has ever
//! reached (a block device: at most `capacity`); the file's apparent size never shrinks.
//! A segment is
//!
//! - `Open`: the one segment objects are appended to, at its `used` end (there is at most
//!   one, `open` names it);
//! - `Sealed`: no longer appended to; holds `live` bytes of objects below `used`;
//! - `Punching`: sealed with no live byte left, its hole being punched (outside the lock);
//!   not yet reusable, so that the punch cannot destroy a new object;
//! - `Free`: punched, on the free list (`free`), `used` and `live` 0.
//!
//! Each segment in use counts, per page, the objects that lie on it (`refs`): when an
//! object of a sealed segment is freed, the pages no live object lies on any more are
//! handed back to be punched out of a regular file at once, so a segment kept by a few
//! live objects does not hold its whole megabyte of disk.
//!
//! A store of bounded capacity of at least [`KEEP_FROM`] segments keeps one segment back
//! from appends: only objects moved out of sparse segments may take it (cleaning, see
//! `crate::clean`), so that a store that is full of sparse segments can still be cleaned.
//!
//! A segment whose bytes someone else cut off the file (truncated it below them) is marked
//! `lost_from` that point: its objects past it read as an error from then on, even after the
//! store's own next append has grown the file back over them (as a hole: zeroes). Such a
//! segment is never appended to again; it is forgotten when it becomes free.
//!
//! # Invariants
//!
//! - objects are packed: each lies inside one segment, below its `used` end; `live` is the
//!   sum of the lengths of a segment's objects (reserved and written alike), `live_bytes`
//!   the sum over segments;
//! - `sealed` counts the segments `Sealed` or `Punching`, so the extent in use
//!   (`file_bytes`) is `sealed × size` plus the open segment's `used`;
//! - a reservation either takes all the space its objects need or changes nothing: the
//!   segments it needs are counted before anything is taken.

use std::collections::BTreeSet;
use std::ops::Range;

use super::Sparse;

/// A store bounded to at least this many segments keeps one back for moved objects.
pub(super) const KEEP_FROM: usize = 4;

/// What a segment is (see the module's doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Free,
    Open,
    Sealed,
    Punching,
}

/// One segment's bookkeeping.
#[derive(Debug, Clone)]
struct Segment {
    state: State,
    /// End of the bytes appended so far, relative to the segment's start.
    used: u64,
    /// Bytes of the objects in the segment.
    live: u64,
    /// The file offset from which this segment's bytes were cut off the file by someone
    /// else, if they were.
    lost_from: Option<u64>,
    /// Per page of the segment, the objects lying on it (empty while free); stuck at
    /// `u16::MAX` if ever reached, which 16-byte objects cannot reach.
    refs: Vec<u16>,
}

impl Segment {
    const FREE: Self = Self {
        state: State::Free,
        used: 0,
        live: 0,
        lost_from: None,
        refs: Vec::new(),
    };
}

/// What freeing an object gives back.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Freed {
    /// Its segment, when that is now sealed and empty: to punch, then
    /// [`Segments::punched`].
    pub(super) segment: Option<usize>,
    /// Else, runs of whole pages `(offset, len)` of its sealed segment that no live object
    /// lies on any more: to punch out of a regular file (under the allocation lock, as a
    /// sealed segment takes no new object until it is free).
    pub(super) pages: Vec<(u64, u64)>,
}

/// The pages (of the segment, from 0) that `len` bytes at `start` in it lie on.
fn pages_of(start: u64, len: u64) -> std::ops::RangeInclusive<usize> {
    let page = crate::PAGE_SIZE as u64;
    (start / page) as usize..=((start + len - 1) / page) as usize
}

/// The objects of one reservation that lie back to back: one write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Run {
    /// Offset in the file of the first object.
    pub(super) offset: u64,
    /// Index of the first object in the reservation.
    pub(super) first: usize,
    /// Number of objects.
    pub(super) count: usize,
    /// Bytes of all of them.
    pub(super) len: u64,
}

/// The space one append took.
#[derive(Debug)]
pub(super) struct Reservation {
    /// Each object's offset, in order.
    pub(super) offsets: Vec<u64>,
    /// The contiguous runs, in order.
    pub(super) runs: Vec<Run>,
    /// Segments this reservation sealed with nothing live in them: to punch, then
    /// [`Segments::punched`].
    pub(super) punch: Vec<usize>,
}

/// The segments of a file (see the module's doc).
#[derive(Debug)]
pub(super) struct Segments {
    size: u64,
    capacity: Option<usize>,
    segs: Vec<Segment>,
    free: BTreeSet<usize>,
    open: Option<usize>,
    sealed: u64,
    live_bytes: u64,
}

impl Segments {
    /// No segment in use, in a file that may grow without limit (`capacity` `None`) or to
    /// `capacity` segments of `size` bytes.
    pub(super) fn new(size: u64, capacity: Option<usize>) -> Self {
        Self {
            size,
            capacity,
            segs: Vec::new(),
            free: BTreeSet::new(),
            open: None,
            sealed: 0,
            live_bytes: 0,
        }
    }

    /// Sum of the lengths of the objects held.
    pub(super) fn live_bytes(&self) -> u64 {
        self.live_bytes
    }

    /// Bytes of the file in use: sealed segments whole, the open one to its used end.
    pub(super) fn file_bytes(&self) -> u64 {
        let open = self.open.map_or(0, |i| self.segs[i].used);
        self.sealed * self.size + open
    }

    /// Sealed segments holding dead bytes (objects freed since they were appended),
    /// sparsest first, each up to its used end: moving their objects elsewhere gives back
    /// the rest. Not those cut short by someone else (their objects past the cut cannot be
    /// read).
    pub(super) fn sparse(&self) -> Vec<Sparse> {
        let mut found: Vec<(u64, usize)> = (self.segs.iter().enumerate())
            .filter(|(_, seg)| {
                seg.state == State::Sealed && seg.lost_from.is_none() && seg.live < seg.used
            })
            .map(|(i, seg)| (seg.live, i))
            .collect();
        found.sort_unstable();
        let start = |i: usize| i as u64 * self.size;
        (found.into_iter())
            .map(|(live, i)| Sparse {
                range: start(i)..start(i) + self.segs[i].used,
                live,
            })
            .collect()
    }

    /// The live bytes of the segment `range` names (its start and used end, as
    /// [`sparse`](Self::sparse) gave them), while it is sealed and ends there.
    pub(super) fn live_in(&self, range: Range<u64>) -> Option<u64> {
        let i = usize::try_from(range.start / self.size).ok()?;
        let seg = self.segs.get(i)?;
        let same = range.start == i as u64 * self.size && range.end == range.start + seg.used;
        (same && seg.state == State::Sealed && seg.lost_from.is_none()).then_some(seg.live)
    }

    /// Takes space for objects of `lens` bytes (each at most a segment), packed in the open
    /// segment and then in new ones (the lowest free first, then growing the file).
    /// `None` when the segments that takes are not there (nothing is taken then); only
    /// objects `moving` out of sparse segments may take the segment a bounded store keeps
    /// back.
    pub(super) fn reserve(&mut self, lens: &[usize], moving: bool) -> Option<Reservation> {
        let mut room = self.open.map_or(0, |i| self.size - self.segs[i].used);
        let mut needed = 0usize;
        for &len in lens {
            let len = len as u64;
            debug_assert!(len > 0 && len <= self.size);
            if len > room {
                needed += 1;
                room = self.size;
            }
            room -= len;
        }
        let growth = self
            .capacity
            .map_or(usize::MAX, |c| c.saturating_sub(self.segs.len()));
        // The kept segment matters only to an append that needs new segments: one that fits
        // in the open segment's rest takes nothing from it.
        let kept = match self.capacity {
            Some(c) if c >= KEEP_FROM && !moving && needed > 0 => 1,
            _ => 0,
        };
        if needed.saturating_add(kept) > self.free.len().saturating_add(growth) {
            return None;
        }
        let mut res = Reservation {
            offsets: Vec::with_capacity(lens.len()),
            runs: Vec::new(),
            punch: Vec::new(),
        };
        for (index, &len) in lens.iter().enumerate() {
            let len = len as u64;
            let fits = self
                .open
                .is_some_and(|i| self.segs[i].used + len <= self.size);
            if !fits {
                self.open_next(&mut res.punch);
            }
            let i = self.open.expect("a segment was opened");
            let seg = &mut self.segs[i];
            let offset = i as u64 * self.size + seg.used;
            for r in &mut seg.refs[pages_of(seg.used, len)] {
                *r = r.saturating_add(1);
            }
            seg.used += len;
            seg.live += len;
            self.live_bytes += len;
            res.offsets.push(offset);
            match res.runs.last_mut() {
                Some(run) if run.offset + run.len == offset && fits => {
                    run.count += 1;
                    run.len += len;
                }
                _ => res.runs.push(Run {
                    offset,
                    first: index,
                    count: 1,
                    len,
                }),
            }
        }
        Some(res)
    }

    /// Seals the open segment, if any (to punch if nothing in it is live).
    fn seal_open(&mut self, punch: &mut Vec<usize>) {
        if let Some(i) = self.open.take() {
            self.sealed += 1;
            if self.segs[i].live == 0 {
                self.segs[i].state = State::Punching;
                punch.push(i);
            } else {
                self.segs[i].state = State::Sealed;
            }
        }
    }

    /// After a failed write: seals the open segment, so that the next append starts in the
    /// lowest free one rather than where the write may fail again (a bad or unprovisioned
    /// region of a block device). Returns the segment to punch if nothing in it is live.
    pub(super) fn abandon_open(&mut self) -> Vec<usize> {
        let mut punch = Vec::new();
        self.seal_open(&mut punch);
        punch
    }

    /// Seals the open segment and opens the lowest free one, or a new one at the end.
    /// [`reserve`](Self::reserve) has checked there is one.
    fn open_next(&mut self, punch: &mut Vec<usize>) {
        self.seal_open(punch);
        let i = match self.free.pop_first() {
            Some(i) => i,
            None => {
                self.segs.push(Segment::FREE);
                self.segs.len() - 1
            }
        };
        debug_assert!(self.capacity.is_none_or(|c| i < c));
        self.segs[i] = Segment {
            state: State::Open,
            refs: vec![0; self.size.div_ceil(crate::PAGE_SIZE as u64) as usize],
            ..Segment::FREE
        };
        self.open = Some(i);
    }

    /// The file was found `len` bytes long, shorter than what the store wrote: marks the
    /// segments with bytes past `len` as cut there, and seals the open one if it is among
    /// them (an object appended after the cut must not be taken for a lost one). Returns
    /// the segments to punch (a sealed one with nothing live).
    pub(super) fn cut(&mut self, len: u64) -> Vec<usize> {
        let mut punch = Vec::new();
        for (i, seg) in self.segs.iter_mut().enumerate() {
            let start = i as u64 * self.size;
            if matches!(seg.state, State::Open | State::Sealed) && start + seg.used > len {
                let from = len.max(start);
                seg.lost_from = Some(seg.lost_from.map_or(from, |l| l.min(from)));
            }
        }
        if self.open.is_some_and(|i| self.segs[i].lost_from.is_some()) {
            self.seal_open(&mut punch);
        }
        punch
    }

    /// Whether some of the `len` bytes at `offset` were cut off the file by someone else.
    pub(super) fn lost(&self, offset: u64, len: u64) -> bool {
        let i = usize::try_from(offset / self.size).unwrap_or(usize::MAX);
        self.segs
            .get(i)
            .and_then(|seg| seg.lost_from)
            .is_some_and(|from| offset + len > from)
    }

    /// Frees the object of `len` bytes at `offset`: its sealed segment if that is now
    /// empty, else the pages of a sealed segment no live object lies on any more.
    pub(super) fn release(&mut self, offset: u64, len: usize) -> Freed {
        let i = usize::try_from(offset / self.size).expect("offset in the file");
        let len = len as u64;
        let seg_start = i as u64 * self.size;
        let seg = &mut self.segs[i];
        assert!(
            matches!(seg.state, State::Open | State::Sealed) && seg.live >= len,
            "freeing {len} bytes at {offset}, which the store does not hold"
        );
        seg.live -= len;
        self.live_bytes -= len;
        if seg.live == 0 && seg.state == State::Sealed {
            seg.state = State::Punching;
            return Freed {
                segment: Some(i),
                pages: Vec::new(),
            };
        }
        let page = crate::PAGE_SIZE as u64;
        let mut pages: Vec<(u64, u64)> = Vec::new();
        for p in pages_of(offset - seg_start, len) {
            let r = &mut seg.refs[p];
            if *r == u16::MAX {
                continue;
            }
            *r -= 1;
            if *r == 0 && seg.state == State::Sealed {
                let at = seg_start + p as u64 * page;
                match pages.last_mut() {
                    Some((start, run)) if *start + *run == at => *run += page,
                    _ => pages.push((at, page)),
                }
            }
        }
        Freed {
            segment: None,
            pages,
        }
    }

    /// Gives back the space of a reservation whose writes failed: its objects are released
    /// (last first), and the open segment's used end pulled back over those at its end.
    /// Returns the segments to punch.
    pub(super) fn unreserve(&mut self, res: &Reservation, lens: &[usize]) -> Vec<usize> {
        let mut punch = Vec::new();
        for (&offset, &len) in res.offsets.iter().zip(lens).rev() {
            let i = usize::try_from(offset / self.size).expect("offset in the file");
            let start = offset % self.size;
            if self.segs[i].state == State::Open && self.segs[i].used == start + len as u64 {
                self.segs[i].used = start;
            }
            punch.extend(self.release(offset, len).segment);
        }
        punch
    }

    /// Puts a segment whose hole is punched on the free list.
    pub(super) fn punched(&mut self, i: usize) {
        debug_assert_eq!(self.segs[i].state, State::Punching);
        self.segs[i] = Segment::FREE;
        self.sealed -= 1;
        self.free.insert(i);
    }

    /// The start of the segment holding `offset` and the end of its used bytes, if it holds
    /// objects.
    pub(super) fn used_span(&self, offset: u64) -> Option<(u64, u64)> {
        let i = usize::try_from(offset / self.size).ok()?;
        let seg = self.segs.get(i)?;
        let start = i as u64 * self.size;
        matches!(seg.state, State::Open | State::Sealed).then_some((start, start + seg.used))
    }
}

#[cfg(test)]
#[path = "segments_tests.rs"]
mod tests;
