//! The slot table: one entry per 4 KiB page of the device (per compression unit when the
//! device's `unit_size` is larger, see `store.rs`), and the per-slot locks.
//!
//! An entry is two words. `handle` holds the zsmalloc handle of the slot's object (of a
//! unit's first object), or the fill word of a same-filled page or unit, or for a
//! written-back slot its object's offset in the backing file (the low [`WB_OFFSET_BITS`]
//! bits) and a check of the object's bytes (the [`WB_CHECK_BITS`] bits above: xxh3's low
//! bits), which a read of the file verifies ([`wb_handle`], [`wb_offset`], [`wb_check`]). `info` packs, from
//! bit 0: the stored length (18 bits, 0..=131072, the largest unit), the flags ([`Flags`], 8 bits), the compression priority (2 bits) and, from bit
//! 32, the last access time in seconds since the device started (for idle tracking).
//!
//! Locking: each slot is guarded by one lock of a striped lock array (the kernel keeps a
//! lock bit per slot; stripes give the same exclusion for 1/512 of the memory). Slots take
//! their stripes in blocks of `BLOCK` (a cache line of one-byte locks, so one writer
//! moving through its pages stays on one line), and the blocks are scattered over the
//! array by a hash (`SlotTable::stripe`). With stripes taken in turn (`i % STRIPES`),
//! two writers of contiguous ranges whose positions differed by a multiple of the array's
//! length wanted the same stripes in the same order: the faster one, once it caught up,
//! waited on the slower one's every page for as long as it stayed faster. On the 16-core
//! machine, at 16 streams, 2.8% of the writers' samples waited on slot locks. Scattered,
//! two writers meet on a stripe by chance, and for at most the rest of a block. The words
//! are atomics only so that they can be read without `unsafe`; every change happens under
//! the slot's lock, so relaxed ordering suffices.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::{Mutex, MutexGuard};

/// Highest compression priority a slot records (2 bits; the kernel's `ZRAM_MAX_COMPS - 1`):
/// 0 is the primary algorithm, 1..=3 the secondary ones.
pub const MAX_PRIORITY: u8 = 3;

/// Locks in the striped lock array.
const STRIPES: usize = 4096;

/// Consecutive slots whose locks lie side by side (a cache line of one-byte locks).
const BLOCK: usize = 64;

/// Per-slot flags (the kernel's `zram_pageflags`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Flags(u8);

impl Flags {
    /// Every 8-byte word of the page is equal; `handle` holds the word, no object is used.
    pub const SAME: Flags = Flags(1 << 0);
    /// Stored uncompressed: it compressed to `huge_class_size` or more.
    pub const HUGE: Flags = Flags(1 << 1);
    /// Marked idle by `idle` and not accessed since: the next read or write clears it.
    pub const IDLE: Flags = Flags(1 << 2);
    /// Written back: `handle` is the object's offset in the backing file, `len` its
    /// length there (the slot's length when stored raw, shorter when compressed).
    pub const WB: Flags = Flags(1 << 3);
    /// No secondary algorithm shrinks it into a smaller class: recompression skips it.
    pub const INCOMPRESSIBLE: Flags = Flags(1 << 4);
    /// Gathered for writeback, whose write to the file is in flight (the kernel's
    /// `ZRAM_PP_SLOT`). Anything that replaces or frees the slot's data clears it, so the
    /// slot is switched to its written-back copy only if it still holds what was written;
    /// a read clears it too (the page is hot again).
    pub const PP: Flags = Flags(1 << 5);

    /// Are all flags of `other` set?
    pub fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// The union.
    pub fn with(self, other: Flags) -> Flags {
        Flags(self.0 | other.0)
    }

    /// Without the flags of `other`.
    pub fn without(self, other: Flags) -> Flags {
        Flags(self.0 & !other.0)
    }

    /// The raw bits.
    pub fn bits(self) -> u8 {
        self.0
    }
}

/// Bits of a written-back slot's `handle` holding its object's offset in the backing file:
/// stores give offsets below `1 << WB_OFFSET_BITS` (16 TiB, `backing::MAX_OFFSET`).
pub const WB_OFFSET_BITS: u32 = 44;
/// Bits above them holding the check of the object's bytes.
pub const WB_CHECK_BITS: u32 = 64 - WB_OFFSET_BITS;
const WB_OFFSET_MASK: u64 = (1 << WB_OFFSET_BITS) - 1;
const WB_CHECK_MASK: u64 = (1 << WB_CHECK_BITS) - 1;
const _: () = assert!(WB_OFFSET_BITS + WB_CHECK_BITS == u64::BITS);

/// The check of a written-back object's bytes, as its slot's handle keeps it.
pub fn wb_check(bytes: &[u8]) -> u64 {
    xxhash_rust::xxh3::xxh3_64(bytes) & WB_CHECK_MASK
}

/// A written-back slot's handle: the object's offset (below `1 << WB_OFFSET_BITS`) and the
/// check of its bytes ([`wb_check`]).
pub fn wb_handle(offset: u64, check: u64) -> u64 {
    debug_assert!(offset <= WB_OFFSET_MASK && check <= WB_CHECK_MASK);
    (offset & WB_OFFSET_MASK) | (check << WB_OFFSET_BITS)
}

/// The object's offset in the backing file, from a written-back slot's handle.
pub fn wb_offset(handle: u64) -> u64 {
    handle & WB_OFFSET_MASK
}

/// The check of the object's bytes, from a written-back slot's handle.
pub fn wb_check_of(handle: u64) -> u64 {
    handle >> WB_OFFSET_BITS
}

/// `bytes`, read from the backing file for the written-back slot with `handle`, are those
/// written; else `InvalidData` (`EIO`): the file changed (another program, the medium).
pub fn wb_verify(handle: u64, bytes: &[u8]) -> std::io::Result<()> {
    if wb_check(bytes) == wb_check_of(handle) {
        return Ok(());
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!(
            "the {} bytes at {} of the backing file are not those written there (changed by \
             another program, or by the medium)",
            bytes.len(),
            wb_offset(handle)
        ),
    ))
}

const LEN_BITS: u32 = 18;
const LEN_MASK: u64 = (1 << LEN_BITS) - 1;
const FLAGS_SHIFT: u32 = LEN_BITS;
const PRIO_SHIFT: u32 = FLAGS_SHIFT + 8;
const TIME_SHIFT: u32 = 32;

/// A decoded slot entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotEntry {
    /// Handle of the object, or the fill word of a same-filled page.
    pub handle: u64,
    /// Bytes stored (0 for an empty or same-filled slot): the compressed length, or the
    /// page's (unit's) length when stored raw.
    pub len: usize,
    /// Flags.
    pub flags: Flags,
    /// Compression priority: 0 for the primary algorithm, 1..=3 for the secondary one
    /// recompression encoded the slot with.
    pub prio: u8,
    /// Last access (read or write), seconds since the device started.
    pub ac_time: u32,
}

impl SlotEntry {
    /// Does the slot hold data (an object, a fill word or a written-back page)?
    pub fn is_allocated(&self) -> bool {
        self.len != 0 || self.flags.contains(Flags::SAME) || self.flags.contains(Flags::WB)
    }

    /// Does the slot hold an object in memory (not same-filled, not written back)?
    pub fn is_resident(&self) -> bool {
        self.len != 0 && !self.flags.contains(Flags::SAME) && !self.flags.contains(Flags::WB)
    }

    fn pack_info(&self) -> u64 {
        (self.len as u64 & LEN_MASK)
            | (u64::from(self.flags.0) << FLAGS_SHIFT)
            | (u64::from(self.prio & 3) << PRIO_SHIFT)
            | (u64::from(self.ac_time) << TIME_SHIFT)
    }

    fn unpack(handle: u64, info: u64) -> Self {
        Self {
            handle,
            len: (info & LEN_MASK) as usize,
            flags: Flags(((info >> FLAGS_SHIFT) & 0xFF) as u8),
            prio: ((info >> PRIO_SHIFT) & 3) as u8,
            ac_time: (info >> TIME_SHIFT) as u32,
        }
    }
}

/// The slot table of one device: two words per slot (the handle, then the packed info), all
/// zero for an empty slot, so the table's pages become resident only as slots are used.
#[derive(Debug)]
pub struct SlotTable {
    words: crate::sys::ZeroedAtomics,
    locks: Box<[Mutex<()>]>,
}

/// Proof that a slot's lock is held; reads and writes of the entry go through it.
#[derive(Debug)]
pub struct SlotGuard<'a> {
    table: &'a SlotTable,
    index: usize,
    _lock: MutexGuard<'a, ()>,
}

impl SlotTable {
    /// A table of `n` empty slots; `None` when the memory for it cannot be had.
    pub fn new(n: usize) -> Option<Self> {
        Some(Self {
            words: crate::sys::ZeroedAtomics::new(n.checked_mul(2)?)?,
            locks: (0..STRIPES.min(n.max(1))).map(|_| Mutex::new(())).collect(),
        })
    }

    /// Number of slots.
    pub fn len(&self) -> usize {
        self.words.len() / 2
    }

    /// Is the table empty (a zero-size device)?
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// Locks slot `index` (which must be in range).
    pub fn lock(&self, index: usize) -> SlotGuard<'_> {
        SlotGuard {
            table: self,
            index,
            _lock: self.locks[self.stripe(index)].lock(),
        }
    }

    /// The lock of slot `index`: its place in its block of [`BLOCK`] slots, in the block
    /// of locks its block hashes to (taken in turn where the table has under two blocks'
    /// worth of locks).
    #[inline]
    fn stripe(&self, index: usize) -> usize {
        let blocks = self.locks.len() / BLOCK;
        if blocks < 2 {
            return index % self.locks.len();
        }
        // Fibonacci hashing: the high bits of the block's number times 2^64 / phi.
        let mixed = ((index / BLOCK) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32;
        (mixed as usize % blocks) * BLOCK + index % BLOCK
    }

    /// Locks slot `index` to change it (as [`lock`](Self::lock)), with its entry's page of
    /// the table made writable at once. A change reads the entry first, and the first read
    /// of an untouched page of the table maps the OS's shared zero page there, which the
    /// change's store then replaces: a second fault, and a flush of the page from the TLB
    /// of every CPU the process runs on (an interrupt each). On the 16-core machine, at 16
    /// streams, those flushes were 0.7% of the writers' samples.
    pub fn lock_to_write(&self, index: usize) -> SlotGuard<'_> {
        let guard = self.lock(index);
        // A compare-and-swap is a write access whether or not it swaps (the compiler may
        // turn an `or` of 0 into a load); swapping 0 for 0 changes nothing.
        let _ = self.words[2 * index + 1].compare_exchange(0, 0, Relaxed, Relaxed);
        guard
    }

    /// Does slot `index` hold nothing, as read without its lock? (An answer that a write
    /// racing with the caller may overtake, as it may overtake any unordered request.)
    pub fn vacant(&self, index: usize) -> bool {
        let w = &self.words[2 * index..2 * index + 2];
        w[0].load(Relaxed) == 0 && w[1].load(Relaxed) == 0
    }

    /// The flags of slot `index` as read without its lock: a hint, which a change racing
    /// with the caller may overtake.
    pub(crate) fn flags_unlocked(&self, index: usize) -> Flags {
        Flags(((self.words[2 * index + 1].load(Relaxed) >> FLAGS_SHIFT) & 0xFF) as u8)
    }

    /// Bytes of memory the table spans (its pages become resident as slots are first used,
    /// so the process may hold less).
    pub fn metadata_bytes(&self) -> usize {
        self.words.len() * std::mem::size_of::<AtomicU64>()
            + self.locks.len() * std::mem::size_of::<Mutex<()>>()
    }
}

impl SlotGuard<'_> {
    /// The slot's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The entry.
    pub fn get(&self) -> SlotEntry {
        let w = &self.table.words[2 * self.index..2 * self.index + 2];
        SlotEntry::unpack(w[0].load(Relaxed), w[1].load(Relaxed))
    }

    /// Replaces the entry.
    pub fn set(&mut self, entry: SlotEntry) {
        let w = &self.table.words[2 * self.index..2 * self.index + 2];
        w[0].store(entry.handle, Relaxed);
        w[1].store(entry.pack_info(), Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_faults_an_untouched_page_of_the_table_in_once() {
        let t = SlotTable::new(1 << 20).unwrap();
        // Slots 256 apart lie on different pages (16 bytes each); the first 8 pages are
        // left to the other check.
        let write = |index: usize, lock: fn(&SlotTable, usize) -> SlotGuard<'_>| {
            let before = crate::sys::thread_minor_faults();
            let mut g = lock(&t, index);
            let old = g.get();
            g.set(SlotEntry {
                handle: 7,
                len: 100,
                ..old
            });
            drop(g);
            crate::sys::thread_minor_faults() - before
        };
        let locked: u64 = (0..8).map(|p| write((16 + p) * 256, SlotTable::lock)).sum();
        let to_write: u64 = (0..8)
            .map(|p| write((32 + p) * 256, SlotTable::lock_to_write))
            .sum();
        if locked == 8 {
            // No zero page on a read fault here (some architectures, or a kernel so set).
            println!(
                "SKIPPED a_write_faults_an_untouched_page_of_the_table_in_once: reads fault pages in"
            );
            return;
        }
        assert_eq!(locked, 16, "a read then a write of each of 8 fresh pages");
        assert_eq!(to_write, 8, "faults for 8 fresh pages locked to write");
    }

    #[test]
    fn writers_a_whole_array_apart_do_not_share_their_stripes() {
        let t = SlotTable::new(1 << 20).unwrap();
        let n = t.locks.len();
        assert_eq!(n, STRIPES);
        // Two writers of contiguous ranges, positions a multiple of the array's length
        // apart: taken in turn, every one of their stripes was the same.
        for apart in [1, 3, 17] {
            let start = 12_345;
            let shared = (0..n)
                .filter(|&i| t.stripe(start + i) == t.stripe(start + apart * n + i))
                .count();
            assert!(
                shared <= n / 16,
                "{shared} of {n} stripes shared, {apart} arrays apart"
            );
        }
        // A block's slots take one block of locks in order (one cache line); every stripe
        // is in the array, and every one is used.
        let mut used = vec![false; n];
        for i in 0..(1 << 20) {
            let s = t.stripe(i);
            assert!(s < n);
            used[s] = true;
            if i % BLOCK > 0 {
                assert_eq!(s, t.stripe(i - 1) + 1);
            }
        }
        assert!(used.iter().all(|&u| u), "a stripe no slot takes");
        // A small table takes its stripes in turn.
        let small = SlotTable::new(100).unwrap();
        assert_eq!(small.stripe(99), 99 % small.locks.len());
    }

    #[test]
    fn entries_round_trip_through_the_packing() {
        let t = SlotTable::new(10).unwrap();
        let e = SlotEntry {
            handle: u64::MAX - 5,
            len: 128 * 1024,
            flags: Flags::HUGE.with(Flags::IDLE),
            prio: 3,
            ac_time: u32::MAX,
        };
        let mut g = t.lock(7);
        assert_eq!(g.get(), SlotEntry::default());
        g.set(e);
        assert_eq!(g.get(), e);
        assert!(e.is_allocated());
        assert!(!SlotEntry::default().is_allocated());
    }
}
