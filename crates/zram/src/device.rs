//! The device: requests of any offset and length, split into slots for the storage path
//! (`store.rs`), which applies the kernel zram's rules per slot under the slot's lock.
//!
//! A slot is a 4 KiB page (the kernel's model) or, with a larger `unit_size`, a unit of
//! pages compressed as one stream. A request touching part of a slot reads, modifies and
//! writes it back under the slot's lock, so the last write to a page always wins whole.

use std::path::PathBuf;
use std::sync::Arc;

use zsmalloc::{Backend, FoldReport};

use crate::backing::{Backing, BackingStats, FileBacking, FileOptions};
use crate::clean::CleanReport;
use crate::comp::{Algorithm, AlgorithmParams, CodecPool};
use crate::compact::Compactor;
use crate::config::{RecompAlgorithm, ZramConfig};
use crate::error::{Error, Op, Result};
use crate::fold::FoldStats;
use crate::limit::SharedLimit;
use crate::policy::{Policy, PolicyStats, PolicyThread, Shared};
use crate::pp::{IdleRequest, RecompressRequest, WritebackRequest};
use crate::recompress::RecompressReport;
use crate::slot::{Flags, SlotEntry};
use crate::stats::{BdStat, Counters, IoStat, MmStat, format_debug_stat};
use crate::store::{Codecs, Store};
use crate::writeback::WritebackReport;

/// What a slot holds, as a front end asks it (NBD's `base:allocation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockState {
    /// Nothing stored: reads as zeroes and costs nothing.
    Hole,
    /// Stored as a zero fill word: reads as zeroes, costs no object.
    Zero,
    /// Data.
    Data,
}

/// A compressed RAM block device.
#[derive(Debug)]
pub struct Zram {
    store: Arc<Store>,
    compactor: Option<Compactor>,
    policy: Arc<Shared>,
    /// Started with the first enabled policy; ends with the device.
    policy_thread: parking_lot::Mutex<Option<PolicyThread>>,
    recomp: Vec<RecompAlgorithm>,
    backing_dev: Option<PathBuf>,
}

impl Zram {
    /// Makes a device; with `backing_dev` set, opens that file (its contents are
    /// discarded) for writeback.
    pub fn new(config: ZramConfig) -> Result<Self> {
        let backing = match &config.backing_dev {
            Some(path) => {
                let options = FileOptions {
                    readahead: config.readback_readahead,
                    ..FileOptions::default()
                };
                let file =
                    FileBacking::open(path, options).map_err(|cause| Error::BackingOpen {
                        path: path.clone(),
                        cause,
                    })?;
                Some(Arc::new(file) as Arc<dyn Backing>)
            }
            None => None,
        };
        Self::with_backing(config, backing)
    }

    /// Makes a device that writes back to `backing` (any store behind the interface);
    /// `config.backing_dev` is only reported.
    pub fn with_backing(config: ZramConfig, backing: Option<Arc<dyn Backing>>) -> Result<Self> {
        let disksize = crate::size::page_align(config.disksize)
            .ok_or_else(|| Error::InvalidSize(config.disksize.to_string()))?;
        let unit_size = crate::config::check_unit_size(config.unit_size.bytes())?;
        if unit_size as u64 > disksize {
            return Err(Error::UnitLargerThanDevice {
                unit_size: unit_size as u64,
                disksize,
            });
        }
        config.check_post_processing()?;
        config.check_allocator()?;
        let pool = zsmalloc::open(config.pool)?;
        let mut codecs: Codecs = Default::default();
        codecs[0] = Some(CodecPool::new(config.algorithm, config.params.clone())?);
        for r in &config.recomp_algorithm {
            codecs[usize::from(r.priority)] = Some(CodecPool::new(r.algorithm, r.params.clone())?);
        }
        let store = Arc::new(Store::new(
            disksize,
            unit_size,
            Arc::clone(&pool),
            codecs,
            config.mem_limit.bytes(),
            backing,
            config.dedup,
        )?);
        store.set_writeback_batch(config.writeback_batch_size as usize);
        let compactor = config.auto_compact.map(|ac| Compactor::start(pool, ac));
        let zram = Self {
            store,
            compactor,
            policy: Shared::new(Policy::default()),
            policy_thread: parking_lot::Mutex::new(None),
            recomp: config.recomp_algorithm,
            backing_dev: config.backing_dev,
        };
        zram.set_policy(config.policy)?;
        Ok(zram)
    }

    /// Folds identical stored objects into one (the `fold` attribute, seed 004); runs
    /// alongside I/O. What it gave back shows in `mm_stat`'s `pages_folded`.
    /// Refused on an allocator that cannot share objects.
    pub fn fold(&self) -> Result<FoldReport> {
        crate::fold::fold(&self.store)
    }

    /// Is inline deduplication on?
    pub fn dedup(&self) -> bool {
        self.store.dedup()
    }

    /// Folding and deduplication figures.
    pub fn fold_stats(&self) -> FoldStats {
        crate::fold::fold_stats(&self.store)
    }

    /// Size in bytes.
    pub fn disksize(&self) -> u64 {
        self.store.disksize()
    }

    /// The primary algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.store.primary().algorithm()
    }

    /// The primary algorithm's parameters.
    pub fn params(&self) -> &AlgorithmParams {
        self.store.primary().params()
    }

    /// The secondary algorithms, by priority.
    pub fn recomp_algorithms(&self) -> &[RecompAlgorithm] {
        &self.recomp
    }

    /// The backing file, if one is set.
    pub fn backing_dev(&self) -> Option<&std::path::Path> {
        self.backing_dev.as_deref()
    }

    /// The allocator (zsmalloc, afmalloc, zbud, malloc).
    pub fn allocator(&self) -> zsmalloc::Allocator {
        self.pool().allocator()
    }

    /// zsmalloc chain size (0 on another allocator).
    pub fn chain_size(&self) -> usize {
        self.pool()
            .as_zsmalloc()
            .map_or(0, zsmalloc::Pool::chain_size)
    }

    /// Bytes compressed as one stream (4096: the kernel's page-at-a-time model).
    pub fn unit_size(&self) -> usize {
        self.store.unit_size()
    }

    /// The allocator underneath.
    pub fn pool(&self) -> &dyn Backend {
        self.store.pool()
    }

    /// Compressed sizes at or above this are stored raw.
    pub fn huge_class_size(&self) -> usize {
        self.store.huge_class_size()
    }

    fn check_range(&self, op: Op, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.disksize() => Ok(()),
            _ => Err(Error::OutOfRange {
                op,
                offset,
                len,
                disksize: self.disksize(),
            }),
        }
    }

    /// Calls `f(slot, offset in slot, byte range in the request)` for every slot a request
    /// of `len` bytes at `offset` touches (the range is already checked).
    fn for_slots(
        &self,
        offset: u64,
        len: usize,
        mut f: impl FnMut(usize, usize, std::ops::Range<usize>) -> Result<()>,
    ) -> Result<()> {
        let unit = self.unit_size() as u64;
        let mut done = 0;
        while done < len {
            let pos = offset + done as u64;
            let index = (pos / unit) as usize;
            let at = (pos % unit) as usize;
            let n = (self.store.slot_len(index) - at).min(len - done);
            f(index, at, done..done + n)?;
            done += n;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(Op::Read, offset, buf.len() as u64)?;
        let c = self.store.counters();
        Counters::add(&c.num_reads, 1);
        self.for_slots(offset, buf.len(), |index, at, range| {
            self.store
                .read(&mut self.store.lock(index), at, &mut buf[range])
        })
        .inspect_err(|_| Counters::add(&c.failed_reads, 1))
    }

    /// Reads like [`Zram::read`] but is not an access: no access time, idle mark or read
    /// count changes (for inspection tools and checks that must not disturb idle
    /// tracking).
    pub fn inspect(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(Op::Read, offset, buf.len() as u64)?;
        self.for_slots(offset, buf.len(), |index, at, range| {
            self.store
                .read_untouched(&self.store.lock(index), at, &mut buf[range])
        })
    }

    /// Writes `data` at `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_range(Op::Write, offset, data.len() as u64)?;
        let c = self.store.counters();
        Counters::add(&c.num_writes, 1);
        self.for_slots(offset, data.len(), |index, at, range| {
            self.store.write(index, at, &data[range])
        })
        .inspect_err(|_| Counters::add(&c.failed_writes, 1))
    }

    /// Frees the whole pages inside the range (the kernel's discard: partial pages at the
    /// edges are left alone, as they would cost a recompression to save nothing). With
    /// units, those pages read back as zeroes too: whole units are freed, the pages' part
    /// of other units is zeroed.
    pub fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.check_range(Op::Discard, offset, len)?;
        let page = crate::PAGE_SIZE as u64;
        let first = offset.div_ceil(page) * page;
        let end = (offset + len) / page * page;
        if first < end {
            self.zero(first, end - first)?;
        }
        Ok(())
    }

    /// Makes the range read back as zeroes: whole slots are freed (they cost no object),
    /// partial ones are rewritten (and freed if that leaves them all zero).
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        self.check_range(Op::WriteZeroes, offset, len)?;
        self.zero(offset, len)
    }

    fn zero(&self, offset: u64, len: u64) -> Result<()> {
        // In range, so no longer than the device's slot table spans in memory.
        let len = usize::try_from(len).map_err(|_| Error::InvalidSize(len.to_string()))?;
        self.for_slots(offset, len, |index, at, range| {
            self.store.zero(index, at, range.len())
        })?;
        self.nudge_compactor();
        Ok(())
    }

    /// Nothing is volatile beyond memory: a flush has nothing to wait for.
    pub fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Frees every slot and zeroes the counters, keeping the size and settings. (The
    /// kernel's `reset` also forgets the size: front ends do that by dropping the device.)
    pub fn clear(&self) {
        self.store.clear();
    }

    /// Sets `mem_limit` in bytes (0 = none).
    pub fn set_mem_limit(&self, bytes: u64) {
        self.store.set_mem_limit(bytes);
    }

    /// Holds this device's pool, together with the other members', to `group`'s limit from
    /// now on (beyond the kernel): an allocation past it is refused as one past `mem_limit`
    /// is (`Error::MemLimit`, `ENOSPC`), and the device's own `mem_limit` still applies. A
    /// device is in at most one group: `Error::Busy` when it is in one already. It leaves
    /// when dropped.
    pub fn share_limit(&self, group: &Arc<SharedLimit>) -> Result<()> {
        if self.store.share_limit(group) {
            Ok(())
        } else {
            Err(Error::Busy)
        }
    }

    /// `mem_used_max` restarts from the current use (the kernel's `echo 0 > mem_used_max`).
    pub fn reset_mem_used_max(&self) {
        self.store.reset_mem_used_max();
    }

    /// Compacts the pool now; returns pages freed.
    pub fn compact(&self) -> usize {
        self.pool().compact()
    }

    /// The `mm_stat` figures.
    pub fn mm_stat(&self) -> MmStat {
        self.store.mm_stat()
    }

    /// The `io_stat` figures.
    pub fn io_stat(&self) -> IoStat {
        self.store.io_stat()
    }

    /// The `debug_stat` text.
    pub fn debug_stat(&self) -> String {
        format_debug_stat()
    }

    /// Read and write requests served so far.
    pub fn requests(&self) -> (u64, u64) {
        let c = self.store.counters();
        (Counters::get(&c.num_reads), Counters::get(&c.num_writes))
    }

    /// The entry of slot `index` (for tests and tools): page `index`, or unit `index` when
    /// `unit_size` is larger than a page.
    pub fn slot(&self, index: usize) -> Option<SlotEntry> {
        (index < self.store.slots()).then(|| self.store.entry(index))
    }

    /// Whether a slot in the `len` bytes at `offset` holds its data on the backing device
    /// (written back), so that reading it, or writing part of it, reads the backing file.
    /// Read without the slots' locks: a hint for a server choosing which thread runs a
    /// request (a writeback racing with it may overtake it). Past the end: not.
    pub fn on_backing(&self, offset: u64, len: u64) -> bool {
        if self.store.backing().is_none() || len == 0 {
            return false;
        }
        let unit = self.unit_size() as u64;
        let slots = self.store.slots() as u64;
        let first = (offset / unit).min(slots) as usize;
        let end = (offset.saturating_add(len - 1) / unit + 1).min(slots) as usize;
        self.store.any_written_back(first..end)
    }

    /// What the slot holding byte `offset` holds (its page's, or its unit's), `None` past
    /// the end: what a front end reporting allocation (NBD block status) asks.
    pub fn block_state(&self, offset: u64) -> Option<BlockState> {
        if offset >= self.disksize() {
            return None;
        }
        usize::try_from(offset / self.unit_size() as u64)
            .ok()
            .map(|index| match self.store.entry(index) {
                e if !e.is_allocated() => BlockState::Hole,
                e if e.flags.contains(Flags::SAME) && e.handle == 0 => BlockState::Zero,
                _ => BlockState::Data,
            })
    }

    /// Bytes the slot table spans.
    pub fn table_bytes(&self) -> usize {
        self.store.table_bytes()
    }

    /// Marks slots idle (the kernel's `idle`: `all`, or an age in seconds); same-filled
    /// and written-back slots are skipped. Returns how many were marked.
    pub fn mark_idle(&self, req: IdleRequest) -> u64 {
        crate::post::mark_idle(
            &self.store,
            match req {
                IdleRequest::All => None,
                IdleRequest::Age(secs) => Some(secs),
            },
        )
    }

    /// Writes slots back to the backing file (the kernel's `writeback`).
    pub fn writeback(&self, req: &WritebackRequest) -> Result<WritebackReport> {
        let r = crate::writeback::writeback(&self.store, req);
        self.nudge_compactor();
        r
    }

    /// Moves written-back objects out of the backing store's segments at most half live,
    /// so that their space comes back ([`crate::clean`]; beyond the kernel). `ENODEV` without a
    /// backing store, `EAGAIN` while writeback or recompression runs.
    pub fn clean_backing(&self) -> Result<CleanReport> {
        let backing = self.store.backing().ok_or(Error::NoBackingDev)?.clone();
        let _pp = self.store.post_processing()?;
        crate::clean::clean(&self.store, &*backing, crate::clean::Pick::HalfDead)
    }

    /// Freed objects leave holes in zspages: background compaction (when on) looks now.
    fn nudge_compactor(&self) {
        if let Some(c) = &self.compactor {
            c.nudge();
        }
    }

    /// Re-encodes slots with a secondary algorithm (the kernel's `recompress`).
    pub fn recompress(&self, req: &RecompressRequest) -> Result<RecompressReport> {
        let r = crate::recompress::recompress(&self.store, req);
        self.nudge_compactor();
        r
    }

    /// `writeback_limit_enable`.
    pub fn writeback_limit_enabled(&self) -> bool {
        self.store.wb_limit().enabled()
    }

    /// Sets `writeback_limit_enable`.
    pub fn set_writeback_limit_enable(&self, on: bool) {
        self.store.wb_limit().set_enabled(on);
    }

    /// `writeback_limit`: pages writeback may still write (in 4 KiB units).
    pub fn writeback_limit(&self) -> u64 {
        self.store.wb_limit().pages()
    }

    /// Sets `writeback_limit` (in 4 KiB units).
    pub fn set_writeback_limit(&self, pages: u64) {
        self.store.wb_limit().set_pages(pages);
    }

    /// `writeback_batch_size`: slots gathered into one write to the backing file.
    pub fn writeback_batch_size(&self) -> usize {
        self.store.writeback_batch()
    }

    /// Sets `writeback_batch_size` (at least 1).
    pub fn set_writeback_batch_size(&self, n: usize) {
        self.store.set_writeback_batch(n);
    }

    /// The `bd_stat` figures.
    pub fn bd_stat(&self) -> BdStat {
        self.store.bd_stat()
    }

    /// The backing store's own figures (bytes in the file, cache hits...), if one is set.
    pub fn backing_stats(&self) -> Option<BackingStats> {
        self.store.backing().map(|b| b.stats())
    }

    /// The device's counters (post-processing figures included), for metrics.
    pub fn counters(&self) -> &Counters {
        self.store.counters()
    }

    /// The automatic post-processing policy.
    pub fn policy(&self) -> Policy {
        self.policy.policy()
    }

    /// Sets the policy (refused when it names what the device lacks: a secondary
    /// algorithm of that priority, a backing file for writeback).
    pub fn set_policy(&self, policy: Policy) -> Result<()> {
        policy.check()?;
        if policy.recompress_age.is_some() {
            match policy.recompress_priority {
                Some(p) => {
                    self.store.codec(p)?;
                }
                None if self.recomp.is_empty() => {
                    return Err(Error::InvalidArgument(
                        "recompress_age needs a recomp_algorithm".into(),
                    ));
                }
                None => {}
            }
        }
        if policy.writeback_age.is_some() && self.store.backing().is_none() {
            return Err(Error::NoBackingDev);
        }
        let enabled = policy.enabled;
        self.policy.set(policy);
        let mut thread = self.policy_thread.lock();
        if enabled && thread.is_none() {
            *thread = Some(PolicyThread::start(
                Arc::downgrade(&self.store),
                Arc::clone(&self.policy),
            ));
        }
        Ok(())
    }

    /// Runs one policy round now, enabled or not; returns the policy's figures after it.
    pub fn run_policy_round(&self) -> PolicyStats {
        self.policy.round(&self.store)
    }

    /// What the policy has done.
    pub fn policy_stats(&self) -> PolicyStats {
        self.policy.stats()
    }

    /// Lets `secs` seconds pass on the device's idle-tracking clock (for tests and the
    /// lab, which cannot wait hours for slots to age).
    pub fn skew_clock(&self, secs: u64) {
        self.store.skew_clock(secs);
    }

    /// The kernel's debugfs `block_state`: a line per slot holding data, with its index,
    /// last access (seconds since the device started) and flags `s` (same-filled), `w`
    /// (written back), `h` (huge), `i` (idle), `r` (recompressed), `n` (incompressible).
    pub fn format_block_state(&self) -> String {
        let mut out = String::new();
        self.format_block_state_from(0, usize::MAX, &mut out);
        out
    }

    /// Part of [`format_block_state`](Self::format_block_state)'s text: the lines of the
    /// slots from `first` on, appended to `out` until it holds `max_bytes` or more (whole
    /// lines) or the slots end; returns the slot to go on from (the slot count at the end).
    /// So a reader of a long text holds one piece at a time.
    pub fn format_block_state_from(
        &self,
        first: usize,
        max_bytes: usize,
        out: &mut String,
    ) -> usize {
        use std::fmt::Write;
        for index in first..self.store.slots() {
            if out.len() >= max_bytes {
                return index;
            }
            let e = self.store.entry(index);
            if !e.is_allocated() {
                continue;
            }
            let flag = |f: Flags, c: char| if e.flags.contains(f) { c } else { '.' };
            let _ = writeln!(
                out,
                "{index:12} {:12}.{:06} {}{}{}{}{}{}",
                e.ac_time,
                0,
                flag(Flags::SAME, 's'),
                flag(Flags::WB, 'w'),
                flag(Flags::HUGE, 'h'),
                flag(Flags::IDLE, 'i'),
                if e.prio != 0 { 'r' } else { '.' },
                flag(Flags::INCOMPRESSIBLE, 'n'),
            );
        }
        self.store.slots()
    }
}
