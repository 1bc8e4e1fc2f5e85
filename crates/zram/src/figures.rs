//! The figures of a store in the kernel's stat files: `mm_stat`, `bd_stat`, `io_stat`.

use std::sync::atomic::Ordering::Relaxed;

use crate::PAGE_SIZE;
use crate::stats::{BdStat, Counters, IoStat, MmStat};
use crate::store::Store;

impl Store {
    /// The `mm_stat` figures.
    pub(crate) fn mm_stat(&self) -> MmStat {
        let c = self.counters();
        let used = self.pool().total_pages() as u64;
        MmStat {
            orig_data_size: Counters::get(&c.pages_stored) * PAGE_SIZE as u64,
            compr_data_size: Counters::get(&c.compr_data_size),
            mem_used_total: used * PAGE_SIZE as u64,
            mem_limit: self.mem_limit(),
            mem_used_max: Counters::get(&c.max_used_pages).max(used) * PAGE_SIZE as u64,
            same_pages: Counters::get(&c.same_pages),
            pages_compacted: self
                .pool()
                .pages_compacted()
                .saturating_sub(self.pages_compacted_base.load(Relaxed)),
            huge_pages: Counters::get(&c.huge_pages),
            huge_pages_since: Counters::get(&c.huge_pages_since),
            pages_folded: self.pages_folded(),
            metadata_bytes: (self.table_bytes()
                + self.pool().metadata_bytes()
                + self.shared_copies.metadata_bytes()) as u64,
            cached_bytes: (self.pool().cached_pages() * PAGE_SIZE) as u64,
        }
    }

    /// Pages folding gave back since the counters were last cleared (`mm_stat` field 10).
    pub(crate) fn pages_folded(&self) -> u64 {
        self.pool()
            .pages_folded()
            .saturating_sub(self.pages_folded_base.load(Relaxed))
    }

    /// The `bd_stat` figures.
    pub(crate) fn bd_stat(&self) -> BdStat {
        let c = self.counters();
        BdStat {
            bd_count: Counters::get(&c.bd_count),
            bd_reads: Counters::get(&c.bd_reads),
            bd_writes: Counters::get(&c.bd_writes),
        }
    }

    /// The `io_stat` figures.
    pub(crate) fn io_stat(&self) -> IoStat {
        let c = self.counters();
        IoStat {
            failed_reads: Counters::get(&c.failed_reads),
            failed_writes: Counters::get(&c.failed_writes),
            notify_free: Counters::get(&c.notify_free),
        }
    }
}
