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
//! - An append that finds the store full (`ENOSPC`) first cleans its sparsest segments
//!   ([`crate::clean`]) until they give back the room it needs, and tries again. A failed
//!   append (ENOSPC, EIO) stops the pass with that error, counted in `wb_failed`; the
//!   batch's slots stay in memory.
//! - With `writeback_limit_enable`, every page takes one unit of `writeback_limit`; when it
//!   is spent the pass stops with `EIO`, as the kernel's does. Budget taken for slots that
//!   were not switched is given back.
//! - Writeback and recompression exclude each other: the second gets `EAGAIN`.
//!
//! # Shared objects (seed 004, beyond the kernel)
//!
//! Slots may name one stored object through different handles (after `fold`, or with
//! `dedup`). A pass writes such an object to the file once: the first slot gathered that
//! names it brings its stream into the batch; a later slot naming the same object (met
//! through `shared.rs`, keyed by the object's id and the stream's length), in the
//! same batch or a later one, only refers to that copy. Each slot still switches on its
//! own rule (only if it still carries `PP` at the flush); a switched slot is one more
//! holder of the copy (`backing/shares.rs`), and the file extent is freed with its
//! last holder. The pass holds each copy too until no slot can meet its object any more
//! (or the pass ends), so that a copy whose first slots were rewritten meanwhile is still
//! there for the later ones, and a copy no slot switched to is freed then.
//!
//! `bd_writes`, `bd_write_bytes` and the report's `bytes` count a copy once (with the first
//! slot switched to it: what was really written for slots now on the file); `bd_count`,
//! the report's `slots` and `pages` and `writeback_limit` count every slot.

use std::ops::Range;

use zsmalloc::Handle;

use crate::backing::Backing;
use crate::error::{Error, Result};
use crate::post;
use crate::pp::{WritebackRequest, select};
use crate::shared::Seen;
use crate::slot::{Flags, SlotGuard};
use crate::stats::Counters;
use crate::store::Store;

/// What a writeback pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WritebackReport {
    /// Slots now in the backing file.
    pub slots: u64,
    /// Their pages.
    pub pages: u64,
    /// Bytes written to the file for them (a copy several of them share counts once).
    pub bytes: u64,
    /// Slots that share a copy written for another slot naming the same object (counted
    /// in `slots` too).
    #[serde(default)]
    pub shared: u64,
    /// Their pages (counted in `pages` too; `bd_writes` grows by `pages - shared_pages`).
    #[serde(default)]
    pub shared_pages: u64,
}

/// Bytes of streams gathered before a batch is written, whatever `writeback_batch_size`
/// says (a pass must not hold much memory while it is there to free some).
const MAX_BATCH_BYTES: usize = 8 << 20;

/// One slot gathered into a batch.
struct Gathered {
    index: usize,
    source: Source,
    /// Its pages were taken from `writeback_limit`.
    charged: bool,
}

/// The file copy a gathered slot is to be switched to.
enum Source {
    /// Its own stream, at this range of the batch's buffer, written for it alone.
    Own(Range<usize>),
    /// The pass's shared copy `n`; `first`: this slot brought its stream into the batch.
    Shared { n: usize, first: bool },
}

/// The copy of a shared object's stream that the pass writes once.
struct Copy {
    /// The object's key (id, stream length).
    key: (u64, usize),
    len: usize,
    /// The check of its bytes (`slot::wb_check`).
    check: u64,
    place: Place,
    /// `bd_writes` and the report counted it (with the first slot switched to it).
    counted: bool,
}

/// Where a shared copy is.
enum Place {
    /// In the batch being gathered, at this range of its buffer.
    Batch(Range<usize>),
    /// On the file at this offset, held by the pass.
    File(u64),
    /// Never written (its batch failed), or let go by the pass.
    Gone,
}

/// The pass's shared copies: `seen` maps each object met shared to its copy's index in
/// `copies`; the pass holds every copy on the file whose entry is open.
struct Shares<'a> {
    store: &'a Store,
    backing: &'a dyn Backing,
    seen: Seen<'a, usize, usize>,
    copies: Vec<Copy>,
}

impl Shares<'_> {
    /// Lets go of the copies whose entries were closed (see [`crate::shared`]).
    fn release_closed(&mut self) {
        for n in self.seen.take_closed() {
            let copy = &mut self.copies[n];
            if let Place::File(offset) = copy.place {
                self.store
                    .shared_copies
                    .release(self.backing, offset, copy.len);
            }
            copy.place = Place::Gone;
        }
    }
}

impl Drop for Shares<'_> {
    fn drop(&mut self) {
        self.seen.close_all();
        self.release_closed();
    }
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
    let batch_size = store.writeback_batch();
    let mut report = WritebackReport::default();
    let mut buf = Vec::new();
    let mut batch: Vec<Gathered> = Vec::new();
    let mut stream = Vec::new();
    let mut shares = Shares {
        store,
        backing: &*backing,
        seen: Seen::new(store.pool()),
        copies: Vec::new(),
    };
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
            let source = match gather(&mut shares, &g, &mut buf, &mut stream) {
                Ok(source) => source,
                Err(err) => {
                    drop(g);
                    store.wb_limit().refund(pages, charged);
                    unmark(store, &mut batch);
                    return Err(err);
                }
            };
            post::set_flag(&mut g, Flags::PP, true);
            taken += pages;
            batch.push(Gathered {
                index,
                source,
                charged,
            });
        }
        if batch.len() >= batch_size || buf.len() >= MAX_BATCH_BYTES {
            flush(&mut shares, &mut buf, &mut batch, &mut report)?;
        }
    }
    flush(&mut shares, &mut buf, &mut batch, &mut report)?;
    if limited {
        return Err(Error::WritebackLimit);
    }
    Ok(report)
}

/// Gathers the locked slot: a reference to the copy of its object when the pass has one,
/// else its stream into `buf` (as a new shared copy when its object is shared).
fn gather(
    shares: &mut Shares<'_>,
    g: &SlotGuard<'_>,
    buf: &mut Vec<u8>,
    stream: &mut Vec<u8>,
) -> Result<Source> {
    let e = g.get();
    let head = Handle::from_raw(e.handle);
    let key = shares.seen.shared_id(head)?.map(|id| (id, e.len));
    if let Some(key) = key
        && let Some(n) = shares.seen.get(key)
    {
        return Ok(Source::Shared { n, first: false });
    }
    post::stream_of(shares.store, g, stream)?;
    let range = buf.len()..buf.len() + stream.len();
    buf.extend_from_slice(stream);
    let n = shares.copies.len();
    if let Some(key) = key
        && shares.seen.record(key, head, e.len, n)
    {
        shares.copies.push(Copy {
            key,
            len: e.len,
            check: crate::slot::wb_check(stream),
            place: Place::Batch(range),
            counted: false,
        });
        return Ok(Source::Shared { n, first: true });
    }
    Ok(Source::Own(range))
}

/// Cleaning passes a writeback runs at most for one append that finds the store full.
const CLEAN_TRIES: usize = 4;

/// Bytes a cleaning pass for a full store gives back beyond the append's own (a segment of
/// the default size): objects are packed into whole segments, so the room comes back in
/// segments. Where one pass is not enough, the next try cleans the next sparsest; a pass
/// cleans nothing when the sparsest segments cannot give back that much (a store that is
/// really full).
const CLEAN_SLACK: u64 = 1 << 20;

/// Appends `objects`; when the store is full (`ENOSPC`), cleans it ([`crate::clean`],
/// the sparsest segments until they give back the room the append needs) and tries again,
/// up to [`CLEAN_TRIES`] times while cleaning moves something. A failed cleaning leaves the
/// append's own error to tell.
fn append_or_clean(
    store: &Store,
    backing: &dyn Backing,
    objects: &[&[u8]],
) -> std::io::Result<Vec<u64>> {
    let want = objects.iter().map(|o| o.len() as u64).sum::<u64>() + CLEAN_SLACK;
    let mut appended = backing.append(objects);
    for _ in 0..CLEAN_TRIES {
        match &appended {
            Err(err) if err.raw_os_error() == Some(libc::ENOSPC) => {}
            _ => break,
        }
        match crate::clean::clean(store, backing, crate::clean::Pick::Bytes(want)) {
            Ok(cleaned) if cleaned.objects > 0 => appended = backing.append(objects),
            _ => break,
        }
    }
    appended
}

/// Appends the batch's streams to the file and switches the slots that still hold what
/// was written.
fn flush(
    shares: &mut Shares<'_>,
    buf: &mut Vec<u8>,
    batch: &mut Vec<Gathered>,
    report: &mut WritebackReport,
) -> Result<()> {
    if batch.is_empty() {
        return Ok(());
    }
    let store = shares.store;
    let backing = shares.backing;
    // The streams brought into the batch, in the order they were gathered.
    let ranges: Vec<Range<usize>> = batch
        .iter()
        .filter_map(|item| match &item.source {
            Source::Own(range) => Some(range.clone()),
            Source::Shared { n, first: true } => match &shares.copies[*n].place {
                Place::Batch(range) => Some(range.clone()),
                _ => None,
            },
            Source::Shared { .. } => None,
        })
        .collect();
    let objects: Vec<&[u8]> = ranges.iter().map(|r| &buf[r.clone()]).collect();
    let appended = if objects.is_empty() {
        Ok(Vec::new())
    } else {
        append_or_clean(store, backing, &objects)
    };
    let offsets = match appended {
        Ok(offsets) => offsets,
        Err(err) => {
            Counters::add(&store.counters().wb_failed, 1);
            for item in batch.iter() {
                if let Source::Shared { n, first: true } = item.source {
                    shares.copies[n].place = Place::Gone;
                }
            }
            unmark(store, batch);
            buf.clear();
            return Err(Error::Backing(err));
        }
    };
    // Where each slot goes: its own copy's offset, or its shared copy (now on the file,
    // held by the pass).
    let mut offsets = offsets.into_iter();
    let mut own = Vec::with_capacity(batch.len());
    for item in batch.iter() {
        match item.source {
            Source::Own(_) => own.push(offsets.next()),
            Source::Shared { n, first } => {
                if first && let Some(offset) = offsets.next() {
                    shares.copies[n].place = Place::File(offset);
                }
                own.push(None);
            }
        }
    }
    let mut touched = Vec::new();
    for (item, own) in batch.drain(..).zip(own) {
        let pages = store.pages(item.index);
        // The copy's offset, length, check, and shared copy if it is one.
        let target = match item.source {
            Source::Own(range) => own.map(|offset| {
                let check = crate::slot::wb_check(&buf[range.clone()]);
                (offset, range.len(), check, None)
            }),
            Source::Shared { n, .. } => {
                touched.push(n);
                let copy = &shares.copies[n];
                match copy.place {
                    Place::File(offset) => Some((offset, copy.len, copy.check, Some(n))),
                    _ => None,
                }
            }
        };
        let mut g = store.lock(item.index);
        // `PP` still set: nothing wrote, freed or read the slot since it was gathered (each
        // clears it), so it holds what went to the file and still qualifies.
        let pp = g.get().flags.contains(Flags::PP);
        if let Some((offset, len, check, shared)) = target
            && pp
        {
            let wrote = match shared {
                None => true,
                Some(n) => {
                    store.shared_copies.hold(offset);
                    !std::mem::replace(&mut shares.copies[n].counted, true)
                }
            };
            post::switch_to_backing(store, &mut g, offset, check, wrote);
            report.slots += 1;
            report.pages += pages;
            if wrote {
                report.bytes += len as u64;
            } else {
                report.shared += 1;
                report.shared_pages += pages;
            }
            continue;
        }
        if pp {
            post::set_flag(&mut g, Flags::PP, false);
        }
        drop(g);
        if let Some((offset, len, _, None)) = target {
            backing.free(offset, len);
        }
        store.wb_limit().refund(pages, item.charged);
    }
    // Objects whose last slot just left them: no later slot can meet them.
    for n in touched {
        shares.seen.close_if_alone(shares.copies[n].key);
    }
    shares.release_closed();
    buf.clear();
    Ok(())
}
