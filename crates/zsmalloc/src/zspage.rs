//! One zspage: a run of `pages_per_zspage` consecutive pages cut into `objs_per_zspage`
//! objects of one class size — or, for a *short* zspage that compaction made for a class's
//! last partly used zspage, fewer pages and as many objects as fit in them (`objs`).
//!
//! Representation. A [`ZsPage`] owns its memory (a [`PageRun`] of virtually contiguous
//! pages, so no object ever straddles a mapping boundary) and its bookkeeping; it lives in
//! its class shard and is guarded by the shard's lock, like everything else in the shard.
//!
//! Object layout (non-huge classes): a free object's first 8 bytes hold the index of the
//! next free object (top bits zero). With the kernel's layout (`Header::Handle`) the first 8
//! bytes of an allocated object hold its handle (little endian, with the handle magic in its
//! top bits; for a shared object, its anchor's) and the caller's bytes follow; with `Header::Omitted` an allocated object holds
//! the caller's bytes alone. Objects at or past `fresh` have never been used and are not
//! linked. Huge classes (one object per one-page zspage) keep no header and no link: their
//! one object is free or not.
//!
//! Invariant: `inuse + free_list_len + (objs - fresh) == objs`, and
//! `objs == pages * 4096 / size` (so `objs == objs_per_zspage` for a full-length zspage).

use crate::handle::is_handle_word;
use crate::sys::{PAGE_SIZE, PageRun};

/// No next free object.
pub(crate) const NO_OBJ: u16 = u16::MAX;

/// Fullness groups, as the current kernel: 0 = empty, 1..=10 = in-use ratio buckets
/// (`ratio / 10 + 1`, so <10%, <20% … <100%), 11 = full.
pub(crate) const GROUP_EMPTY: u8 = 0;
pub(crate) const GROUP_FULL: u8 = 11;
pub(crate) const NR_GROUPS: usize = 12;

/// One zspage: its pages and its bookkeeping.
#[derive(Debug)]
pub(crate) struct ZsPage {
    pub run: PageRun,
    /// Objects the zspage holds.
    pub objs: u16,
    /// Objects in use.
    pub inuse: u16,
    /// First free (linked) object, or [`NO_OBJ`].
    pub free_head: u16,
    /// Objects `fresh..objs` were never used.
    pub fresh: u16,
    /// Current fullness group.
    pub group: u8,
    /// Position in its group's list.
    pub list_pos: u32,
}

/// The fullness group for `inuse` of `objs` objects.
#[inline]
pub(crate) fn fullness_group(inuse: usize, objs: usize) -> u8 {
    if inuse == 0 {
        GROUP_EMPTY
    } else if inuse == objs {
        GROUP_FULL
    } else {
        // Integer division would put 1 of 127 in ratio 0: bucket it as <10% instead.
        (100 * inuse / objs / 10 + 1) as u8
    }
}

/// Reads the 8-byte header of object `obj` of `size` bytes.
#[inline]
pub(crate) fn header(mem: &[u8], size: usize, obj: usize) -> u64 {
    let off = obj * size;
    let mut word = [0u8; 8];
    word.copy_from_slice(&mem[off..off + 8]);
    u64::from_le_bytes(word)
}

/// Writes the 8-byte header of object `obj` of `size` bytes.
#[inline]
pub(crate) fn set_header(mem: &mut [u8], size: usize, obj: usize, value: u64) {
    let off = obj * size;
    mem[off..off + 8].copy_from_slice(&value.to_le_bytes());
}

impl ZsPage {
    pub fn new(run: PageRun, objs: usize) -> Self {
        Self {
            run,
            objs: objs as u16,
            inuse: 0,
            free_head: NO_OBJ,
            fresh: 0,
            group: GROUP_EMPTY,
            list_pos: 0,
        }
    }

    /// Pages shortening could free: those beyond what its objects need, if partly used.
    pub fn shortenable(&self, size: usize) -> usize {
        if self.inuse == 0 || self.inuse == self.objs {
            return 0;
        }
        let need = (self.inuse as usize * size).div_ceil(PAGE_SIZE);
        self.run.pages().saturating_sub(need)
    }

    /// Takes a free object index (the caller knows the zspage is not full).
    #[inline]
    pub fn take_free(&mut self, size: usize, huge: bool) -> u16 {
        let obj = if self.free_head != NO_OBJ {
            let obj = self.free_head;
            self.free_head = if huge {
                NO_OBJ
            } else {
                (header(self.run.bytes(), size, obj as usize) & 0xFFFF) as u16
            };
            obj
        } else {
            let obj = self.fresh;
            self.fresh += 1;
            obj
        };
        self.inuse += 1;
        obj
    }

    /// Links object `obj` into the free list.
    #[inline]
    pub fn put_free(&mut self, size: usize, huge: bool, obj: u16) {
        if !huge {
            set_header(
                self.run.bytes_mut(),
                size,
                obj as usize,
                u64::from(self.free_head),
            );
        }
        self.free_head = obj;
        self.inuse -= 1;
    }

    /// The free list's objects (walks it; for invariant checks), or `None` if it is broken.
    pub fn free_list(&self, size: usize, huge: bool) -> Option<Vec<u16>> {
        let objs = self.objs as usize;
        let mem = self.run.bytes();
        let mut list = Vec::new();
        let mut cur = self.free_head;
        while cur != NO_OBJ {
            if list.len() >= objs || cur as usize >= objs || cur >= self.fresh {
                return None;
            }
            list.push(cur);
            cur = if huge {
                NO_OBJ
            } else {
                let word = header(mem, size, cur as usize);
                if is_handle_word(word) {
                    return None;
                }
                (word & 0xFFFF) as u16
            };
        }
        Some(list)
    }
}
