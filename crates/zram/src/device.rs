//! The device: requests of any offset and length, split into slots for the storage path
//! ([`crate::store`]), which applies the kernel zram's rules per slot under the slot's lock.
//!
//! A slot is a 4 KiB page (the kernel's model) or, with a larger `unit_size`, a unit of
//! pages compressed as one stream. A request touching part of a slot reads, modifies and
//! writes it back under the slot's lock, so the last write to a page always wins whole.

use std::sync::Arc;

use zsmalloc::Pool;

use crate::comp::{Algorithm, AlgorithmParams, CodecPool};
use crate::compact::Compactor;
use crate::config::ZramConfig;
use crate::error::{Error, Op, Result};
use crate::slot::SlotEntry;
use crate::stats::{Counters, IoStat, MmStat, format_debug_stat};
use crate::store::{BlockState, Store};

/// A compressed RAM block device.
#[derive(Debug)]
pub struct Zram {
    store: Store,
    compactor: Option<Compactor>,
}

impl Zram {
    /// Makes a device.
    pub fn new(config: ZramConfig) -> Result<Self> {
        let disksize = crate::size::page_align(config.disksize)
            .ok_or_else(|| Error::InvalidSize(config.disksize.to_string()))?;
        let unit_size = crate::config::check_unit_size(config.unit_size.bytes())?;
        if unit_size as u64 > disksize {
            return Err(Error::UnitLargerThanDevice {
                unit_size: unit_size as u64,
                disksize,
            });
        }
        let pool = Arc::new(Pool::with_config(config.pool)?);
        let codecs = CodecPool::new(config.algorithm, config.params.clone())?;
        let store = Store::new(
            disksize,
            unit_size,
            Arc::clone(&pool),
            codecs,
            config.mem_limit.bytes(),
        )?;
        let compactor = config.auto_compact.map(|ac| Compactor::start(pool, ac));
        Ok(Self { store, compactor })
    }

    /// Size in bytes.
    pub fn disksize(&self) -> u64 {
        self.store.disksize()
    }

    /// The primary algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.store.codecs().algorithm()
    }

    /// The primary algorithm's parameters.
    pub fn params(&self) -> &AlgorithmParams {
        self.store.codecs().params()
    }

    /// zsmalloc chain size.
    pub fn chain_size(&self) -> usize {
        self.pool().chain_size()
    }

    /// Bytes compressed as one stream (4096: the kernel's page-at-a-time model).
    pub fn unit_size(&self) -> usize {
        self.store.unit_size()
    }

    /// The allocator underneath.
    pub fn pool(&self) -> &Pool {
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
                .read(&self.store.lock(index), at, &mut buf[range])
        })
        .inspect_err(|_| Counters::add(&c.failed_reads, 1))
    }

    /// Writes `data` at `offset`.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.check_range(Op::Write, offset, data.len() as u64)?;
        let c = self.store.counters();
        Counters::add(&c.num_writes, 1);
        self.for_slots(offset, data.len(), |index, at, range| {
            self.store
                .write(&mut self.store.lock(index), at, &data[range])
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
            self.store
                .zero(&mut self.store.lock(index), at, range.len())
        })?;
        if let Some(c) = &self.compactor {
            c.nudge();
        }
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

    /// What the slot holding byte `offset` holds (its page's, or its unit's), `None` past
    /// the end: what a front end reporting allocation (NBD block status) asks.
    pub fn block_state(&self, offset: u64) -> Option<BlockState> {
        if offset >= self.disksize() {
            return None;
        }
        usize::try_from(offset / self.unit_size() as u64)
            .ok()
            .map(|index| self.store.block_state(index))
    }

    /// Bytes the slot table spans.
    pub fn table_bytes(&self) -> usize {
        self.store.table_bytes()
    }
}
