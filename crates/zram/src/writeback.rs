//! Writeback: moving slots' data to the backing file (the kernel's `writeback`).
//!
//! Beyond the kernel, a slot's *stored stream* goes to the file, compressed as it lies in
//! memory (raw for a huge slot), packed into a log of objects by the backing store instead
//! of one 4 KiB block per page; `bd_stat` still counts pages.
//!
//! # Rules
//!
//! - Slots are taken largest first ([`crate::pp`]), `writeback_batch_size` at a time: each
//!   is locked, checked, marked `PP` and its stream copied into the batch; the batch is
//!   appended to the file in one write, synced and dropped from the page cache.
//! - Only then is each slot switched to its file copy, and only if it still carries `PP`
//!   (any write, discard, free or read in between clears it, as the kernel's
//!   `zram_accessed` clears `ZRAM_PP_SLOT`): otherwise its file copy is freed. No slot ever points at a
//!   copy that is not on the file, and no slot loses data when the file fails.
//! - A failed append (ENOSPC, EIO) stops the pass with that error, counted in `wb_failed`;
//!   the batch's slots stay in memory.
//! - With `writeback_limit_enable`, every page takes one unit of `writeback_limit`; when it
//!   is spent the pass stops with `EIO`, as the kernel's does. Budget taken for slots that
//!   were not switched is given back.
//! - Writeback and recompression exclude each other: the second gets `EAGAIN`.

use crate::error::{Error, Result};
use crate::post;
use crate::pp::{WritebackRequest, select};
use crate::slot::Flags;
use crate::stats::Counters;
use crate::store::Store;

/// What a writeback pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WritebackReport {
    /// Slots now in the backing file.
    pub slots: u64,
    /// Their pages.
    pub pages: u64,
    /// Bytes written to the file for them.
    pub bytes: u64,
}

/// Bytes of streams gathered before a batch is written, whatever `writeback_batch_size`
/// says (a pass must not hold much memory while it is there to free some).
const MAX_BATCH_BYTES: usize = 8 << 20;

/// One slot gathered into a batch.
struct Gathered {
    index: usize,
    range: std::ops::Range<usize>,
    /// Its pages were taken from `writeback_limit`.
    charged: bool,
}

/// Takes the `PP` marks off the batch's slots and gives their budget back.
fn unmark(store: &Store, batch: &mut Vec<Gathered>) {
    for item in batch.drain(..) {
        let mut g = store.lock(item.index);
        if g.get().flags.contains(Flags::PP) {
            post::set_flag(&mut g, Flags::PP, false);
        }
        drop(g);
        store
            .wb_limit()
            .refund(store.pages(item.index), item.charged);
    }
}

/// Runs a writeback pass.
pub(crate) fn writeback(store: &Store, req: &WritebackRequest) -> Result<WritebackReport> {
    let backing = store.backing().ok_or(Error::NoBackingDev)?.clone();
    let _pp = store.post_processing()?;
    let candidates = select(store, &req.scans)?;
    let batch_size = store.writeback_batch().max(1);
    let mut report = WritebackReport::default();
    let mut buf = Vec::new();
    let mut batch: Vec<Gathered> = Vec::new();
    let mut stream = Vec::new();
    let mut limited = false;
    let mut taken = 0;
    for index in candidates {
        let pages = store.pages(index);
        if req.max_pages != 0 && taken + pages > req.max_pages {
            break;
        }
        {
            let mut g = store.lock(index);
            let e = g.get();
            if !req.scans.iter().any(|s| s.0.admits(&e)) {
                continue;
            }
            let Some(charged) = store.wb_limit().take(pages) else {
                limited = true;
                break;
            };
            if let Err(err) = post::stream_of(store, &g, &mut stream) {
                drop(g);
                store.wb_limit().refund(pages, charged);
                unmark(store, &mut batch);
                return Err(err);
            }
            post::set_flag(&mut g, Flags::PP, true);
            taken += pages;
            let start = buf.len();
            buf.extend_from_slice(&stream);
            batch.push(Gathered {
                index,
                range: start..buf.len(),
                charged,
            });
        }
        if batch.len() >= batch_size || buf.len() >= MAX_BATCH_BYTES {
            flush(store, &*backing, &mut buf, &mut batch, &mut report)?;
        }
    }
    flush(store, &*backing, &mut buf, &mut batch, &mut report)?;
    if limited {
        return Err(Error::WritebackLimit);
    }
    Ok(report)
}

/// Appends the batch to the file and switches the slots that still hold what was written.
fn flush(
    store: &Store,
    backing: &dyn crate::backing::Backing,
    buf: &mut Vec<u8>,
    batch: &mut Vec<Gathered>,
    report: &mut WritebackReport,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let objects: Vec<&[u8]> = batch.iter().map(|g| &buf[g.range.clone()]).collect();
    let appended = backing.append(&objects);
    let offsets = match appended {
        Ok(offsets) => offsets,
        Err(err) => {
            Counters::add(&store.counters().wb_failed, 1);
            unmark(store, batch);
            buf.clear();
            return Err(Error::Backing(err));
        }
    };
    for (item, offset) in batch.drain(..).zip(offsets) {
        let len = item.range.len();
        let pages = store.pages(item.index);
        let mut g = store.lock(item.index);
        // `PP` still set: nothing wrote, freed or read the slot since it was gathered (each
        // clears it), so it holds what went to the file and still qualifies.
        if g.get().flags.contains(Flags::PP) {
            post::switch_to_backing(store, &mut g, offset);
            report.slots += 1;
            report.pages += pages;
            report.bytes += len as u64;
        } else {
            drop(g);
            backing.free(offset, len);
            store.wb_limit().refund(pages, item.charged);
        }
    }
    buf.clear();
    Ok(())
}
