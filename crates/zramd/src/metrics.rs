//! The opt-in Prometheus endpoint (`--metrics HOST:PORT`): `GET /metrics` answers in the text
//! exposition format with each device's `mm_stat`, `io_stat` and `bd_stat` figures, its
//! writeback, recompression and policy counters, its backing file's figures, its folding
//! and deduplication figures, and per-request counts, bytes and latency histograms.
//!
//! The exposition is written directly from the devices' own atomic counters (a scrape reads
//! them; nothing is copied into a registry between scrapes).
//!
//! Scrapes are served concurrently, bounded as every endpoint (`crate::endpoint`): at most
//! [`MAX_CONNECTIONS`] at once, and when full the oldest connection still sending its
//! request makes way, so silent connections cannot keep a scrape out; 5 s for the whole
//! request head, at most [`MAX_HEAD`] bytes of it.

use std::fmt::Write as _;
use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use crate::endpoint::{self, Endpoint, REQUEST_DEADLINE, Unanswered};
use crate::export::{LATENCY_BUCKETS_US, Op, OpStats};
use crate::listen::Listener;
use crate::registry::{DeviceStat, Registry};

/// Metrics connections served at once.
pub const MAX_CONNECTIONS: usize = 8;
/// Longest request head accepted, in bytes.
pub const MAX_HEAD: usize = 8 * 1024;

const MM_STAT_NAMES: [(&str, &str); 12] = [
    (
        "orig_data_size_bytes",
        "Uncompressed size of the data stored",
    ),
    (
        "compr_data_size_bytes",
        "Compressed size of the data stored",
    ),
    (
        "mem_used_total_bytes",
        "Memory the allocator holds for the data",
    ),
    ("mem_limit_bytes", "Memory limit (0 = none)"),
    ("mem_used_max_bytes", "Highest mem_used_total seen"),
    ("same_pages", "Same-filled pages stored as one word"),
    ("pages_compacted", "Pages freed by compaction"),
    ("huge_pages", "Pages stored uncompressed"),
    (
        "huge_pages_since",
        "Pages stored uncompressed since the device started",
    ),
    ("pages_folded", "Pages freed by folding identical objects"),
    ("metadata_bytes", "Slot table and allocator bookkeeping"),
    ("cached_bytes", "Freed zspage pages kept resident for reuse"),
];

/// A per-device figure: name (after `zramd_`), type, help, and how to read it.
type Figure = (
    &'static str,
    &'static str,
    &'static str,
    fn(&DeviceStat) -> u64,
);

/// The post-processing figures: writeback (`bd_stat` in pages, and ours), idle marking,
/// recompression, the policy, and the backing file (0 without one).
const POST_FIGURES: [Figure; 17] = [
    (
        "bd_count",
        "gauge",
        "Pages of slots held in the backing file",
        |d| d.post.bd_count,
    ),
    (
        "bd_reads_total",
        "counter",
        "Pages read back from the backing file",
        |d| d.post.bd_reads,
    ),
    (
        "bd_writes_total",
        "counter",
        "Pages written to the backing file",
        |d| d.post.bd_writes,
    ),
    (
        "bd_write_bytes_total",
        "counter",
        "Bytes written to the backing file",
        |d| d.post.bd_write_bytes,
    ),
    (
        "wb_failed_total",
        "counter",
        "Writebacks the backing file refused",
        |d| d.post.wb_failed,
    ),
    (
        "bd_read_failed_total",
        "counter",
        "Reads of written-back slots that failed",
        |d| d.post.bd_read_failed,
    ),
    ("idle_marked_total", "counter", "Slots marked idle", |d| {
        d.post.idle_marked
    }),
    (
        "recomp_attempts_total",
        "counter",
        "Recompression attempts",
        |d| d.post.recomp_attempts,
    ),
    (
        "recomp_done_total",
        "counter",
        "Slots recompressed into a smaller class",
        |d| d.post.recomp_done,
    ),
    (
        "recomp_saved_bytes_total",
        "counter",
        "Stream bytes recompression saved",
        |d| d.post.recomp_saved_bytes,
    ),
    ("policy_rounds_total", "counter", "Policy rounds run", |d| {
        d.policy.stats.rounds
    }),
    (
        "policy_recompressed_total",
        "counter",
        "Slots the policy recompressed",
        |d| d.policy.stats.recompressed,
    ),
    (
        "policy_written_back_pages_total",
        "counter",
        "Pages the policy wrote back",
        |d| d.policy.stats.written_back_pages,
    ),
    (
        "policy_errors_total",
        "counter",
        "Policy steps that failed",
        |d| d.policy.stats.errors,
    ),
    (
        "backing_file_bytes",
        "gauge",
        "Bytes of backing file in use",
        |d| d.backing.map_or(0, |b| b.file_bytes),
    ),
    (
        "backing_live_bytes",
        "gauge",
        "Bytes of the backing file holding slots' data",
        |d| d.backing.map_or(0, |b| b.live_bytes),
    ),
    (
        "backing_cache_hits_total",
        "counter",
        "Read-backs served from the read-back cache",
        |d| d.backing.map_or(0, |b| b.cache_hits),
    ),
];

/// Folding and inline deduplication (`pages_folded` is `mm_stat`'s, above).
const FOLD_FIGURES: [Figure; 7] = [
    (
        "dedup",
        "gauge",
        "Inline deduplication on (1) or off (0)",
        |d| u64::from(d.fold.dedup),
    ),
    ("folds_total", "counter", "Fold passes run", |d| {
        d.fold.folds
    }),
    (
        "objects_folded_total",
        "counter",
        "Objects freed because an identical object now serves their slots",
        |d| d.fold.objects_folded,
    ),
    (
        "dedup_pages_total",
        "counter",
        "Page writes that shared an identical stored object",
        |d| d.fold.dedup_pages,
    ),
    (
        "dedup_bytes_total",
        "counter",
        "Compressed bytes deduplicated writes did not store again",
        |d| d.fold.dedup_bytes,
    ),
    (
        "shared_objects",
        "gauge",
        "Stored objects that more than one slot names",
        |d| d.fold.shared_objects,
    ),
    (
        "fold_index_bytes",
        "gauge",
        "Bytes of the content index and reference counts (in metadata_bytes)",
        |d| d.fold.index_bytes,
    ),
];

/// A per-request counter: name (after `zramd_`), help, and which of the counters it is.
type PerOp = (&'static str, &'static str, fn(&OpStats) -> &AtomicU64);

/// A metric family's `HELP` and `TYPE` lines.
fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP zramd_{name} {help}.");
    let _ = writeln!(out, "# TYPE zramd_{name} {kind}");
}

/// A metric family with one sample per device.
fn per_device(
    out: &mut String,
    stats: &[DeviceStat],
    (name, kind, help, value): (&str, &str, &str, impl Fn(&DeviceStat) -> u64),
) {
    header(out, name, kind, help);
    for d in stats {
        let _ = writeln!(out, "zramd_{name}{{device=\"{}\"}} {}", d.name, value(d));
    }
}

/// The exposition text for every device.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    let stats = registry.stats();
    header(
        &mut out,
        "device_info",
        "gauge",
        "The device's algorithm and allocator (always 1)",
    );
    for d in &stats {
        let _ = writeln!(
            out,
            "zramd_device_info{{device=\"{}\",algorithm=\"{}\",allocator=\"{}\"}} 1",
            d.name, d.algorithm, d.allocator
        );
    }
    for (i, (name, help)) in MM_STAT_NAMES.iter().enumerate() {
        per_device(
            &mut out,
            &stats,
            (name, "gauge", help, |d| d.mm_stat_fields[i]),
        );
    }
    let io = ["failed_reads", "failed_writes", "notify_free"];
    for (i, name) in io.iter().enumerate() {
        let name = format!("{name}_total");
        per_device(
            &mut out,
            &stats,
            (&name, "counter", "From io_stat", |d| d.io_stat_fields[i]),
        );
    }
    for figure in POST_FIGURES.into_iter().chain(FOLD_FIGURES) {
        per_device(&mut out, &stats, figure);
    }
    let exports = registry.exports();
    let per_op: [PerOp; 2] = [
        ("request_errors_total", "Requests that failed", |s| {
            &s.errors
        }),
        ("request_bytes_total", "Bytes covered by requests", |s| {
            &s.bytes
        }),
    ];
    for (name, help, counter) in per_op {
        header(&mut out, name, "counter", help);
        for e in exports.iter() {
            for op in Op::ALL {
                let value = counter(e.stats.op(op)).load(Relaxed);
                let _ = writeln!(
                    out,
                    "zramd_{name}{{device=\"{}\",op=\"{}\"}} {value}",
                    e.name,
                    op.name()
                );
            }
        }
    }
    header(
        &mut out,
        "request_latency_seconds",
        "histogram",
        "Request latency",
    );
    for e in exports.iter() {
        for op in Op::ALL {
            let s = e.stats.op(op);
            let labels = format!("device=\"{}\",op=\"{}\"", e.name, op.name());
            let mut cumulative = 0;
            for (i, bound) in LATENCY_BUCKETS_US.iter().enumerate() {
                cumulative += s.buckets[i].load(Relaxed);
                let _ = writeln!(
                    out,
                    "zramd_request_latency_seconds_bucket{{{labels},le=\"{}\"}} {cumulative}",
                    *bound as f64 / 1e6
                );
            }
            cumulative += s.buckets[LATENCY_BUCKETS_US.len()].load(Relaxed);
            let _ = writeln!(
                out,
                "zramd_request_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {cumulative}"
            );
            let _ = writeln!(
                out,
                "zramd_request_latency_seconds_sum{{{labels}}} {}",
                s.latency_sum_us.load(Relaxed) as f64 / 1e6
            );
            let _ = writeln!(
                out,
                "zramd_request_latency_seconds_count{{{labels}}} {}",
                s.count.load(Relaxed)
            );
        }
    }
    out
}

/// Serves `GET /metrics` until `shutdown` is set.
pub fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<()> {
    endpoint::serve(Listener::Tcp(listener), Metrics { registry }, &shutdown)
}

/// The metrics endpoint.
#[derive(Debug)]
struct Metrics {
    registry: Arc<Registry>,
}

/// An HTTP answer that closes the connection.
fn http(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

impl Endpoint for Metrics {
    const NAME: &'static str = "metrics";
    const MAX_CONNECTIONS: usize = MAX_CONNECTIONS;
    const END: &'static [u8] = b"\r\n\r\n";
    const MAX_REQUEST: usize = MAX_HEAD;

    fn answer(&self, head: &[u8]) -> Vec<u8> {
        if head.starts_with(b"GET /metrics ") || head.starts_with(b"GET / ") {
            http("200 OK", &render(&self.registry))
        } else {
            http("404 Not Found", "try GET /metrics\n")
        }
    }

    fn unanswered(&self, why: Unanswered) -> Vec<u8> {
        match why {
            Unanswered::TooLong => http(
                "431 Request Header Fields Too Large",
                &format!("request head longer than {MAX_HEAD} bytes\n"),
            ),
            Unanswered::TooSlow => http(
                "408 Request Timeout",
                &format!(
                    "request not received within {}s\n",
                    REQUEST_DEADLINE.as_secs()
                ),
            ),
            Unanswered::Busy => http(
                "503 Service Unavailable",
                "too many metrics connections; try again\n",
            ),
        }
    }
}
