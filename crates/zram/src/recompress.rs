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

use crate::PAGE_SIZE;
use crate::chain::links;
use crate::error::{Error, Result};
use crate::post;
use crate::pp::{Mode, RecompressRequest, select};
use crate::slot::Flags;
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
}

/// The priority a request names, checked against the device's algorithms.
fn priority(store: &Store, req: &RecompressRequest) -> Result<u8> {
    let mut secondary = (1..=crate::slot::MAX_PRIORITY).filter(|&p| store.codec(p).is_ok());
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
    let k = links(len);
    let last = len - k * (PAGE_SIZE - 8);
    Ok((k, store.pool().lookup_class(last)?.index))
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
        plain.resize(slot_len, 0);
        store.load(&g, &mut plain)?;
        let new_len = codec.with(|c| c.compress(&plain, &mut encoded))??;
        let fits = new_len < slot_len - PAGE_SIZE + store.huge_class_size();
        let smaller = fits
            && class_key(store, new_len)? < class_key(store, e.len)?
            && (req.threshold == 0 || new_len < req.threshold);
        if smaller {
            post::replace_stream(store, &mut g, &encoded[..new_len], prio)?;
            report.recompressed += 1;
            report.saved_bytes += (e.len - new_len) as u64;
            Counters::add(&store.counters().recomp_done, 1);
            Counters::add(
                &store.counters().recomp_saved_bytes,
                (e.len - new_len) as u64,
            );
        } else if prio == top {
            post::set_flag(&mut g, Flags::INCOMPRESSIBLE, true);
            report.incompressible += 1;
        }
    }
    Ok(report)
}
