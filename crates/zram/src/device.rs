//! The device: a slot table over a zsmalloc pool, with the kernel zram's rules.
//!
//! Write path (per 4 KiB page, under the slot's lock): a same-filled page is stored as its
//! word; otherwise the page is compressed, and stored raw when the result is at least the
//! pool's `huge_class_size`; an object is allocated, `mem_limit` is checked (over it, the new
//! object is freed and the slot keeps its old data), the data is written, and only then is
//! the slot's old object freed and the slot pointed at the new one. Reads decompress under
//! the slot's lock. Requests of any offset and length are split into pages; partial pages are
//! read, modified and written back under the slot's lock, so the last write to a page always
//! wins whole.
//!
//! The storage itself is in [`crate::unit`], which works per *unit*: a page by default (the
//! kernel's model, as above), or with a `unit_size` larger than a page (beyond the kernel,
//! opt-in) an aligned run of pages compressed as one stream, with one slot per unit.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use zsmalloc::{Pool, PoolConfig};

use crate::PAGE_SIZE;
use crate::comp::{Algorithm, AlgorithmParams, CodecPool};
use crate::compact::{AutoCompact, Compactor};
use crate::error::{Error, Result};
use crate::slot::{SlotEntry, SlotTable};
use crate::stats::{Counters, IoStat, MmStat, format_debug_stat};

/// How a device is set up.
#[derive(Debug, Clone)]
pub struct ZramConfig {
    /// Size in bytes (rounded up to whole pages).
    pub disksize: u64,
    /// Primary compression algorithm.
    pub algorithm: Algorithm,
    /// Its parameters.
    pub params: AlgorithmParams,
    /// zsmalloc chain size (pages per zspage at most).
    pub chain_size: usize,
    /// zsmalloc zspage-length rule. Devices default to the current kernel's (min-waste), so
    /// that side-by-side runs against the kernel's zram compare like with like.
    pub geometry: zsmalloc::Geometry,
    /// Where zsmalloc objects keep their handle. Devices default to
    /// [`Header::Omitted`](zsmalloc::class::Header::Omitted): 8 bytes less per object than
    /// the kernel's layout, which [`Header::Handle`](zsmalloc::class::Header::Handle) keeps.
    pub header: zsmalloc::class::Header,
    /// Memory limit in bytes (0 = none).
    pub mem_limit: u64,
    /// zsmalloc shards per size class (0 = one per CPU); see `zsmalloc::pool`.
    pub shards: usize,
    /// Background compaction (beyond the kernel); `None` turns it off.
    pub auto_compact: Option<AutoCompact>,
    /// Bytes compressed as one stream (beyond the kernel): a power of two from 4 KiB to
    /// 128 KiB, at most `disksize`. 4 KiB (the default) is the kernel's page-at-a-time
    /// model; see [`crate::unit`] for larger units.
    pub unit_size: usize,
}

impl Default for ZramConfig {
    fn default() -> Self {
        Self {
            disksize: 1 << 30,
            algorithm: Algorithm::Lz4,
            params: AlgorithmParams::default(),
            chain_size: zsmalloc::class::DEFAULT_CHAIN_SIZE,
            geometry: zsmalloc::Geometry::MinWaste,
            header: zsmalloc::class::Header::Omitted,
            mem_limit: 0,
            shards: 0,
            auto_compact: Some(AutoCompact::default()),
            unit_size: PAGE_SIZE,
        }
    }
}

/// A compressed RAM block device.
///
/// The fields are visible to the crate for [`crate::unit`], the unit-sized store.
#[derive(Debug)]
pub struct Zram {
    pub(crate) disksize: u64,
    chain_size: usize,
    pub(crate) unit_size: usize,
    pub(crate) pool: Arc<Pool>,
    /// One slot per page, or per unit when `unit_size > PAGE_SIZE`.
    pub(crate) table: SlotTable,
    pub(crate) codecs: CodecPool,
    pub(crate) counters: Counters,
    pub(crate) limit_pages: AtomicU64,
    pub(crate) huge_class_size: usize,
    pages_compacted_base: AtomicU64,
    start: Instant,
    compactor: Option<Compactor>,
}

/// The fill word of a same-filled page (or unit), if it is one.
pub(crate) fn same_filled(page: &[u8]) -> Option<u64> {
    let mut words = page.chunks_exact(8).map(|w| {
        let mut b = [0u8; 8];
        b.copy_from_slice(w);
        u64::from_ne_bytes(b)
    });
    let first = words.next()?;
    words.all(|w| w == first).then_some(first)
}

pub(crate) fn fill(page: &mut [u8], word: u64) {
    let bytes = word.to_ne_bytes();
    for chunk in page.chunks_exact_mut(8) {
        chunk.copy_from_slice(&bytes);
    }
}

impl Zram {
    /// Makes a device.
    pub fn new(config: ZramConfig) -> Result<Self> {
        let disksize = crate::size::page_align(config.disksize)
            .ok_or_else(|| Error::InvalidSize(config.disksize.to_string()))?;
        crate::unit::check_unit_size(config.unit_size)?;
        if config.unit_size as u64 > disksize {
            return Err(Error::InvalidParam(format!(
                "unit_size {} is larger than the device ({disksize} bytes)",
                config.unit_size
            )));
        }
        let slots = usize::try_from(disksize.div_ceil(config.unit_size as u64))
            .map_err(|_| Error::InvalidSize(config.disksize.to_string()))?;
        let pool = Arc::new(Pool::with_config(PoolConfig {
            chain_size: config.chain_size,
            geometry: config.geometry,
            header: config.header,
            shards: config.shards,
            ..PoolConfig::default()
        })?);
        let codecs = CodecPool::new(config.algorithm, config.params.clone())?;
        let compactor = config
            .auto_compact
            .map(|ac| Compactor::start(Arc::clone(&pool), ac));
        Ok(Self {
            disksize,
            chain_size: config.chain_size,
            unit_size: config.unit_size,
            huge_class_size: pool.huge_class_size(),
            pool,
            table: SlotTable::new(slots)
                .ok_or_else(|| Error::InvalidSize(config.disksize.to_string()))?,
            codecs,
            counters: Counters::default(),
            limit_pages: AtomicU64::new(config.mem_limit.div_ceil(PAGE_SIZE as u64)),
            pages_compacted_base: AtomicU64::new(0),
            start: Instant::now(),
            compactor,
        })
    }

    /// Size in bytes.
    pub fn disksize(&self) -> u64 {
        self.disksize
    }

    /// The primary algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.codecs.algorithm()
    }

    /// The primary algorithm's parameters.
    pub fn params(&self) -> &AlgorithmParams {
        self.codecs.params()
    }

    /// zsmalloc chain size.
    pub fn chain_size(&self) -> usize {
        self.chain_size
    }

    /// Bytes compressed as one stream (4096: the kernel's page-at-a-time model).
    pub fn unit_size(&self) -> usize {
        self.unit_size
    }

    /// The allocator underneath.
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Compressed sizes at or above this are stored raw.
    pub fn huge_class_size(&self) -> usize {
        self.huge_class_size
    }

    fn check_range(&self, offset: u64, len: u64) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.disksize => Ok(()),
            _ => Err(Error::OutOfRange {
                offset,
                len,
                disksize: self.disksize,
            }),
        }
    }

    pub(crate) fn now(&self) -> u32 {
        u32::try_from(self.start.elapsed().as_secs()).unwrap_or(u32::MAX)
    }

    /// Reads `buf.len()` bytes at `offset`.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.check_range(offset, buf.len() as u64)?;
        Counters::add(&self.counters.num_reads, 1);
        self.read_units(offset, buf)
            .inspect_err(|_| Counters::add(&self.counters.failed_reads, 1))
    }

    /// Writes `data` at `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_range(offset, data.len() as u64)?;
        Counters::add(&self.counters.num_writes, 1);
        self.write_units(offset, data)
            .inspect_err(|_| Counters::add(&self.counters.failed_writes, 1))
    }

    /// Frees the whole pages inside the range (the kernel's discard: partial pages at the
    /// edges are left alone, as they would cost a recompression to save nothing). With
    /// units, those pages read back as zeroes too: whole units are freed, the pages'
    /// part of other units is zeroed.
    pub fn discard(&self, offset: u64, len: u64) -> Result<()> {
        self.check_range(offset, len)?;
        self.discard_units(offset, len)?;
        if let Some(c) = &self.compactor {
            c.nudge();
        }
        Ok(())
    }

    /// Makes the range read back as zeroes: whole units are freed (they cost no object),
    /// partial ones are rewritten (and freed if that leaves them all zero).
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<()> {
        self.check_range(offset, len)?;
        let len = usize::try_from(len).map_err(|_| Error::InvalidSize(len.to_string()))?;
        self.zero_units(offset, len)?;
        if let Some(c) = &self.compactor {
            c.nudge();
        }
        Ok(())
    }

    /// Nothing is volatile beyond memory: a flush has nothing to wait for.
    pub fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Frees every slot and zeroes the counters (the kernel's `reset`, keeping the size and
    /// settings).
    pub fn reset(&self) {
        for index in 0..self.table.len() {
            let mut g = self.table.lock(index);
            self.free_unit(&mut g);
        }
        self.counters.clear();
        self.pages_compacted_base
            .store(self.pool.pages_compacted(), Relaxed);
        self.pool.trim();
    }

    /// Sets `mem_limit` in bytes (0 = none).
    pub fn set_mem_limit(&self, bytes: u64) {
        self.limit_pages
            .store(bytes.div_ceil(PAGE_SIZE as u64), Relaxed);
    }

    /// `mem_used_max` restarts from the current use (the kernel's `echo 0 > mem_used_max`).
    pub fn reset_mem_used_max(&self) {
        self.counters
            .max_used_pages
            .store(self.pool.total_pages() as u64, Relaxed);
    }

    /// Compacts the pool now; returns pages freed.
    pub fn compact(&self) -> usize {
        self.pool.compact()
    }

    /// The `mm_stat` figures.
    pub fn mm_stat(&self) -> MmStat {
        let c = &self.counters;
        let used = self.pool.total_pages() as u64;
        MmStat {
            orig_data_size: Counters::get(&c.pages_stored) * PAGE_SIZE as u64,
            compr_data_size: Counters::get(&c.compr_data_size),
            mem_used_total: used * PAGE_SIZE as u64,
            mem_limit: self.limit_pages.load(Relaxed) * PAGE_SIZE as u64,
            mem_used_max: Counters::get(&c.max_used_pages).max(used) * PAGE_SIZE as u64,
            same_pages: Counters::get(&c.same_pages),
            pages_compacted: self.pool.pages_compacted() - self.pages_compacted_base.load(Relaxed),
            huge_pages: Counters::get(&c.huge_pages),
            huge_pages_since: Counters::get(&c.huge_pages_since),
            pages_folded: 0,
            metadata_bytes: (self.table.metadata_bytes() + self.pool.metadata_bytes()) as u64,
            cached_bytes: (self.pool.cached_pages() * PAGE_SIZE) as u64,
        }
    }

    /// The `io_stat` figures.
    pub fn io_stat(&self) -> IoStat {
        let c = &self.counters;
        IoStat {
            failed_reads: Counters::get(&c.failed_reads),
            failed_writes: Counters::get(&c.failed_writes),
            notify_free: Counters::get(&c.notify_free),
        }
    }

    /// The `debug_stat` text.
    pub fn debug_stat(&self) -> String {
        format_debug_stat(Counters::get(&self.counters.miss_free))
    }

    /// Read and write requests served so far.
    pub fn requests(&self) -> (u64, u64) {
        (
            Counters::get(&self.counters.num_reads),
            Counters::get(&self.counters.num_writes),
        )
    }

    /// The entry of slot `index` (for tests and tools): page `index`, or unit `index` when
    /// `unit_size` is larger than a page.
    pub fn slot(&self, index: usize) -> Option<SlotEntry> {
        (index < self.table.len()).then(|| self.table.lock(index).get())
    }

    /// The entry of the slot holding byte `offset` (its page's, or its unit's): what a
    /// caller asking about a page wants, whatever the unit size.
    pub fn slot_at(&self, offset: u64) -> Option<SlotEntry> {
        if offset >= self.disksize {
            return None;
        }
        usize::try_from(offset / self.unit_size as u64)
            .ok()
            .and_then(|index| self.slot(index))
    }

    /// Bytes the slot table holds.
    pub fn table_bytes(&self) -> usize {
        self.table.metadata_bytes()
    }
}
