//! The slot changes post-processing makes, each on a locked slot: copying out its stored
//! stream, switching it to its written-back copy (its own, or one it shares with slots
//! naming the same object), replacing its stream by a recompressed one (new, or shared),
//! flags, and idle marking. Counters move as `store.rs` states them: a written-back slot
//! stays counted in `orig_data_size` (`pages_stored`) and leaves `compr_data_size` and
//! `huge_pages`.

use zsmalloc::Handle;

use crate::error::Result;
use crate::slot::{Flags, SlotEntry, SlotGuard};
use crate::stats::Counters;
use crate::store::Store;

/// The stored stream of the locked slot, which holds an object in memory, into `buf`.
pub(crate) fn stream_of(store: &Store, g: &SlotGuard<'_>, buf: &mut Vec<u8>) -> Result<()> {
    let e = g.get();
    buf.resize(e.len, 0);
    store.stream_into(g.index(), e, buf)
}

/// Switches the locked slot, whose stream was written to the backing file at
/// `offset` (its bytes' check `check`, `slot::wb_check`), to that copy: its objects are
/// freed (its handle, when the object is shared), its data stays counted. `wrote`: the
/// copy was written for it (`bd_writes` and `bd_write_bytes` count it), rather than for
/// another slot naming the same shared object.
pub(crate) fn switch_to_backing(
    store: &Store,
    g: &mut SlotGuard<'_>,
    offset: u64,
    check: u64,
    wrote: bool,
) {
    let e = g.get();
    let pages = store.pages(g.index());
    store.drop_stream(e, pages);
    g.set(SlotEntry {
        handle: crate::slot::wb_handle(offset, check),
        len: e.len,
        flags: Flags::WB,
        prio: e.prio,
        ac_time: e.ac_time,
    });
    Counters::add(&store.counters().bd_count, pages);
    if wrote {
        Counters::add(&store.counters().bd_writes, pages);
        Counters::add(&store.counters().bd_write_bytes, e.len as u64);
    }
}

/// Replaces the locked slot's stream by `stream`, encoded with priority `prio`
/// (recompression: not an access, so the access time and idle mark stay); returns the new
/// stream's first handle.
pub(crate) fn replace_stream(
    store: &Store,
    g: &mut SlotGuard<'_>,
    stream: &[u8],
    prio: u8,
) -> Result<Handle> {
    let head = crate::chain::write(store.pool(), stream, |size| store.alloc(size))?;
    replace_with(store, g, head, stream.len(), prio);
    Ok(head)
}

/// Replaces the locked slot's stream by the `len`-byte one at `head` (a handle the slot
/// now owns: a new stream, or another handle to a shared one), encoded with priority
/// `prio`; as [`replace_stream`], not an access.
pub(crate) fn replace_with(
    store: &Store,
    g: &mut SlotGuard<'_>,
    head: Handle,
    len: usize,
    prio: u8,
) {
    let e = g.get();
    store.drop_stream(e, store.pages(g.index()));
    Counters::add(&store.counters().compr_data_size, len as u64);
    g.set(SlotEntry {
        handle: head.to_raw(),
        len,
        flags: e.flags.without(Flags::HUGE),
        prio,
        ac_time: e.ac_time,
    });
}

/// Sets or clears `flag` on the locked slot.
pub(crate) fn set_flag(g: &mut SlotGuard<'_>, flag: Flags, on: bool) {
    let mut e = g.get();
    e.flags = if on {
        e.flags.with(flag)
    } else {
        e.flags.without(flag)
    };
    g.set(e);
}

/// Marks idle every slot holding an object (not same-filled, not written back) last
/// accessed at least `min_age` seconds ago (every one with `None`); returns how many.
pub(crate) fn mark_idle(store: &Store, min_age: Option<u32>) -> u64 {
    let now = store.now();
    let mut marked = 0;
    for index in 0..store.slots() {
        let mut g = store.lock(index);
        let e = g.get();
        let eligible = e.is_resident() && !e.flags.contains(Flags::IDLE);
        if eligible && min_age.is_none_or(|age| now.saturating_sub(e.ac_time) >= age) {
            set_flag(&mut g, Flags::IDLE, true);
            marked += 1;
        }
    }
    Counters::add(&store.counters().idle_marked, marked);
    marked
}
