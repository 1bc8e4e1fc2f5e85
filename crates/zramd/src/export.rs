//! Exports: named zram devices as the front ends serve them, with per-export request
//! statistics (counts, bytes and latency histograms) for the metrics endpoint.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use zram::ZramConfig;

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
/// The set changes at run time (`hot_add`, `hot_remove`, `zramd add`/`remove`): readers
/// take snapshots. Each export has an id, given in order from 0 and never reused, that the
/// FUSE tree's inode numbers are made of.
#[derive(Debug, Default)]
pub struct ExportSet {
    slots: RwLock<Slots>,
}

#[derive(Debug, Default)]
struct Slots {
    exports: Vec<(u64, Arc<Export>)>,
    next_id: u64,
}

/// Why an export cannot be removed, with the errnos of the kernel's `hot_remove`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RemoveError {
    /// No export has this name (`ENODEV`).
    #[error("no device named {0:?}")]
    NotFound(String),
    /// A front end holds the device open (`EBUSY`).
    #[error("{name} is busy: {openers} client(s) have it open")]
    Busy {
        /// The device.
        name: String,
        /// How many hold it.
        openers: usize,
    },
}

impl RemoveError {
    /// The errno the kernel's `hot_remove` returns for this.
    pub fn errno(&self) -> i32 {
        match self {
            RemoveError::NotFound(_) => libc::ENODEV,
            RemoveError::Busy { .. } => libc::EBUSY,
        }
    }
}

impl ExportSet {
    /// A set of exports (names must be unique; the first is the default).
    pub fn new(exports: Vec<Arc<Export>>) -> Self {
        let next_id = exports.len() as u64;
        Self {
            slots: RwLock::new(Slots {
                exports: (0..).zip(exports).collect(),
                next_id,
            }),
        }
    }

    /// The export with this name; the empty name selects the default export.
    pub fn get(&self, name: &str) -> Option<Arc<Export>> {
        let slots = self.slots.read();
        let mut all = slots.exports.iter().map(|(_, e)| e);
        if name.is_empty() {
            all.next().cloned()
        } else {
            all.find(|e| e.name == name).cloned()
        }
    }

    /// A snapshot of all exports, in order.
    pub fn iter(&self) -> std::vec::IntoIter<Arc<Export>> {
        let slots = self.slots.read();
        let all: Vec<Arc<Export>> = slots.exports.iter().map(|(_, e)| Arc::clone(e)).collect();
        all.into_iter()
    }

    /// A snapshot of all exports with their ids, in order.
    pub fn with_ids(&self) -> Vec<(u64, Arc<Export>)> {
        self.slots.read().exports.clone()
    }

    /// The export with this id.
    pub fn by_id(&self, id: u64) -> Option<Arc<Export>> {
        let slots = self.slots.read();
        let found = slots.exports.iter().find(|(i, _)| *i == id);
        found.map(|(_, e)| Arc::clone(e))
    }

    /// Adds an uninitialized device named `zramN`, N the lowest number no export's name
    /// uses, with `settings` (the kernel's `hot_add`); returns N and the export.
    pub fn add_zram(&self, settings: ZramConfig) -> (u32, Arc<Export>) {
        let mut slots = self.slots.write();
        // The numbers in use, found in one pass (not a pass over every export per number
        // tried, which took seconds for a few hundred adds among thousands of devices).
        let taken: std::collections::HashSet<u32> = slots
            .exports
            .iter()
            .filter_map(|(_, e)| e.name.strip_prefix("zram")?.parse().ok())
            .collect();
        let n = (0..=u32::MAX)
            .find(|n| !taken.contains(n))
            .unwrap_or(u32::MAX);
        let name = format!("zram{n}");
        let device = Arc::new(Device::new(name.clone(), settings));
        let export = Arc::new(Export::new(name, device, false));
        let id = slots.next_id;
        slots.next_id += 1;
        slots.exports.push((id, Arc::clone(&export)));
        (n, export)
    }

    /// Removes the export named `name` and frees its device (the kernel's `hot_remove`):
    /// refused while a front end holds it open. Whoever still has the export from before
    /// can no longer open it.
    pub fn remove(&self, name: &str) -> Result<Arc<Export>, RemoveError> {
        let mut slots = self.slots.write();
        let at = slots
            .exports
            .iter()
            .position(|(_, e)| e.name == name)
            .ok_or_else(|| RemoveError::NotFound(name.to_owned()))?;
        let export = Arc::clone(&slots.exports[at].1);
        let data = export.device.retire().map_err(|_| RemoveError::Busy {
            name: name.to_owned(),
            openers: export.device.openers(),
        })?;
        slots.exports.remove(at);
        drop(slots);
        // The data is freed without the set's lock held.
        drop(data);
        Ok(export)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_added_device_takes_the_lowest_free_number() {
        let named = |name: &str| {
            let device = Arc::new(Device::new(name, ZramConfig::default()));
            Arc::new(Export::new(name, device, false))
        };
        // Names that only look like numbers (`zram007`, `zram+2`) hold no number back from
        // a name of its own, and make no name twice.
        let set = ExportSet::new(vec![named("zram0"), named("zram007"), named("zram+2")]);
        let added: Vec<u32> = (0..3)
            .map(|_| set.add_zram(ZramConfig::default()).0)
            .collect();
        let mut names: Vec<String> = set.iter().map(|e| e.name.clone()).collect();
        assert!(added.iter().all(|&n| n != 0), "{added:?}");
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(names.len(), before, "a name made twice: {names:?}");
        let freed = format!("zram{}", added[1]);
        set.remove(&freed).unwrap();
        assert_eq!(set.add_zram(ZramConfig::default()).0, added[1]);
    }
}
