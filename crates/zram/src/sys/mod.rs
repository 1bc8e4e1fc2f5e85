//! The only module of this crate with `unsafe` code: a zeroed table from the OS, and the
//! LZO decoder's fast loop ([`lzo`]).
//!
//! # Safety
//!
//! [`zeroed_atomics`] builds a boxed slice from `alloc_zeroed` with the slice's own layout;
//! all-zero bytes are a valid `AtomicU64`, and the box frees with that same layout.

use std::sync::atomic::AtomicU64;

pub(crate) mod lzo;

/// `n` atomics, all 0, whose memory becomes resident only where it is first touched: a
/// large zeroed allocation comes from fresh anonymous pages, which the OS fills on demand.
/// So a table sized for a whole device (the slot table) costs memory only where it is used.
/// `None` when the memory cannot be had (the table is larger than the address space or
/// than the OS grants).
pub(crate) fn zeroed_atomics(n: usize) -> Option<Box<[AtomicU64]>> {
    if n == 0 {
        return Some(Box::new([]));
    }
    let layout = std::alloc::Layout::array::<AtomicU64>(n).ok()?;
    // SAFETY: `layout` has a non-zero size; the allocation is checked for null; zeroed bytes
    // are a valid `AtomicU64` (0); and `Box<[AtomicU64]>` frees with this very layout (an
    // array of `n` `AtomicU64` from the global allocator).
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<AtomicU64>();
        if ptr.is_null() {
            return None;
        }
        Some(Box::from_raw(std::ptr::slice_from_raw_parts_mut(ptr, n)))
    }
}
