//! The post-processing figures as the control socket sends them and `zramd stat` and the
//! metrics show them, where the library's own types do not serve: a policy with its words,
//! the counters read out of their atomics. (Pass reports, backing figures and folding
//! figures are the library's, serialized as they are.)

use serde::{Deserialize, Serialize};
use zram::stats::Counters;
use zram::{PolicyStats, Zram};

/// A device's policy, in its words, and what it has done.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyFigures {
    /// The policy as `key=value` words (the `policy` attribute's text).
    pub policy: String,
    /// What it has done.
    #[serde(flatten)]
    pub stats: PolicyStats,
}

impl PolicyFigures {
    /// The figures of `policy` (its words) and `stats`.
    pub fn new(policy: &zram::Policy, stats: &PolicyStats) -> Self {
        Self {
            policy: policy.to_string(),
            stats: stats.clone(),
        }
    }
}

/// The device's post-processing counters (`bd_stat`'s and ours).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PostCounters {
    /// Pages of slots in the backing file.
    pub bd_count: u64,
    /// Pages read back from it.
    pub bd_reads: u64,
    /// Pages written to it.
    pub bd_writes: u64,
    /// Bytes written to it.
    pub bd_write_bytes: u64,
    /// Writebacks the file refused.
    pub wb_failed: u64,
    /// Reads of written-back slots that failed.
    pub bd_read_failed: u64,
    /// Slots marked idle.
    pub idle_marked: u64,
    /// Recompression attempts.
    pub recomp_attempts: u64,
    /// Slots recompressed into a smaller class.
    pub recomp_done: u64,
    /// Bytes recompression saved.
    pub recomp_saved_bytes: u64,
}

impl PostCounters {
    /// The counters of `zram`.
    pub fn of(zram: &Zram) -> Self {
        let c = zram.counters();
        let bd = zram.bd_stat();
        Self {
            bd_count: bd.bd_count,
            bd_reads: bd.bd_reads,
            bd_writes: bd.bd_writes,
            bd_write_bytes: Counters::get(&c.bd_write_bytes),
            wb_failed: Counters::get(&c.wb_failed),
            bd_read_failed: Counters::get(&c.bd_read_failed),
            idle_marked: Counters::get(&c.idle_marked),
            recomp_attempts: Counters::get(&c.recomp_attempts),
            recomp_done: Counters::get(&c.recomp_done),
            recomp_saved_bytes: Counters::get(&c.recomp_saved_bytes),
        }
    }
}

/// The backing store's figures, as the library counts them (bytes in the file, live
/// bytes, reads, cache hits, errors, segments punched).
pub use zram::backing::BackingStats as BackingFigures;

/// Folding and inline deduplication, as the library counts them (the `dedup` setting,
/// passes, objects and pages folded, pages and bytes deduplicated, shared objects, the
/// content index's bytes).
pub use zram::FoldStats as FoldFigures;
