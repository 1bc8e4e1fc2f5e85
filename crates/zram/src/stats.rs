//! Device counters and the kernel's stat file formats.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

/// Counters of one device (the kernel's `struct zram_stats`).
#[derive(Debug, Default)]
pub struct Counters {
    /// Bytes of compressed data held (huge pages count 4096, same-filled pages 0).
    pub compr_data_size: AtomicU64,
    /// Slots holding data.
    pub pages_stored: AtomicU64,
    /// Same-filled slots.
    pub same_pages: AtomicU64,
    /// Slots stored uncompressed.
    pub huge_pages: AtomicU64,
    /// Pages stored uncompressed since the device started.
    pub huge_pages_since: AtomicU64,
    /// Reads that failed.
    pub failed_reads: AtomicU64,
    /// Writes that failed.
    pub failed_writes: AtomicU64,
    /// Slots freed by discard.
    pub notify_free: AtomicU64,
    /// Highest `mem_used_total` seen, in pages.
    pub max_used_pages: AtomicU64,
    /// Read requests served.
    pub num_reads: AtomicU64,
    /// Write requests served.
    pub num_writes: AtomicU64,
    /// Pages of slots written back and still in the backing file (`bd_count`).
    pub bd_count: AtomicU64,
    /// Pages read back from the backing file (`bd_reads`).
    pub bd_reads: AtomicU64,
    /// Pages written to the backing file (`bd_writes`).
    pub bd_writes: AtomicU64,
    /// Ours: bytes written to the backing file (compressed, packed).
    pub bd_write_bytes: AtomicU64,
    /// Ours: writebacks that failed (the file refused the write); no slot changed.
    pub wb_failed: AtomicU64,
    /// Ours: reads of written-back slots that failed.
    pub bd_read_failed: AtomicU64,
    /// Ours: slots marked idle.
    pub idle_marked: AtomicU64,
    /// Ours: recompression attempts.
    pub recomp_attempts: AtomicU64,
    /// Ours: slots recompressed into a smaller class.
    pub recomp_done: AtomicU64,
    /// Ours: bytes recompression saved (old minus new stream lengths).
    pub recomp_saved_bytes: AtomicU64,
    /// Ours: `fold` passes run.
    pub folds: AtomicU64,
    /// Ours: objects folding freed (an identical object serves their slots now).
    pub objects_folded: AtomicU64,
    /// Ours: pages whose write shared an identical stored object (inline dedup).
    pub dedup_pages: AtomicU64,
    /// Ours: compressed bytes those writes did not store again.
    pub dedup_bytes: AtomicU64,
}

impl Counters {
    /// Adds to a counter.
    pub fn add(c: &AtomicU64, v: u64) {
        c.fetch_add(v, Relaxed);
    }

    /// Subtracts from a counter.
    pub fn sub(c: &AtomicU64, v: u64) {
        c.fetch_sub(v, Relaxed);
    }

    /// Reads a counter.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Relaxed)
    }

    /// Zeroes every counter.
    pub fn clear(&self) {
        for c in [
            &self.compr_data_size,
            &self.pages_stored,
            &self.same_pages,
            &self.huge_pages,
            &self.huge_pages_since,
            &self.failed_reads,
            &self.failed_writes,
            &self.notify_free,
            &self.max_used_pages,
            &self.num_reads,
            &self.num_writes,
            &self.bd_count,
            &self.bd_reads,
            &self.bd_writes,
            &self.bd_write_bytes,
            &self.wb_failed,
            &self.bd_read_failed,
            &self.idle_marked,
            &self.recomp_attempts,
            &self.recomp_done,
            &self.recomp_saved_bytes,
            &self.folds,
            &self.objects_folded,
            &self.dedup_pages,
            &self.dedup_bytes,
        ] {
            c.store(0, Relaxed);
        }
    }
}

/// The fields of `mm_stat`: the kernel's nine, then seed 004's `pages_folded`, then ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MmStat {
    /// Uncompressed size of the data stored, bytes.
    pub orig_data_size: u64,
    /// Compressed size of the data stored, bytes.
    pub compr_data_size: u64,
    /// Memory the allocator holds for it, bytes.
    pub mem_used_total: u64,
    /// `mem_limit`, bytes (0 = none).
    pub mem_limit: u64,
    /// Highest `mem_used_total`, bytes.
    pub mem_used_max: u64,
    /// Same-filled pages.
    pub same_pages: u64,
    /// Pages freed by compaction.
    pub pages_compacted: u64,
    /// Pages stored uncompressed.
    pub huge_pages: u64,
    /// Pages stored uncompressed since the device started.
    pub huge_pages_since: u64,
    /// Pages freed by folding identical objects (seed 004's tenth field).
    pub pages_folded: u64,
    /// Ours: bytes of metadata (slot table and allocator bookkeeping), outside
    /// `mem_used_total`.
    pub metadata_bytes: u64,
    /// Ours: bytes of freed zspage pages kept resident for reuse, outside `mem_used_total`.
    pub cached_bytes: u64,
}

impl MmStat {
    /// The line of `/sys/block/zramN/mm_stat`, byte for byte in its first nine fields.
    pub fn format(&self) -> String {
        let fields: Vec<String> = self.fields().iter().map(|v| format!("{v:8}")).collect();
        format!("{}\n", fields.join(" "))
    }

    /// The fields as numbers, in order.
    pub fn fields(&self) -> [u64; 12] {
        [
            self.orig_data_size,
            self.compr_data_size,
            self.mem_used_total,
            self.mem_limit,
            self.mem_used_max,
            self.same_pages,
            self.pages_compacted,
            self.huge_pages,
            self.huge_pages_since,
            self.pages_folded,
            self.metadata_bytes,
            self.cached_bytes,
        ]
    }
}

/// The fields of `io_stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IoStat {
    /// Failed reads.
    pub failed_reads: u64,
    /// Failed writes.
    pub failed_writes: u64,
    /// Slots freed by discard.
    pub notify_free: u64,
}

impl IoStat {
    /// The line of `/sys/block/zramN/io_stat` (the third field, once `invalid_io`, is
    /// always 0 in current kernels).
    pub fn format(&self) -> String {
        format!(
            "{:8} {:8} 0 {:8}\n",
            self.failed_reads, self.failed_writes, self.notify_free
        )
    }
}

/// The fields of `bd_stat`, in 4 KiB pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BdStat {
    /// Pages of slots held in the backing file.
    pub bd_count: u64,
    /// Pages read back from it.
    pub bd_reads: u64,
    /// Pages written to it.
    pub bd_writes: u64,
}

impl BdStat {
    /// The line of `/sys/block/zramN/bd_stat`.
    pub fn format(&self) -> String {
        format!(
            "{:8} {:8} {:8}\n",
            self.bd_count, self.bd_reads, self.bd_writes
        )
    }
}

/// `/sys/block/zramN/debug_stat`. Its one figure is the kernel's `miss_free`: swap-slot
/// free notifications dropped because the slot's lock was taken. Nothing here notifies
/// frees without waiting for the lock, so it is always 0.
pub fn format_debug_stat() -> String {
    format!("version: 1\n0 {:8}\n", 0)
}

/// `writeback_limit_enable` and `writeback_limit`: pages writeback may still write while
/// the limit is enabled (the kernel's flash-wear budget).
#[derive(Debug, Default)]
pub(crate) struct WbLimit {
    enable: AtomicBool,
    pages: AtomicU64,
}

impl WbLimit {
    /// Is the limit enabled?
    pub(crate) fn enabled(&self) -> bool {
        self.enable.load(Relaxed)
    }

    pub(crate) fn set_enabled(&self, on: bool) {
        self.enable.store(on, Relaxed);
    }

    /// Pages left.
    pub(crate) fn pages(&self) -> u64 {
        self.pages.load(Relaxed)
    }

    pub(crate) fn set_pages(&self, pages: u64) {
        self.pages.store(pages, Relaxed);
    }

    /// Takes `pages` from the budget: `None` (nothing taken) when the limit is on and has
    /// less; else whether anything was taken (the limit was on).
    pub(crate) fn take(&self, pages: u64) -> Option<bool> {
        if !self.enabled() {
            return Some(false);
        }
        self.pages
            .fetch_update(Relaxed, Relaxed, |left| left.checked_sub(pages))
            .ok()
            .map(|_| true)
    }

    /// Gives back budget `take` charged for pages that were not written back after all.
    pub(crate) fn refund(&self, pages: u64, charged: bool) {
        if charged {
            let _ = self
                .pages
                .fetch_update(Relaxed, Relaxed, |left| Some(left.saturating_add(pages)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_match_the_kernel_byte_for_byte() {
        // Read off a kernel zram device after writing 3 pages (kernel 6.18).
        let m = MmStat {
            orig_data_size: 12288,
            compr_data_size: 4769,
            mem_used_total: 65536,
            mem_used_max: 65536,
            ..MmStat::default()
        };
        let line = m.format();
        assert!(line.starts_with(
            "   12288     4769    65536        0    65536        0        0        0        0 "
        ));
        assert_eq!(IoStat::default().format(), "       0        0 0        0\n");
        assert_eq!(format_debug_stat(), "version: 1\n0        0\n");
        let bd = BdStat {
            bd_count: 3,
            bd_reads: 12,
            bd_writes: 100,
        };
        assert_eq!(bd.format(), "       3       12      100\n");
    }
}
