//! The device's storage, per *unit*: a page by default (the kernel's model: with
//! `unit_size` 4 KiB every rule below is the kernel's per-page rule), or, beyond the kernel
//! and opt-in with [`ZramConfig::unit_size`](crate::ZramConfig::unit_size), an aligned run
//! of pages compressed as one stream.
//!
//! The kernel compresses each 4 KiB page alone, so any page can be read without touching
//! its neighbours. Compressors find more to reuse in a longer window: zstd -3 packs a Linux
//! source tar 25% smaller in 32 KiB blocks than in 4 KiB ones. A device with `unit_size` of
//! 8 KiB to 128 KiB (a power of two) compresses each aligned unit as one stream; the price
//! is that reading or rewriting part of a unit decompresses all of it.
//!
//! # Representation
//!
//! The slot table has one entry per unit (16 bytes per unit instead of per page; the last
//! unit is shorter when `disksize` is not a multiple of `unit_size`). An entry is, as a
//! page's: empty; same-filled (`SAME`, the fill word in `handle`, no object); or a *stream*
//! of `len` bytes in zsmalloc objects, `handle` naming the first. The stream is the
//! compressed unit, or the unit itself (`HUGE`, stored raw) when it compresses to at least
//! `unit length − PAGE_SIZE + huge_class_size` bytes: the kernel's huge rule (a page that
//! compresses to `huge_class_size` or more is stored raw) with the same slack per unit.
//!
//! A stream of at most 4096 bytes is one object. A longer one is a chain of pieces: each
//! but the last is a 4096-byte object (the huge class: one per page, no waste) holding the
//! 8-byte handle of the next piece, then 4088 stream bytes; the last piece holds the rest
//! (1..=4096 bytes). So a stream of `len` bytes takes `links(len) + 1` objects, and the
//! links cost 8 bytes per 4088 of stream (0.2%), counted in `mem_used_total` like
//! zsmalloc's own object headers, not in per-unit metadata.
//!
//! # Rules (the kernel's per-page rules, per unit)
//!
//! - A write covering a whole unit compresses the caller's bytes directly; a partial write
//!   reads the unit (decompressing it into a per-thread scratch buffer), patches it and
//!   stores it again, all under the unit's lock, so the last write to a page wins whole.
//! - Storing allocates the new chain, checks `mem_limit` after every allocation (over it:
//!   the new objects are freed, the unit keeps its old data, `Error::MemLimit`), writes it,
//!   and only then frees the old chain. A unit of equal 8-byte words is stored `SAME`.
//! - Discard frees the whole pages inside its range, as the kernel does: whole units in
//!   it are freed; where the range covers only part of a unit, those pages of the unit are
//!   zeroed. Write-zeroes frees whole units and zeroes the exact range of others. A unit
//!   that these leave all zero is freed (not stored as a same-filled unit).
//!
//! # Stats (in pages, so the kernel's formulas still hold)
//!
//! - `orig_data_size`: 4096 × pages of units holding data (same-filled units included);
//! - `compr_data_size`: the sum of stream lengths (`len`): compressed bytes, or the unit's
//!   bytes for a raw unit; links and zsmalloc headers are not counted;
//! - `same_pages`, `huge_pages`, `huge_pages_since`: pages of same-filled and of raw units;
//! - `notify_free`: pages of units that discard or write-zeroes freed (whole units count
//!   their pages whether or not they held data, as the kernel counts discarded pages);
//! - `mem_used_total`, `mem_used_max`, `mem_limit`: from the pool, as for pages;
//! - metadata (`mm_stat` field 11): the slot table (16 bytes per unit plus the striped
//!   locks) and the pool's bookkeeping. The per-thread scratch buffers (a unit and its
//!   compressed form, at most 2 × 128 KiB per thread that did I/O) are not in it.

use std::cell::RefCell;
use std::ops::Range;
use std::sync::atomic::Ordering::Relaxed;

use zsmalloc::Handle;

use crate::PAGE_SIZE;
use crate::device::{Zram, fill, same_filled};
use crate::error::{Error, Result};
use crate::slot::{Flags, SlotEntry, SlotGuard};
use crate::stats::Counters;

/// The smallest unit: one page (the kernel's model).
pub const MIN_UNIT_SIZE: usize = PAGE_SIZE;
/// The largest unit.
pub const MAX_UNIT_SIZE: usize = 128 * 1024;
/// Bytes of the next piece's handle at the start of every piece but the last.
const LINK: usize = 8;
/// Stream bytes in a piece that is not the last.
const PIECE_DATA: usize = PAGE_SIZE - LINK;

/// Refuses a `unit_size` that is not a power of two from 4 KiB to 128 KiB.
pub fn check_unit_size(bytes: usize) -> Result<()> {
    if bytes.is_power_of_two() && (MIN_UNIT_SIZE..=MAX_UNIT_SIZE).contains(&bytes) {
        Ok(())
    } else {
        Err(Error::InvalidParam(format!(
            "unit_size {bytes} must be a power of two from {MIN_UNIT_SIZE} to {MAX_UNIT_SIZE} bytes"
        )))
    }
}

/// Pieces before the last in the chain of a stream of `len` bytes.
pub fn links(len: usize) -> usize {
    len.saturating_sub(PAGE_SIZE).div_ceil(PIECE_DATA)
}

thread_local! {
    /// Per-thread unit for partial reads and read-modify-write.
    static UNIT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Per-thread compressed stream (compressing into it, gathering a chain into it).
    static STREAM: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Copies the fill pattern of `word` into `out`, which starts `at` bytes into its unit.
fn fill_at(out: &mut [u8], word: u64, at: usize) {
    let bytes = word.to_ne_bytes();
    for (i, b) in out.iter_mut().enumerate() {
        *b = bytes[(at + i) % 8];
    }
}

impl Zram {
    /// Bytes of unit `unit` (`unit_size`, less for a short last unit).
    fn unit_len(&self, unit: usize) -> usize {
        let start = unit as u64 * self.unit_size as u64;
        self.disksize
            .saturating_sub(start)
            .min(self.unit_size as u64) as usize
    }

    /// Calls `f(unit, offset in unit, byte range in the request)` for every unit a request
    /// of `len` bytes at `offset` touches.
    fn for_units(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(usize, usize, Range<usize>) -> Result<()>,
    ) -> Result<()> {
        let unit_size = self.unit_size as u64;
        let mut done = 0;
        while done < len {
            let pos = offset + done as u64;
            let unit = (pos / unit_size) as usize;
            let at = (pos % unit_size) as usize;
            let n = (self.unit_len(unit) - at).min(len - done);
            f(unit, at, done..done + n)?;
            done += n;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at `offset` (range already checked).
    pub(crate) fn read_units(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.for_units(offset, buf.len(), |unit, at, range| {
            let g = self.table.lock(unit);
            let ulen = self.unit_len(unit);
            let e = g.get();
            if range.len() == ulen {
                return self.load_unit(&g, &mut buf[range]);
            }
            if e.flags.contains(Flags::SAME) {
                fill_at(&mut buf[range], e.handle, at);
                return Ok(());
            }
            if !e.is_allocated() {
                buf[range].fill(0);
                return Ok(());
            }
            UNIT.with(|cell| {
                let mut scratch = cell.borrow_mut();
                scratch.resize(ulen, 0);
                self.load_unit(&g, &mut scratch[..ulen])?;
                buf[range.clone()].copy_from_slice(&scratch[at..at + range.len()]);
                Ok(())
            })
        })
    }

    /// Writes `data` at `offset` (range already checked).
    pub(crate) fn write_units(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.for_units(offset, data.len(), |unit, at, range| {
            let mut g = self.table.lock(unit);
            if range.len() == self.unit_len(unit) {
                return self.store_unit(&mut g, &data[range]);
            }
            self.modify_unit(&mut g, false, |u| {
                u[at..at + range.len()].copy_from_slice(&data[range]);
            })
            .map(|_| ())
        })
    }

    /// Discard: the whole pages inside the range read back as zeroes.
    pub(crate) fn discard_units(&self, offset: u64, len: u64) -> Result<()> {
        let page = PAGE_SIZE as u64;
        let first = offset.div_ceil(page) * page;
        let end = (offset + len) / page * page;
        if first >= end {
            return Ok(());
        }
        let len = usize::try_from(end - first).map_err(|_| Error::InvalidSize(len.to_string()))?;
        self.zero_units(first, len)
    }

    /// Makes `len` bytes at `offset` read back as zeroes, freeing every unit that ends up
    /// all zero.
    pub(crate) fn zero_units(&self, offset: u64, len: usize) -> Result<()> {
        self.for_units(offset, len, |unit, at, range| {
            let mut g = self.table.lock(unit);
            let ulen = self.unit_len(unit);
            let pages = (ulen / PAGE_SIZE) as u64;
            if range.len() == ulen {
                self.free_unit(&mut g);
                Counters::add(&self.counters.notify_free, pages);
                return Ok(());
            }
            if !g.get().is_allocated() {
                return Ok(());
            }
            if self.modify_unit(&mut g, true, |u| u[at..at + range.len()].fill(0))? {
                Counters::add(&self.counters.notify_free, pages);
            }
            Ok(())
        })
    }

    /// Reads the locked unit, lets `f` change it and stores it again; with `free_zero`, a
    /// unit left all zero is freed instead (returns whether it was).
    fn modify_unit(
        &self,
        g: &mut SlotGuard<'_>,
        free_zero: bool,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<bool> {
        let ulen = self.unit_len(g.index());
        UNIT.with(|cell| {
            let mut scratch = cell.borrow_mut();
            scratch.resize(ulen, 0);
            let unit = &mut scratch[..ulen];
            self.load_unit(g, unit)?;
            f(unit);
            if free_zero && same_filled(unit) == Some(0) {
                self.free_unit(g);
                return Ok(true);
            }
            self.store_unit(g, unit).map(|()| false)
        })
    }

    /// Reads the locked unit whole into `out` (the unit's length).
    fn load_unit(&self, g: &SlotGuard<'_>, out: &mut [u8]) -> Result<()> {
        let e = g.get();
        if e.flags.contains(Flags::SAME) {
            fill(out, e.handle);
            return Ok(());
        }
        if e.len == 0 {
            out.fill(0);
            return Ok(());
        }
        if e.flags.contains(Flags::HUGE) {
            if e.len != out.len() {
                return Err(Error::Corrupt(format!(
                    "raw unit {} holds {} bytes, not {}",
                    g.index(),
                    e.len,
                    out.len()
                )));
            }
            return self.read_chain(e.handle, out);
        }
        STREAM.with(|cell| {
            let mut stream = cell.borrow_mut();
            stream.resize(e.len, 0);
            self.read_chain(e.handle, &mut stream[..e.len])?;
            self.codecs.with(|c| c.decompress(&stream[..e.len], out))?
        })
    }

    /// Stores a whole unit into its locked slot.
    fn store_unit(&self, g: &mut SlotGuard<'_>, data: &[u8]) -> Result<()> {
        let now = self.now();
        let pages = (data.len() / PAGE_SIZE) as u64;
        if let Some(word) = same_filled(data) {
            self.free_unit(g);
            g.set(SlotEntry {
                handle: word,
                flags: Flags::SAME,
                ac_time: now,
                ..SlotEntry::default()
            });
            Counters::add(&self.counters.same_pages, pages);
            Counters::add(&self.counters.pages_stored, pages);
            return Ok(());
        }
        STREAM.with(|cell| {
            let mut buf = cell.borrow_mut();
            let comp_len = self.codecs.with(|c| c.compress(data, &mut buf))??;
            let huge = comp_len >= data.len() - PAGE_SIZE + self.huge_class_size;
            let stream = if huge { data } else { &buf[..comp_len] };
            let head = self.write_chain(stream)?;
            self.free_unit(g);
            g.set(SlotEntry {
                handle: head,
                len: stream.len(),
                flags: if huge { Flags::HUGE } else { Flags::default() },
                prio: 0,
                ac_time: now,
            });
            Counters::add(&self.counters.compr_data_size, stream.len() as u64);
            Counters::add(&self.counters.pages_stored, pages);
            if huge {
                Counters::add(&self.counters.huge_pages, pages);
                Counters::add(&self.counters.huge_pages_since, pages);
            }
            Ok(())
        })
    }

    /// Empties the locked unit.
    pub(crate) fn free_unit(&self, g: &mut SlotGuard<'_>) {
        let e = g.get();
        let pages = (self.unit_len(g.index()) / PAGE_SIZE) as u64;
        if e.flags.contains(Flags::SAME) {
            Counters::sub(&self.counters.same_pages, pages);
            Counters::sub(&self.counters.pages_stored, pages);
        } else if e.len != 0 {
            self.free_chain(e.handle, e.len);
            Counters::sub(&self.counters.compr_data_size, e.len as u64);
            Counters::sub(&self.counters.pages_stored, pages);
            if e.flags.contains(Flags::HUGE) {
                Counters::sub(&self.counters.huge_pages, pages);
            }
        }
        if e != SlotEntry::default() {
            g.set(SlotEntry::default());
        }
    }

    /// Allocates and writes the chain of `stream`; returns the first piece's handle. On
    /// failure (the allocator, or `mem_limit`) every piece allocated is freed again.
    fn write_chain(&self, stream: &[u8]) -> Result<u64> {
        let k = links(stream.len());
        if k == 0 {
            // One object (every page, and small units): no list of pieces to keep.
            let handle = self.alloc_piece(stream.len())?;
            return match self.pool.write(handle, stream) {
                Ok(()) => Ok(handle.to_raw()),
                Err(e) => {
                    let _ = self.pool.free(handle);
                    Err(e.into())
                }
            };
        }
        let mut handles: Vec<Handle> = Vec::with_capacity(k + 1);
        let result = self
            .alloc_pieces(stream.len(), &mut handles)
            .and_then(|()| {
                let mut piece = [0u8; PAGE_SIZE];
                for (i, pair) in handles.windows(2).enumerate() {
                    piece[..LINK].copy_from_slice(&pair[1].to_raw().to_le_bytes());
                    piece[LINK..].copy_from_slice(&stream[i * PIECE_DATA..(i + 1) * PIECE_DATA]);
                    self.pool.write(pair[0], &piece)?;
                }
                self.pool.write(handles[k], &stream[k * PIECE_DATA..])?;
                Ok(handles[0].to_raw())
            });
        if result.is_err() {
            for h in handles {
                // Just allocated by us and never published: freeing cannot meet a stale handle.
                let _ = self.pool.free(h);
            }
        }
        result
    }

    /// Allocates the pieces for a stream of `len` bytes into `handles`.
    fn alloc_pieces(&self, len: usize, handles: &mut Vec<Handle>) -> Result<()> {
        let k = links(len);
        for i in 0..=k {
            let size = if i < k {
                PAGE_SIZE
            } else {
                len - k * PIECE_DATA
            };
            handles.push(self.alloc_piece(size)?);
        }
        Ok(())
    }

    /// Allocates one object, then checks `mem_limit` (over it, the object is freed again).
    fn alloc_piece(&self, size: usize) -> Result<Handle> {
        let handle = self.pool.malloc(size)?;
        let used = self.pool.total_pages() as u64;
        self.counters.max_used_pages.fetch_max(used, Relaxed);
        let limit = self.limit_pages.load(Relaxed);
        if limit != 0 && used > limit {
            let _ = self.pool.free(handle);
            return Err(Error::MemLimit {
                limit: limit * PAGE_SIZE as u64,
            });
        }
        Ok(handle)
    }

    /// Gathers the chain starting at `head` into `out` (the stream's length).
    fn read_chain(&self, head: u64, out: &mut [u8]) -> Result<()> {
        let mut handle = Handle::from_raw(head);
        let mut done = 0;
        while out.len() - done > PAGE_SIZE {
            let piece = &mut out[done..done + PIECE_DATA];
            let next = self.pool.with_object(handle, PAGE_SIZE, |bytes| {
                piece.copy_from_slice(&bytes[LINK..]);
                link_of(bytes)
            })?;
            handle = Handle::from_raw(next);
            done += PIECE_DATA;
        }
        Ok(self.pool.read(handle, &mut out[done..])?)
    }

    /// Frees the chain of a stream of `len` bytes starting at `head`.
    fn free_chain(&self, head: u64, len: usize) {
        let mut handle = Handle::from_raw(head);
        for _ in 0..links(len) {
            let next = self.pool.with_object(handle, LINK, link_of);
            // The handle came from this pool and the unit's lock keeps it live: a failure
            // would be a bug in the table, and the object is unreachable either way.
            let _ = self.pool.free(handle);
            match next {
                Ok(n) => handle = Handle::from_raw(n),
                Err(_) => return,
            }
        }
        let _ = self.pool.free(handle);
    }
}

/// The next piece's handle at the start of a piece.
fn link_of(bytes: &[u8]) -> u64 {
    let mut word = [0u8; LINK];
    word.copy_from_slice(&bytes[..LINK]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_sizes_are_checked() {
        for ok in [4096, 8192, 32768, 65536, 131072] {
            assert!(check_unit_size(ok).is_ok(), "{ok}");
        }
        for bad in [0, 1, 2048, 4095, 12288, 262144, usize::MAX] {
            assert!(check_unit_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn chains_cover_every_stream_length() {
        assert_eq!(links(1), 0);
        assert_eq!(links(PAGE_SIZE), 0);
        assert_eq!(links(PAGE_SIZE + 1), 1);
        assert_eq!(links(PAGE_SIZE + PIECE_DATA), 1);
        assert_eq!(links(PAGE_SIZE + PIECE_DATA + 1), 2);
        for len in (1..=MAX_UNIT_SIZE).step_by(97).chain([MAX_UNIT_SIZE]) {
            let k = links(len);
            let last = len - k * PIECE_DATA;
            assert!((1..=PAGE_SIZE).contains(&last), "{len}: last piece {last}");
        }
    }
}
