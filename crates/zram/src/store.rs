//! The storage path: read, write and free of one slot under its lock — the kernel's
//! `zram_read_page`, `zram_write_page` and `zram_free_page`, per slot. [`Zram`](crate::Zram)
//! splits requests into slots and calls these; nothing else touches the slot table.
//!
//! A slot is one page by default (the kernel's model: with `unit_size` 4 KiB every rule
//! below is the kernel's per-page rule), or, beyond the kernel and opt-in with
//! [`ZramConfig::unit_size`](crate::ZramConfig::unit_size), an aligned *unit* of pages
//! compressed as one stream: compressors find more to reuse in a longer window (zstd -3
//! packs a Linux source tar 25% smaller in 32 KiB blocks than in 4 KiB ones); the price is
//! that reading or rewriting part of a unit decompresses all of it.
//!
//! # Representation
//!
//! The slot table has one entry per slot (the last slot is shorter when `disksize` is not a
//! multiple of `unit_size`). An entry is empty; same-filled (`SAME`, the fill word in
//! `handle`, no object, [`crate::same`]); or a *stream* of `len` bytes in zsmalloc objects,
//! `handle` naming the first ([`crate::chain`]). The stream is the compressed slot, or the
//! slot's bytes themselves (`HUGE`, stored raw) when it compresses to at least
//! `slot length − PAGE_SIZE + huge_class_size` bytes: the kernel's huge rule (a page that
//! compresses to `huge_class_size` or more is stored raw) with the same slack per unit.
//!
//! # Rules (the kernel's per-page rules, per slot)
//!
//! - A write covering a whole slot compresses the caller's bytes directly and stores them
//!   before it takes the slot's lock, under which it only frees the old data and sets the
//!   new entry (the kernel's order, `put`); a partial write reads the slot (decompressing
//!   it into a per-thread scratch buffer), patches it and stores it again, all under the
//!   slot's lock. Either way the last write to a page wins whole.
//! - Storing allocates the new objects, checks `mem_limit` after every allocation (over it:
//!   the new objects are freed, the slot keeps its old data, `Error::MemLimit`), writes
//!   them, and only then frees the old ones. A slot of equal 8-byte words is stored `SAME`.
//! - With the `dedup` setting, a stream of one object that an object of the pool already
//!   holds (same bytes, checked in full) shares that object instead of allocating
//!   ([`crate::fold`]); freeing a slot frees its handle, and the object goes with its last.
//! - Zeroing (discard, write-zeroes) frees a whole slot, and zeroes part of one by
//!   rewriting it; a slot that this leaves all zero is freed (not stored as same-filled).
//!
//! # Stats (in pages, so the kernel's formulas still hold with units)
//!
//! - `orig_data_size`: 4096 × pages of slots holding data (same-filled slots included);
//! - `compr_data_size`: the sum of stream lengths (`len`): compressed bytes, or the slot's
//!   bytes for a raw slot; chain links and zsmalloc headers are not counted;
//! - `same_pages`, `huge_pages`, `huge_pages_since`: pages of same-filled and of raw slots;
//! - `notify_free`: pages of slots that discard or write-zeroes freed (whole slots count
//!   their pages whether or not they held data, as the kernel counts discarded pages);
//! - `mem_used_total`, `mem_used_max`, `mem_limit`: from the pool;
//! - metadata (`mm_stat` field 11): the slot table (16 bytes per slot plus the striped
//!   locks), the pool's bookkeeping (its content index and reference counts included) and
//!   the holders of file copies that several slots share. The per-thread scratch buffers (a unit and its
//!   compressed form, at most 2 × 128 KiB per thread that did I/O) are not in it.
//!
//! Lock order: slot lock → (compressor context: per thread, no lock | zsmalloc class-shard
//! lock → page-source lock | the shared limit's lock, after the allocation, under which only
//! the pools' page counts are read). A whole slot's write takes the latter before the slot
//! lock, and holds none of them when it takes it.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::{Mutex, MutexGuard};
use zsmalloc::{Backend, Handle};

use crate::PAGE_SIZE;
use crate::backing::Backing;
use crate::comp::CodecPool;
use crate::error::{Error, Result};
use crate::limit::{Membership, SharedLimit};
use crate::same::{fill, same_filled};
use crate::slot::{Flags, SlotEntry, SlotGuard, SlotTable};
use crate::stats::{Counters, WbLimit};

mod put;

thread_local! {
    /// Per-thread slot bytes for partial reads and read-modify-write.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// Per-thread compressed stream (compressing into it, gathering a chain into it).
    static STREAM: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// The compressors of a device by priority: 0 the primary, 1..=3 the secondary ones.
pub(crate) type Codecs = [Option<CodecPool>; 4];

/// The slots of one device and everything that stores them.
#[derive(Debug)]
pub(crate) struct Store {
    disksize: u64,
    unit_size: usize,
    pool: Arc<dyn Backend>,
    table: SlotTable,
    codecs: Codecs,
    backing: Option<Arc<dyn Backing>>,
    /// Holders of the file copies that several written-back slots name (writeback writes a
    /// shared object once); a copy not in it has one slot.
    pub(crate) shared_copies: crate::backing::shares::SharedObjects,
    /// Held by writeback and recompression while they run (the other gets `EAGAIN`).
    post_processing: Mutex<()>,
    wb_limit: WbLimit,
    /// Slots gathered into one append by writeback.
    writeback_batch: std::sync::atomic::AtomicUsize,
    /// Seconds added to the clock (tests and the lab let time pass without waiting).
    clock_skew: AtomicU64,
    counters: Counters,
    limit_pages: AtomicU64,
    /// The limit this device shares with others, once it joined one.
    group: std::sync::OnceLock<Membership>,
    huge_class_size: usize,
    /// `pages_compacted` of the pool when the counters were last cleared.
    pub(crate) pages_compacted_base: AtomicU64,
    /// `pages_folded` of the pool when the counters were last cleared.
    pub(crate) pages_folded_base: AtomicU64,
    /// Inline deduplication: a stream of one object that an object of the pool already
    /// holds shares that object.
    dedup: bool,
    /// The coarse clock when the store was made (see [`crate::sys::coarse_nanos`]).
    start_nanos: u64,
}

impl Store {
    /// An empty store of `disksize` bytes (whole pages) in slots of `unit_size` bytes.
    pub(crate) fn new(
        disksize: u64,
        unit_size: usize,
        pool: Arc<dyn Backend>,
        codecs: Codecs,
        mem_limit: u64,
        backing: Option<Arc<dyn Backing>>,
        dedup: bool,
    ) -> Result<Self> {
        let slots = usize::try_from(disksize.div_ceil(unit_size as u64))
            .map_err(|_| Error::TableTooLarge { disksize })?;
        Ok(Self {
            disksize,
            unit_size,
            huge_class_size: pool.huge_class_size(),
            pool,
            table: SlotTable::new(slots).ok_or(Error::TableTooLarge { disksize })?,
            codecs,
            backing,
            shared_copies: Default::default(),
            post_processing: Mutex::new(()),
            wb_limit: WbLimit::default(),
            // The device sets it from its settings.
            writeback_batch: std::sync::atomic::AtomicUsize::new(1),
            clock_skew: AtomicU64::new(0),
            counters: Counters::default(),
            limit_pages: AtomicU64::new(mem_limit.div_ceil(PAGE_SIZE as u64)),
            group: std::sync::OnceLock::new(),
            pages_compacted_base: AtomicU64::new(0),
            pages_folded_base: AtomicU64::new(0),
            dedup,
            start_nanos: crate::sys::coarse_nanos(),
        })
    }

    /// Size in bytes (whole pages).
    pub(crate) fn disksize(&self) -> u64 {
        self.disksize
    }

    /// Bytes of a slot (the last one may be shorter).
    pub(crate) fn unit_size(&self) -> usize {
        self.unit_size
    }

    pub(crate) fn pool(&self) -> &dyn Backend {
        &*self.pool
    }

    /// The primary compressor.
    pub(crate) fn primary(&self) -> &CodecPool {
        self.codecs[0]
            .as_ref()
            .expect("a store always has its primary compressor")
    }

    /// The compressor of priority `prio`.
    pub(crate) fn codec(&self, prio: u8) -> Result<&CodecPool> {
        self.codecs
            .get(usize::from(prio))
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::InvalidArgument(format!("no algorithm of priority {prio}")))
    }

    /// The priorities of the secondary algorithms, lowest first.
    pub(crate) fn secondary_priorities(&self) -> impl Iterator<Item = u8> + '_ {
        (1..=crate::slot::MAX_PRIORITY).filter(|&p| self.codecs[usize::from(p)].is_some())
    }

    /// The highest priority with an algorithm (0 when there is no secondary one).
    pub(crate) fn top_priority(&self) -> u8 {
        self.secondary_priorities().last().unwrap_or(0)
    }

    /// The backing store, if one is set.
    pub(crate) fn backing(&self) -> Option<&Arc<dyn Backing>> {
        self.backing.as_ref()
    }

    /// Taken by writeback and recompression; `Error::Busy` when the other runs.
    pub(crate) fn post_processing(&self) -> Result<MutexGuard<'_, ()>> {
        self.post_processing.try_lock().ok_or(Error::Busy)
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    pub(crate) fn huge_class_size(&self) -> usize {
        self.huge_class_size
    }

    /// Is a compressed stream of `len` bytes worth storing for a slot of `slot_len` bytes
    /// (else the slot is stored raw, huge)?
    pub(crate) fn fits(&self, len: usize, slot_len: usize) -> bool {
        len < slot_len - PAGE_SIZE + self.huge_class_size
    }

    /// Is inline deduplication on?
    pub(crate) fn dedup(&self) -> bool {
        self.dedup
    }

    /// Number of slots.
    pub(crate) fn slots(&self) -> usize {
        self.table.len()
    }

    /// Locks slot `index` (in range).
    pub(crate) fn lock(&self, index: usize) -> SlotGuard<'_> {
        self.table.lock(index)
    }

    /// Bytes of slot `index` (`unit_size`, less for a short last slot).
    pub(crate) fn slot_len(&self, index: usize) -> usize {
        let start = index as u64 * self.unit_size as u64;
        self.disksize
            .saturating_sub(start)
            .min(self.unit_size as u64) as usize
    }

    /// Pages of slot `index`.
    pub(crate) fn pages(&self, index: usize) -> u64 {
        (self.slot_len(index) / PAGE_SIZE) as u64
    }

    /// Seconds since the device started (plus any skew).
    pub(crate) fn now(&self) -> u32 {
        let secs = crate::sys::coarse_secs_since(self.start_nanos) + self.clock_skew.load(Relaxed);
        u32::try_from(secs).unwrap_or(u32::MAX)
    }

    /// Lets `secs` seconds pass on the device's clock.
    pub(crate) fn skew_clock(&self, secs: u64) {
        self.clock_skew.fetch_add(secs, Relaxed);
    }

    /// Reads `out.len()` bytes from `at` into the locked slot; an access (idle tracking).
    pub(crate) fn read(&self, g: &mut SlotGuard<'_>, at: usize, out: &mut [u8]) -> Result<()> {
        self.read_untouched(g, at, out)?;
        self.touch(g);
        Ok(())
    }

    /// Records an access: the access time becomes now, the idle and writeback marks go.
    fn touch(&self, g: &mut SlotGuard<'_>) {
        let mut e = g.get();
        let now = self.now();
        let marks = Flags::IDLE.with(Flags::PP);
        if e.is_allocated() && (e.ac_time != now || e.flags.bits() & marks.bits() != 0) {
            e.ac_time = now;
            // An access also calls off a writeback in flight (the kernel's
            // `zram_accessed` clears `ZRAM_PP_SLOT`): the page is hot again.
            e.flags = e.flags.without(marks);
            g.set(e);
        }
    }

    /// Reads without recording an access.
    pub(crate) fn read_untouched(
        &self,
        g: &SlotGuard<'_>,
        at: usize,
        out: &mut [u8],
    ) -> Result<()> {
        let len = self.slot_len(g.index());
        if out.len() == len {
            return self.load(g, out);
        }
        let e = g.get();
        if e.flags.contains(Flags::SAME) {
            fill(out, e.handle, at);
            return Ok(());
        }
        if !e.is_allocated() {
            out.fill(0);
            return Ok(());
        }
        with_scratch(len, |whole| {
            self.load(g, whole)?;
            out.copy_from_slice(&whole[at..at + out.len()]);
            Ok(())
        })
    }

    /// Writes `data` at `at` into slot `index`. A whole slot's bytes are compressed and
    /// stored before the slot is locked, only to put them in place (`put.rs`); a part is
    /// patched in under the lock.
    pub(crate) fn write(&self, index: usize, at: usize, data: &[u8]) -> Result<()> {
        if data.len() == self.slot_len(index) {
            let new = self.prepare(data)?;
            self.commit(&mut self.table.lock_to_write(index), new);
            return Ok(());
        }
        self.modify(&mut self.table.lock_to_write(index), false, |whole| {
            whole[at..at + data.len()].copy_from_slice(data);
        })
        .map(drop)
    }

    /// Makes `len` bytes at `at` of slot `index` read back as zeroes, freeing the slot when
    /// that leaves it all zero. Empty slots, most of a discard of free space, are passed over
    /// without their lock (the locks took a fifth of `zramd bench locking`'s FUSE threads).
    pub(crate) fn zero(&self, index: usize, at: usize, len: usize) -> Result<()> {
        let whole = len == self.slot_len(index);
        let freed = if self.table.vacant(index) {
            whole
        } else if whole {
            self.free(&mut self.lock(index));
            true
        } else {
            let g = &mut self.lock(index);
            g.get().is_allocated() && self.modify(g, true, |s| s[at..at + len].fill(0))?
        };
        if freed {
            Counters::add(&self.counters.notify_free, self.pages(index));
        }
        Ok(())
    }

    /// Reads the locked slot, lets `f` change it and stores it again; with `free_zero`, a
    /// slot left all zero is freed instead (returns whether it was).
    fn modify(
        &self,
        g: &mut SlotGuard<'_>,
        free_zero: bool,
        f: impl FnOnce(&mut [u8]),
    ) -> Result<bool> {
        with_scratch(self.slot_len(g.index()), |whole| {
            self.load(g, whole)?;
            f(whole);
            if free_zero && same_filled(whole) == Some(0) {
                self.free(g);
                return Ok(true);
            }
            self.store(g, whole).map(|()| false)
        })
    }

    /// Reads the locked slot whole into `out` (the slot's length).
    pub(crate) fn load(&self, g: &SlotGuard<'_>, out: &mut [u8]) -> Result<()> {
        let e = g.get();
        if e.flags.contains(Flags::SAME) {
            fill(out, e.handle, 0);
            return Ok(());
        }
        if e.len == 0 {
            out.fill(0);
            return Ok(());
        }
        // Stored raw: huge in memory, or written back at the slot's full length (a
        // compressed stream is always shorter than its slot).
        let raw =
            e.flags.contains(Flags::HUGE) || (e.flags.contains(Flags::WB) && e.len == out.len());
        if raw {
            if e.len != out.len() {
                return Err(Error::Corrupt(format!(
                    "raw slot {} holds {} bytes, not {}",
                    g.index(),
                    e.len,
                    out.len()
                )));
            }
            return self.stream_into(g.index(), e, out);
        }
        STREAM.with(|cell| {
            let mut stream = cell.borrow_mut();
            stream.resize(e.len, 0);
            self.stream_into(g.index(), e, &mut stream[..e.len])?;
            self.codec(e.prio)?
                .with(|c| c.decompress(&stream[..e.len], out))?
        })
    }

    /// The stored stream of the slot with entry `e` (from memory, or from the backing
    /// file) into `out`, `e.len` bytes.
    pub(crate) fn stream_into(&self, index: usize, e: SlotEntry, out: &mut [u8]) -> Result<()> {
        if !e.flags.contains(Flags::WB) {
            return crate::chain::read(&*self.pool, Handle::from_raw(e.handle), out);
        }
        let backing = self.backing.as_ref().ok_or(Error::NoBackingDev)?;
        let offset = crate::slot::wb_offset(e.handle);
        match (backing.read(offset, out)).and_then(|()| crate::slot::wb_verify(e.handle, out)) {
            Ok(()) => {
                Counters::add(&self.counters.bd_reads, self.pages(index));
                Ok(())
            }
            Err(err) => {
                Counters::add(&self.counters.bd_read_failed, 1);
                Err(Error::Backing(err))
            }
        }
    }

    /// Slots gathered into one append by writeback.
    pub(crate) fn writeback_batch(&self) -> usize {
        self.writeback_batch.load(Relaxed)
    }

    pub(crate) fn set_writeback_batch(&self, n: usize) {
        self.writeback_batch.store(n.max(1), Relaxed);
    }

    /// `writeback_limit` and its switch.
    pub(crate) fn wb_limit(&self) -> &WbLimit {
        &self.wb_limit
    }

    /// Allocates one object, then checks `mem_limit` (over it, the object is freed again).
    pub(crate) fn alloc(&self, size: usize) -> Result<Handle> {
        let handle = self.pool.malloc(size)?;
        self.check_limit(handle)
    }

    /// Stores a stream of one object, sharing an identical stored object when the pool
    /// has one (inline dedup; sharing takes no memory, so only a new object is checked
    /// against `mem_limit`). Returns the handle and whether it shares.
    fn alloc_dedup(&self, stream: &[u8]) -> Result<(Handle, bool)> {
        let (handle, shared) = self.pool.malloc_dedup(stream)?;
        if shared {
            return Ok((handle, true));
        }
        Ok((self.check_limit(handle)?, false))
    }

    /// Checks `mem_limit` after an allocation: over it, `handle` is freed again.
    fn check_limit(&self, handle: Handle) -> Result<Handle> {
        let used = self.pool.total_pages() as u64;
        self.counters.note_used(used);
        let refused = match self.limit_pages.load(Relaxed) {
            limit if limit != 0 && used > limit => Some(limit * PAGE_SIZE as u64),
            _ => self.group.get().and_then(|g| g.refuses(used)),
        };
        if let Some(limit) = refused {
            let _ = self.pool.free(handle);
            return Err(Error::MemLimit { limit });
        }
        Ok(handle)
    }

    /// Joins `group`'s shared limit; `false` when the store is in one already.
    pub(crate) fn share_limit(&self, group: &Arc<SharedLimit>) -> bool {
        self.group.get().is_none() && self.group.set(group.join(&self.pool)).is_ok()
    }

    /// Frees every slot and zeroes the counters.
    pub(crate) fn clear(&self) {
        for index in 0..self.table.len() {
            self.free(&mut self.table.lock(index));
        }
        self.counters.clear();
        self.pages_compacted_base
            .store(self.pool.pages_compacted(), Relaxed);
        self.pages_folded_base
            .store(self.pool.pages_folded(), Relaxed);
        self.pool.trim();
    }

    /// Whether a slot of `slots` is written back, as read without the slots' locks: a hint,
    /// which a writeback or a write racing with the caller may overtake.
    pub(crate) fn any_written_back(&self, slots: std::ops::Range<usize>) -> bool {
        slots
            .into_iter()
            .any(|i| self.table.flags_unlocked(i).contains(Flags::WB))
    }

    /// The entry of slot `index`.
    pub(crate) fn entry(&self, index: usize) -> SlotEntry {
        self.table.lock(index).get()
    }

    /// `mem_limit` in bytes (0 = none).
    pub(crate) fn mem_limit(&self) -> u64 {
        self.limit_pages
            .load(Relaxed)
            .saturating_mul(PAGE_SIZE as u64)
    }

    /// Sets `mem_limit` in bytes (0 = none).
    pub(crate) fn set_mem_limit(&self, bytes: u64) {
        self.limit_pages
            .store(bytes.div_ceil(PAGE_SIZE as u64), Relaxed);
    }

    /// `mem_used_max` restarts from the current use.
    pub(crate) fn reset_mem_used_max(&self) {
        self.counters
            .max_used_pages
            .store(self.pool.total_pages() as u64, Relaxed);
    }

    /// Bytes the slot table spans.
    pub(crate) fn table_bytes(&self) -> usize {
        self.table.metadata_bytes()
    }
}

/// Runs `f` with this thread's scratch buffer, `len` bytes long.
fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [u8]) -> Result<R>) -> Result<R> {
    SCRATCH.with(|cell| {
        let mut scratch = cell.borrow_mut();
        scratch.resize(len, 0);
        f(&mut scratch[..len])
    })
}
