//! A region's counters, in the kernel's words where the kernel has them (`/proc/vmstat`'s
//! `pswpin`, `pswpout`, `swap_ra`, `swap_ra_hit`, `pgfault`, `pgmajfault`).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::{Deserialize, Serialize};

use crate::histogram::Summary;

/// Event counts, bumped by the handler and evictor threads.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub pswpin: AtomicU64,
    pub pswpout: AtomicU64,
    pub swap_ra: AtomicU64,
    pub swap_ra_hit: AtomicU64,
    pub pgfault: AtomicU64,
    pub pgmajfault: AtomicU64,
    pub zero_fills: AtomicU64,
    pub first_touch: AtomicU64,
    pub wp_faults: AtomicU64,
    pub evict_failed: AtomicU64,
    pub evict_cancelled: AtomicU64,
}

impl Counters {
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Relaxed);
    }

    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Relaxed)
    }
}

/// A region's figures at one moment.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RegionStats {
    /// The region's length in bytes.
    pub len: u64,
    /// The resident budget in pages.
    pub budget_pages: u64,
    /// Pages in the mapping now (including pages mapped to the shared zero page).
    pub resident_pages: u64,
    /// Pages held by the zram device now.
    pub evicted_pages: u64,
    /// Pages read back from the device, faulted or read ahead (`pswpin`).
    pub pswpin: u64,
    /// Pages evicted to the device (`pswpout`).
    pub pswpout: u64,
    /// Pages read ahead (`swap_ra`).
    pub swap_ra: u64,
    /// Read-ahead pages the program used before faulting again in their range
    /// (`swap_ra_hit`; see [`crate::Region`] for how use is seen).
    pub swap_ra_hit: u64,
    /// Missing-page faults served (`pgfault`, for this region only).
    pub pgfault: u64,
    /// Faults whose page had to be read back from the device (`pgmajfault`).
    pub pgmajfault: u64,
    /// Read faults on never-written or zero pages, served with the shared zero page
    /// (`UFFDIO_ZEROPAGE`).
    pub zero_fills: u64,
    /// Write faults on never-touched pages, served with a zeroed page.
    pub first_touch: u64,
    /// Write-protect faults: writers that met a page while it was being evicted.
    pub wp_faults: u64,
    /// Evictions the device refused (`mem_limit`, out of memory): the page stayed resident.
    pub evict_failed: u64,
    /// Evictions given up because the page was no longer in the mapping, or the program
    /// had made it unreadable (`mprotect`): such a page stays resident.
    pub evict_cancelled: u64,
    /// Readahead settings in force.
    pub vma_ra_enabled: bool,
    /// Readahead settings in force.
    pub vma_ra_max_order: u32,
    /// Time the handler took per fault, from reading the fault to the page being mapped.
    pub fault_latency: Summary,
    /// The device's `mm_stat` line, as the kernel formats it.
    pub mm_stat: String,
    /// Why the region failed, if it did.
    pub failed: Option<String>,
}

impl RegionStats {
    /// The figures as `key value` lines, the kernel's `/proc/vmstat` style, then the
    /// latency summary and `mm_stat`.
    pub fn format(&self) -> String {
        let l = &self.fault_latency;
        let mut s = String::new();
        for (k, v) in [
            ("budget_pages", self.budget_pages),
            ("resident_pages", self.resident_pages),
            ("evicted_pages", self.evicted_pages),
            ("pswpin", self.pswpin),
            ("pswpout", self.pswpout),
            ("swap_ra", self.swap_ra),
            ("swap_ra_hit", self.swap_ra_hit),
            ("pgfault", self.pgfault),
            ("pgmajfault", self.pgmajfault),
            ("zero_fills", self.zero_fills),
            ("first_touch", self.first_touch),
            ("wp_faults", self.wp_faults),
            ("evict_failed", self.evict_failed),
            ("evict_cancelled", self.evict_cancelled),
        ] {
            s.push_str(&format!("{k} {v}\n"));
        }
        s.push_str(&format!(
            "vma_ra_enabled {}\nvma_ra_max_order {}\n",
            self.vma_ra_enabled, self.vma_ra_max_order
        ));
        s.push_str(&format!(
            "fault_latency_us samples {} avg {:.1} p50 {:.1} p90 {:.1} p99 {:.1} max {:.1}\n",
            l.samples, l.avg_us, l.p50_us, l.p90_us, l.p99_us, l.max_us
        ));
        s.push_str(&format!("mm_stat {}\n", self.mm_stat.trim_end()));
        if let Some(f) = &self.failed {
            s.push_str(&format!("failed {f}\n"));
        }
        s
    }
}
