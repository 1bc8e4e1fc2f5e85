//! Exports: named zram devices as the front ends serve them, with per-export request
//! statistics (counts, bytes and latency histograms) for the metrics endpoint.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::device::Device;

/// Kinds of requests a front end serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Reads.
    Read,
    /// Writes.
    Write,
    /// Trims / discards.
    Trim,
    /// Write-zeroes.
    WriteZeroes,
    /// Flushes.
    Flush,
    /// Anything else (cache, block status).
    Other,
}

impl Op {
    /// Every kind, in a fixed order.
    pub const ALL: [Op; 6] = [
        Op::Read,
        Op::Write,
        Op::Trim,
        Op::WriteZeroes,
        Op::Flush,
        Op::Other,
    ];

    /// A lower-case name for labels.
    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Trim => "trim",
            Op::WriteZeroes => "write_zeroes",
            Op::Flush => "flush",
            Op::Other => "other",
        }
    }

    fn index(self) -> usize {
        Op::ALL.iter().position(|&o| o == self).unwrap_or(5)
    }
}

/// Upper bounds of the latency histogram buckets, in microseconds (the last is +Inf).
pub const LATENCY_BUCKETS_US: [u64; 12] = [
    10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 50_000, 250_000,
];

/// Counters of one kind of request.
#[derive(Debug, Default)]
pub struct OpStats {
    /// Requests served (including failed ones).
    pub count: AtomicU64,
    /// Requests that failed.
    pub errors: AtomicU64,
    /// Bytes the requests covered.
    pub bytes: AtomicU64,
    /// Sum of latencies, microseconds.
    pub latency_sum_us: AtomicU64,
    /// Cumulative-by-reader histogram: `buckets[i]` counts requests with latency
    /// <= `LATENCY_BUCKETS_US[i]` that exceeded the previous bound; the last counts the rest.
    pub buckets: [AtomicU64; LATENCY_BUCKETS_US.len() + 1],
}

/// Request statistics of one export.
#[derive(Debug, Default)]
pub struct RequestStats {
    ops: [OpStats; 6],
}

impl RequestStats {
    /// Records one request.
    pub fn record(&self, op: Op, bytes: u64, latency: Duration, ok: bool) {
        let s = &self.ops[op.index()];
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        s.count.fetch_add(1, Relaxed);
        if !ok {
            s.errors.fetch_add(1, Relaxed);
        }
        s.bytes.fetch_add(bytes, Relaxed);
        s.latency_sum_us.fetch_add(us, Relaxed);
        let b = LATENCY_BUCKETS_US
            .iter()
            .position(|&bound| us <= bound)
            .unwrap_or(LATENCY_BUCKETS_US.len());
        s.buckets[b].fetch_add(1, Relaxed);
    }

    /// The counters of one kind.
    pub fn op(&self, op: Op) -> &OpStats {
        &self.ops[op.index()]
    }

    /// The read and write counts and bytes so far.
    pub fn figures(&self) -> RequestFigures {
        let (read, write) = (self.op(Op::Read), self.op(Op::Write));
        RequestFigures {
            reads: read.count.load(Relaxed),
            read_bytes: read.bytes.load(Relaxed),
            writes: write.count.load(Relaxed),
            written_bytes: write.bytes.load(Relaxed),
        }
    }
}

/// An export's reads and writes so far (cumulative), as `zramd stat --json` and `zramd top`
/// show them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestFigures {
    /// Read requests served.
    pub reads: u64,
    /// Bytes they covered.
    pub read_bytes: u64,
    /// Write requests served.
    pub writes: u64,
    /// Bytes they covered.
    pub written_bytes: u64,
}

/// One exported device.
#[derive(Debug)]
pub struct Export {
    /// Export name (the device name, e.g. `zram0`).
    pub name: String,
    /// The device.
    pub device: Arc<Device>,
    /// Refuse writes.
    pub read_only: bool,
    /// Request statistics.
    pub stats: RequestStats,
}

impl Export {
    /// An export of `device` under `name`.
    pub fn new(name: impl Into<String>, device: Arc<Device>, read_only: bool) -> Self {
        Self {
            name: name.into(),
            device,
            read_only,
            stats: RequestStats::default(),
        }
    }
}

/// The exports a server offers; the first is the default (what the empty name selects).
#[derive(Debug, Default)]
pub struct ExportSet {
    exports: Vec<Arc<Export>>,
}

impl ExportSet {
    /// A set of exports (names must be unique; the first is the default).
    pub fn new(exports: Vec<Arc<Export>>) -> Self {
        Self { exports }
    }

    /// The export with this name; the empty name selects the default export.
    pub fn get(&self, name: &str) -> Option<&Arc<Export>> {
        if name.is_empty() {
            self.exports.first()
        } else {
            self.exports.iter().find(|e| e.name == name)
        }
    }

    /// All exports.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Export>> {
        self.exports.iter()
    }
}
