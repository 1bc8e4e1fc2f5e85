//! The opt-in Prometheus endpoint (`--metrics HOST:PORT`): `GET /metrics` answers in the text
//! exposition format with each device's `mm_stat` and `io_stat` figures and per-request
//! counts, bytes and latency histograms.
//!
//! The exposition is written directly from the devices' own atomic counters (a scrape reads
//! them; nothing is copied into a registry between scrapes).

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use crate::export::{LATENCY_BUCKETS_US, Op};
use crate::registry::Registry;

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

/// The exposition text for every device.
pub fn render(registry: &Registry) -> String {
    let mut out = String::new();
    let stats = registry.stats();
    for (i, (name, help)) in MM_STAT_NAMES.iter().enumerate() {
        let _ = writeln!(out, "# HELP zramd_{name} {help}.");
        let _ = writeln!(out, "# TYPE zramd_{name} gauge");
        for d in &stats {
            let _ = writeln!(
                out,
                "zramd_{name}{{device=\"{}\"}} {}",
                d.name, d.mm_stat_fields[i]
            );
        }
    }
    let io = ["failed_reads", "failed_writes", "notify_free"];
    for (i, name) in io.iter().enumerate() {
        let _ = writeln!(out, "# HELP zramd_{name}_total From io_stat.");
        let _ = writeln!(out, "# TYPE zramd_{name}_total counter");
        for d in &stats {
            let _ = writeln!(
                out,
                "zramd_{name}_total{{device=\"{}\"}} {}",
                d.name, d.io_stat_fields[i]
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP zramd_request_errors_total Requests that failed."
    );
    let _ = writeln!(out, "# TYPE zramd_request_errors_total counter");
    for e in registry.exports().iter() {
        for op in Op::ALL {
            let s = e.stats.op(op);
            let _ = writeln!(
                out,
                "zramd_request_errors_total{{device=\"{}\",op=\"{}\"}} {}",
                e.name,
                op.name(),
                s.errors.load(Relaxed)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP zramd_request_bytes_total Bytes covered by requests."
    );
    let _ = writeln!(out, "# TYPE zramd_request_bytes_total counter");
    for e in registry.exports().iter() {
        for op in Op::ALL {
            let _ = writeln!(
                out,
                "zramd_request_bytes_total{{device=\"{}\",op=\"{}\"}} {}",
                e.name,
                op.name(),
                e.stats.op(op).bytes.load(Relaxed)
            );
        }
    }
    let _ = writeln!(out, "# HELP zramd_request_latency_seconds Request latency.");
    let _ = writeln!(out, "# TYPE zramd_request_latency_seconds histogram");
    for e in registry.exports().iter() {
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
    listener.set_nonblocking(true)?;
    while !shutdown.load(Relaxed) {
        match listener.accept() {
            Ok((stream, _)) => {
                if let Err(e) = answer(stream, &registry) {
                    tracing::debug!("metrics connection: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50))
            }
            Err(e) => tracing::warn!("metrics accept: {e}"),
        }
    }
    Ok(())
}

fn answer(mut stream: TcpStream, registry: &Registry) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut head = [0u8; 2048];
    let n = stream.read(&mut head)?;
    let request = String::from_utf8_lossy(&head[..n]);
    let (status, body) = if request.starts_with("GET /metrics ") || request.starts_with("GET / ") {
        ("200 OK", render(registry))
    } else {
        ("404 Not Found", "try GET /metrics\n".to_owned())
    };
    write!(
        stream,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}
