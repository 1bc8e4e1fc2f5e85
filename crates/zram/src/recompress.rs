//! Recompression: re-encoding slots with a secondary algorithm (the kernel's `recompress`).
//!
//! # Rules (the kernel's, with its 2026 changes)
//!
//! - One secondary algorithm per pass, named by `priority=` (which wins over `algo=`), else
//!   by `algo=`, else the lowest configured priority.
//! - Candidates: resident slots (not same-filled, not written back, not marked
//!   incompressible) not already encoded at this priority or above, of the pass's `type=`,
//!   at least `threshold` bytes long; largest first; `max_pages` counts every attempt.
//! - A new encoding is kept only if it lands in a *smaller size class* than the old one
//!   (zsmalloc's class lookup adds the handle header where objects carry one; a stream of
//!   several objects compares its count of objects first) and, with a threshold, is shorter
//!   than it. A huge slot's old class is the huge class.
//! - A slot the highest configured algorithm cannot shrink is marked incompressible and is
//!   never tried again.
//! - Recompression is not an access: the access time and idle mark stay. Reads decode
//!   each slot with its own priority's algorithm.
//!
//! # Shared objects (seed 004, beyond the kernel)
//!
//! Slots may name one stored object through different handles (after `fold`, or with
//! `dedup`). A pass encodes such an object once: the first eligible slot naming it is
//! re-encoded as above, and the result is remembered for the object (`shared.rs`:
//! keyed by its id, its stream's length, the slot's length and its priority, which is all
//! the result depends on). A later slot of the pass naming the same object, if eligible
//! itself (eligibility, flags and idle marks stay per slot), takes the same result without
//! running the codec: a new handle to the first slot's new object (which stays shared, and
//! its old handle is let go), or, when the new encoding was not kept, the same verdict
//! (marked incompressible at the top priority). If the first slot's new object is gone
//! meanwhile (it was rewritten), the slot is encoded itself. Counters and the report count
//! every slot as before (`compr_data_size` stays the sum of slot lengths); `shared` and
//! `codec_runs` tell the encodings saved.

use zsmalloc::Handle;

use crate::chain::{last_piece, links};
use crate::error::{Error, Result};
use crate::post;
use crate::pp::{Mode, RecompressRequest, select};
use crate::shared::Seen;
use crate::slot::{Flags, SlotGuard};
use crate::stats::Counters;
use crate::store::Store;

/// What a recompression pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RecompressReport {
    /// Slots tried.
    pub attempts: u64,
    /// Slots re-encoded into a smaller class.
    pub recompressed: u64,
    /// Slots marked incompressible.
    pub incompressible: u64,
    /// Stream bytes saved (old lengths minus new).
    pub saved_bytes: u64,
    /// Slots re-encoded by taking a new handle to the object an identical shared one was
    /// re-encoded into earlier in the pass (counted in `recompressed` too).
    #[serde(default)]
    pub shared: u64,
    /// Slots the codec encoded: `attempts` less those that took the result of an
    /// identical shared object the pass had already tried.
    #[serde(default)]
    pub codec_runs: u64,
}

/// What a pass did with a shared object.
#[derive(Debug, Clone, Copy)]
enum Verdict {
    /// Its new encoding lands in no smaller class: the slots keep it.
    Kept,
    /// Re-encoded into the stream of `len` bytes at `head`: a handle of the pass's own to
    /// the new object (taken while the first slot held it, so that object lives, and its
    /// handle names it, however the first slot changes meanwhile), freed when the entry
    /// closes.
    Replaced { head: Handle, len: usize },
}

/// The pass's shared objects: on every way out, the new objects' handles the pass holds
/// are let go.
struct Memo<'a> {
    pool: &'a dyn zsmalloc::Backend,
    seen: Seen<'a, (usize, usize, u8), Verdict>,
}

impl Memo<'_> {
    /// Lets go of the handles of the records whose entries closed.
    fn release_closed(&mut self) {
        for verdict in self.seen.take_closed() {
            if let Verdict::Replaced { head, len } = verdict {
                crate::chain::free(self.pool, head, len);
            }
        }
    }
}

impl Drop for Memo<'_> {
    fn drop(&mut self) {
        self.seen.close_all();
        self.release_closed();
    }
}

/// What the result of a shared object depends on beyond its id: its stream's length, the
/// slot's length, the slot's priority.
type Key = (u64, (usize, usize, u8));

/// The priority a request names, checked against the device's algorithms.
fn priority(store: &Store, req: &RecompressRequest) -> Result<u8> {
    let mut secondary = store.secondary_priorities();
    let p = match (req.priority, req.algo) {
        (Some(p), _) => p,
        (None, Some(a)) => secondary
            .find(|&p| store.codec(p).is_ok_and(|c| c.algorithm() == a))
            .ok_or_else(|| {
                Error::InvalidArgument(format!("algo={a} is not a recompression algorithm"))
            })?,
        (None, None) => secondary
            .next()
            .ok_or_else(|| Error::InvalidArgument("no recompression algorithm is set".into()))?,
    };
    store.codec(p)?;
    Ok(p)
}

/// The order of the memory a stream of `len` bytes takes: objects first, then the class
/// of the last one.
fn class_key(store: &Store, len: usize) -> Result<(usize, usize)> {
    let last = last_piece(len);
    Ok((links(len), store.pool().footprint(last)?))
}

/// Runs a recompression pass.
pub(crate) fn recompress(store: &Store, req: &RecompressRequest) -> Result<RecompressReport> {
    let prio = priority(store, req)?;
    if req.threshold > store.unit_size() {
        return Err(Error::InvalidArgument(format!(
            "threshold={}",
            req.threshold
        )));
    }
    let _pp = store.post_processing()?;
    let mode = req.mode.unwrap_or(Mode::Any);
    let eligible = |e: &crate::slot::SlotEntry| {
        mode.admits(e)
            && !e.flags.contains(Flags::INCOMPRESSIBLE)
            && e.prio < prio
            && e.len >= req.threshold
    };
    let mut report = RecompressReport::default();
    let top = store.top_priority();
    let codec = store.codec(prio)?;
    let mut plain = Vec::new();
    let mut encoded = Vec::new();
    let mut memo = Memo {
        pool: store.pool(),
        seen: Seen::new(store.pool()),
    };
    for index in select(store, &[(mode, 0, None)])? {
        if req.max_pages != 0 && report.attempts >= req.max_pages {
            break;
        }
        let mut g = store.lock(index);
        let e = g.get();
        if !eligible(&e) {
            continue;
        }
        report.attempts += 1;
        Counters::add(&store.counters().recomp_attempts, 1);
        let slot_len = store.slot_len(index);
        let old = Handle::from_raw(e.handle);
        let key: Option<Key> = memo
            .seen
            .shared_id(old)?
            .map(|id| (id, (e.len, slot_len, e.prio)));
        if let Some(key) = key {
            if take_seen(store, &mut g, &mut memo.seen, key, prio, top, &mut report) {
                drop(g);
                memo.seen.close_if_alone(key);
                memo.release_closed();
                continue;
            }
            // Pinned before the slot lets go of its handle (see `crate::shared`).
            memo.seen.record(key, old, e.len, Verdict::Kept);
        }
        report.codec_runs += 1;
        plain.resize(slot_len, 0);
        store.load(&g, &mut plain)?;
        let new_len = codec.with(|c| c.compress(&plain, &mut encoded))??;
        let smaller = store.fits(new_len, slot_len)
            && class_key(store, new_len)? < class_key(store, e.len)?
            && (req.threshold == 0 || new_len < req.threshold);
        let verdict = if smaller {
            let head = post::replace_stream(store, &mut g, &encoded[..new_len], prio)?;
            replaced(store, &mut report, e.len, new_len);
            // Only worth a handle when other slots may come for it.
            key.and_then(|_| store.pool().share(head).ok())
                .map(|pin| Verdict::Replaced {
                    head: pin,
                    len: new_len,
                })
        } else {
            if prio == top {
                post::set_flag(&mut g, Flags::INCOMPRESSIBLE, true);
                report.incompressible += 1;
            }
            Some(Verdict::Kept)
        };
        drop(g);
        if let Some(key) = key {
            match verdict {
                Some(verdict) => {
                    if memo.seen.update(key, verdict) {
                        memo.seen.close_if_alone(key);
                    } else if let Verdict::Replaced { head, len } = verdict {
                        // The old object could not be pinned: nobody will ask.
                        crate::chain::free(store.pool(), head, len);
                    }
                }
                // No handle to give the others: each encodes itself.
                None => memo.seen.close(key),
            }
            memo.release_closed();
        }
    }
    Ok(report)
}

/// Gives the locked slot, which names the shared object of `key`, what the pass did with
/// that object already, if it did something and can still give it; returns whether it
/// did.
fn take_seen(
    store: &Store,
    g: &mut SlotGuard<'_>,
    seen: &mut Seen<'_, (usize, usize, u8), Verdict>,
    key: Key,
    prio: u8,
    top: u8,
    report: &mut RecompressReport,
) -> bool {
    match seen.get(key) {
        None => false,
        Some(Verdict::Kept) => {
            if prio == top {
                post::set_flag(g, Flags::INCOMPRESSIBLE, true);
                report.incompressible += 1;
            }
            true
        }
        // The pass holds the new object (see `Verdict`); if no handle can be had (the
        // handle table is full), the slot is encoded itself.
        Some(Verdict::Replaced { head, len }) => match store.pool().share(head) {
            Ok(handle) => {
                let old_len = g.get().len;
                post::replace_with(store, g, handle, len, prio);
                replaced(store, report, old_len, len);
                report.shared += 1;
                true
            }
            Err(_) => false,
        },
    }
}

/// Counts a slot re-encoded from `old` to `new` bytes.
fn replaced(store: &Store, report: &mut RecompressReport, old: usize, new: usize) {
    let saved = old.saturating_sub(new) as u64;
    report.recompressed += 1;
    report.saved_bytes += saved;
    Counters::add(&store.counters().recomp_done, 1);
    Counters::add(&store.counters().recomp_saved_bytes, saved);
}
