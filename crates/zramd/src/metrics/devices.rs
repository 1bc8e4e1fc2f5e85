//! The devices' figures, snapshotted from the device registry at each scrape: an info
//! metric per device, `mm_stat`, `io_stat` and `bd_stat` figures, writeback, recompression
//! and policy counters, the backing file, folding and deduplication, and per-request
//! counts, bytes and latency histograms.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Unit;

use super::family::{Kind, Of, Value, family};
use crate::export::{LATENCY_BUCKETS_US, Op};
use crate::registry::{DeviceStat, Registry};

/// A per-device figure: name (after `zramd_`, without unit or `_total`), unit, type, help,
/// and how to read it.
type Figure = (&'static str, Of, Kind, &'static str, fn(&DeviceStat) -> u64);

use Kind::{Counter, Gauge};
use Of::{Bytes, Count};

/// `mm_stat`'s fields, in its order.
const MM_STAT: [(&str, Of, Kind, &str); 12] = [
    (
        "orig_data_size",
        Bytes,
        Gauge,
        "Uncompressed size of the data stored",
    ),
    (
        "compr_data_size",
        Bytes,
        Gauge,
        "Compressed size of the data stored",
    ),
    (
        "mem_used",
        Bytes,
        Gauge,
        "Memory the allocator holds for the data (mem_used_total)",
    ),
    ("mem_limit", Bytes, Gauge, "Memory limit (0 = none)"),
    ("mem_used_max", Bytes, Gauge, "Highest mem_used seen"),
    (
        "same_pages",
        Count,
        Gauge,
        "Same-filled pages stored as one word",
    ),
    (
        "pages_compacted",
        Count,
        Counter,
        "Pages freed by compaction",
    ),
    ("huge_pages", Count, Gauge, "Pages stored uncompressed"),
    (
        "huge_pages_since",
        Count,
        Counter,
        "Pages stored uncompressed since the device started",
    ),
    (
        "pages_folded",
        Count,
        Counter,
        "Pages freed by folding identical objects",
    ),
    (
        "metadata",
        Bytes,
        Gauge,
        "Slot table and allocator bookkeeping",
    ),
    (
        "cached",
        Bytes,
        Gauge,
        "Freed zspage pages kept resident for reuse",
    ),
];

/// The settings that are sizes, and who holds the device open.
const SETTINGS: [Figure; 3] = [
    (
        "disksize",
        Bytes,
        Gauge,
        "Size of the device (0 while uninitialized)",
        |d| d.disksize,
    ),
    (
        "unit_size",
        Bytes,
        Gauge,
        "Bytes compressed as one stream",
        |d| d.unit_size,
    ),
    (
        "openers",
        Count,
        Gauge,
        "Front ends holding the device open",
        |d| d.openers as u64,
    ),
];

/// `io_stat`.
const IO_STAT: [Figure; 3] = [
    (
        "failed_reads",
        Count,
        Counter,
        "Reads that failed (io_stat)",
        |d| d.io_stat_fields[0],
    ),
    (
        "failed_writes",
        Count,
        Counter,
        "Writes that failed (io_stat)",
        |d| d.io_stat_fields[1],
    ),
    (
        "notify_free",
        Count,
        Counter,
        "Slots freed by discard (io_stat)",
        |d| d.io_stat_fields[2],
    ),
];

/// The post-processing figures: writeback (`bd_stat` in pages, and ours), idle marking,
/// recompression, the policy, and the backing file (0 without one).
const POST: [Figure; 18] = [
    (
        "bd_count",
        Count,
        Gauge,
        "Pages of slots held in the backing file",
        |d| d.post.bd_count,
    ),
    (
        "bd_reads",
        Count,
        Counter,
        "Pages read back from the backing file",
        |d| d.post.bd_reads,
    ),
    (
        "bd_writes",
        Count,
        Counter,
        "Pages written to the backing file",
        |d| d.post.bd_writes,
    ),
    (
        "bd_write",
        Bytes,
        Counter,
        "Bytes written to the backing file",
        |d| d.post.bd_write_bytes,
    ),
    (
        "wb_failed",
        Count,
        Counter,
        "Writebacks the backing file refused",
        |d| d.post.wb_failed,
    ),
    (
        "bd_read_failed",
        Count,
        Counter,
        "Reads of written-back slots that failed",
        |d| d.post.bd_read_failed,
    ),
    ("idle_marked", Count, Counter, "Slots marked idle", |d| {
        d.post.idle_marked
    }),
    (
        "recomp_attempts",
        Count,
        Counter,
        "Recompression attempts",
        |d| d.post.recomp_attempts,
    ),
    (
        "recomp_done",
        Count,
        Counter,
        "Slots recompressed into a smaller class",
        |d| d.post.recomp_done,
    ),
    (
        "recomp_saved",
        Bytes,
        Counter,
        "Stream bytes recompression saved",
        |d| d.post.recomp_saved_bytes,
    ),
    ("policy_rounds", Count, Counter, "Policy rounds run", |d| {
        d.policy.stats.rounds
    }),
    (
        "policy_recompressed",
        Count,
        Counter,
        "Slots the policy recompressed",
        |d| d.policy.stats.recompressed,
    ),
    (
        "policy_written_back_pages",
        Count,
        Counter,
        "Pages the policy wrote back",
        |d| d.policy.stats.written_back_pages,
    ),
    (
        "policy_errors",
        Count,
        Counter,
        "Policy steps that failed",
        |d| d.policy.stats.errors,
    ),
    (
        "backing_file",
        Bytes,
        Gauge,
        "Bytes of backing file in use",
        |d| d.backing.map_or(0, |b| b.file_bytes),
    ),
    (
        "backing_live",
        Bytes,
        Gauge,
        "Bytes of the backing file holding slots' data",
        |d| d.backing.map_or(0, |b| b.live_bytes),
    ),
    (
        "backing_moved",
        Bytes,
        Counter,
        "Bytes moved out of sparse backing segments by cleaning",
        |d| d.backing.map_or(0, |b| b.moved_bytes),
    ),
    (
        "backing_cache_hits",
        Count,
        Counter,
        "Read-backs served from the read-back cache",
        |d| d.backing.map_or(0, |b| b.cache_hits),
    ),
];

/// Folding and inline deduplication (`pages_folded` is `mm_stat`'s, above).
const FOLD: [Figure; 7] = [
    (
        "dedup",
        Count,
        Gauge,
        "Inline deduplication on (1) or off (0)",
        |d| u64::from(d.fold.dedup),
    ),
    ("folds", Count, Counter, "Fold passes run", |d| d.fold.folds),
    (
        "objects_folded",
        Count,
        Counter,
        "Objects freed because an identical object now serves their slots",
        |d| d.fold.objects_folded,
    ),
    (
        "dedup_pages",
        Count,
        Counter,
        "Page writes that shared an identical stored object",
        |d| d.fold.dedup_pages,
    ),
    (
        "dedup",
        Bytes,
        Counter,
        "Compressed bytes deduplicated writes did not store again",
        |d| d.fold.dedup_bytes,
    ),
    (
        "shared_objects",
        Count,
        Gauge,
        "Stored objects that more than one slot names",
        |d| d.fold.shared_objects,
    ),
    (
        "fold_index",
        Bytes,
        Gauge,
        "Bytes of the content index and reference counts (in metadata_bytes)",
        |d| d.fold.index_bytes,
    ),
];

/// The devices of one server, read at each scrape.
#[derive(Debug)]
pub(super) struct Devices(pub(super) Arc<Registry>);

/// A device's label.
fn device(d: &DeviceStat) -> [(&'static str, &str); 1] {
    [("device", d.name.as_str())]
}

impl Collector for Devices {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> fmt::Result {
        let stats = self.0.stats();
        let mut info = encoder.encode_descriptor(
            "device",
            "The device's compression algorithm and allocator",
            None,
            MetricType::Info,
        )?;
        for d in &stats {
            info.encode_info(&[
                ("device", d.name.as_str()),
                ("algorithm", d.algorithm.as_str()),
                ("allocator", d.allocator.name()),
            ])?;
        }
        for (i, (name, of, kind, help)) in MM_STAT.into_iter().enumerate() {
            let samples = stats.iter().map(|d| {
                (
                    device(d),
                    Value::Int(d.mm_stat_fields.get(i).copied().unwrap_or(0)),
                )
            });
            family(&mut encoder, (name, of, kind, help), samples)?;
        }
        for (name, of, kind, help, read) in
            SETTINGS.into_iter().chain(IO_STAT).chain(POST).chain(FOLD)
        {
            let samples = stats.iter().map(|d| (device(d), Value::Int(read(d))));
            family(&mut encoder, (name, of, kind, help), samples)?;
        }
        self.requests(&mut encoder)
    }
}

impl Devices {
    /// Per-request counters and latency histograms, by device and kind of request.
    fn requests(&self, encoder: &mut DescriptorEncoder<'_>) -> fmt::Result {
        // One snapshot of the set (devices come and go at run time) for every family.
        let exports: Vec<_> = self.0.exports().iter().collect();
        let by_op = || {
            exports
                .iter()
                .flat_map(|e| Op::ALL.map(|op| (e, op)))
                .map(|(e, op)| {
                    (
                        [("device", e.name.as_str()), ("op", op.name())],
                        e.stats.op(op),
                    )
                })
        };
        family(
            encoder,
            (
                "requests",
                Count,
                Counter,
                "Requests served (including failed ones)",
            ),
            by_op().map(|(l, s)| (l, Value::Int(s.count.load(Relaxed)))),
        )?;
        family(
            encoder,
            ("request_errors", Count, Counter, "Requests that failed"),
            by_op().map(|(l, s)| (l, Value::Int(s.errors.load(Relaxed)))),
        )?;
        family(
            encoder,
            ("request", Bytes, Counter, "Bytes covered by requests"),
            by_op().map(|(l, s)| (l, Value::Int(s.bytes.load(Relaxed)))),
        )?;
        let seconds = Unit::Seconds;
        let mut latency = encoder.encode_descriptor(
            "request_latency",
            "Request latency",
            Some(&seconds),
            MetricType::Histogram,
        )?;
        for (labels, s) in by_op() {
            let mut buckets: Vec<(f64, u64)> = LATENCY_BUCKETS_US
                .iter()
                .zip(&s.buckets)
                .map(|(&bound, n)| (bound as f64 / 1e6, n.load(Relaxed)))
                .collect();
            buckets.push((
                f64::INFINITY,
                s.buckets[LATENCY_BUCKETS_US.len()].load(Relaxed),
            ));
            latency
                .encode_family(&labels)?
                .encode_histogram::<NoLabelSet>(
                    s.latency_sum_us.load(Relaxed) as f64 / 1e6,
                    s.count.load(Relaxed),
                    &buckets,
                    None,
                )?;
        }
        Ok(())
    }
}
