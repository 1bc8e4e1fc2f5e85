//! The devices a server runs, by name, with their exports and a snapshot of their figures.

use std::sync::Arc;

use crate::device::Device;
use crate::export::{Export, ExportSet, RequestFigures};
use crate::figures::{BackingFigures, FoldFigures, PolicyFigures, PostCounters};
use serde::{Deserialize, Serialize};

/// A snapshot of one device, as `zramd stat` shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeviceStat {
    /// Device name (`zram0`).
    pub name: String,
    /// Compression algorithm.
    pub algorithm: String,
    /// Size in bytes.
    pub disksize: u64,
    /// Uncompressed bytes stored (`orig_data_size`).
    pub data: u64,
    /// Compressed bytes (`compr_data_size`).
    pub compr: u64,
    /// Memory used (`mem_used_total`).
    pub total: u64,
    /// `data / total`, 0 when empty.
    pub ratio: f64,
    /// Where the device is served (e.g. `nbd://127.0.0.1:10809/zram0`).
    pub export: String,
    /// The `mm_stat` line, as the kernel prints it (plus our appended fields).
    pub mm_stat: String,
    /// The `mm_stat` fields.
    pub mm_stat_fields: Vec<u64>,
    /// The `io_stat` line.
    pub io_stat: String,
    /// The `io_stat` figures: failed reads, failed writes, slots freed by discard.
    pub io_stat_fields: [u64; 3],
    /// The `debug_stat` text.
    pub debug_stat: String,
    /// The allocator (zsmalloc, afmalloc, zbud, malloc).
    #[serde(default)]
    pub allocator: zram::Allocator,
    /// zsmalloc chain size.
    pub chain_size: usize,
    /// Bytes compressed as one stream (4096: a page at a time).
    #[serde(default = "page_size")]
    pub unit_size: u64,
    /// Front ends holding the device open (NBD connections, open FUSE files).
    pub openers: usize,
    /// The backing file for writeback, if one is set.
    #[serde(default)]
    pub backing_dev: Option<String>,
    /// The backing store's figures (initialized with a backing file).
    #[serde(default)]
    pub backing: Option<BackingFigures>,
    /// `bd_stat` and the other post-processing counters (zeroes when uninitialized).
    #[serde(default)]
    pub post: PostCounters,
    /// The post-processing policy and what it has done.
    #[serde(default)]
    pub policy: PolicyFigures,
    /// Folding and inline deduplication: the setting and what they have done (zeroes, and
    /// the setting, while uninitialized).
    #[serde(default)]
    pub fold: FoldFigures,
    /// Reads and writes served so far through the front ends.
    #[serde(default)]
    pub requests: RequestFigures,
}

fn page_size() -> u64 {
    zram::PAGE_SIZE as u64
}

/// Where a server serves its devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// NBD over TCP.
    Tcp(std::net::SocketAddr),
    /// NBD over a unix socket.
    Unix(std::path::PathBuf),
    /// A FUSE mount.
    Fuse(std::path::PathBuf),
}

impl Endpoint {
    /// How a client reaches device `name` here.
    pub fn uri(&self, name: &str) -> String {
        match self {
            Endpoint::Tcp(addr) => format!("nbd://{addr}/{name}"),
            Endpoint::Unix(path) => format!("nbd+unix:///{name}?socket={}", path.display()),
            Endpoint::Fuse(dir) => format!("{}", dir.join(name).join("disk").display()),
        }
    }
}

/// The devices of one server.
#[derive(Debug)]
pub struct Registry {
    exports: Arc<ExportSet>,
    /// Where the devices are served.
    pub served_at: Vec<Endpoint>,
}

impl Registry {
    /// A registry of the given exports.
    pub fn new(exports: Vec<Arc<Export>>) -> Self {
        Self {
            exports: Arc::new(ExportSet::new(exports)),
            served_at: Vec::new(),
        }
    }

    /// The exports, for the front ends.
    pub fn exports(&self) -> &Arc<ExportSet> {
        &self.exports
    }

    /// The device with this name.
    pub fn device(&self, name: &str) -> Option<&Arc<Device>> {
        self.exports
            .iter()
            .find(|e| e.name == name)
            .map(|e| &e.device)
    }

    /// Snapshots of every device.
    pub fn stats(&self) -> Vec<DeviceStat> {
        self.exports
            .iter()
            .map(|e| {
                let zram = e.device.zram();
                let settings = e.device.settings();
                let mm = zram.as_ref().map(|z| z.mm_stat()).unwrap_or_default();
                let io = zram.as_ref().map(|z| z.io_stat()).unwrap_or_default();
                DeviceStat {
                    name: e.name.clone(),
                    algorithm: settings.algorithm.name().to_owned(),
                    disksize: zram.as_ref().map_or(0, |z| z.disksize()),
                    data: mm.orig_data_size,
                    compr: mm.compr_data_size,
                    total: mm.mem_used_total,
                    ratio: if mm.mem_used_total == 0 {
                        0.0
                    } else {
                        mm.orig_data_size as f64 / mm.mem_used_total as f64
                    },
                    export: self
                        .served_at
                        .iter()
                        .map(|at| at.uri(&e.name))
                        .collect::<Vec<_>>()
                        .join(" "),
                    mm_stat: mm.format(),
                    mm_stat_fields: mm.fields().to_vec(),
                    io_stat: io.format(),
                    io_stat_fields: [io.failed_reads, io.failed_writes, io.notify_free],
                    debug_stat: zram::stats::format_debug_stat(),
                    allocator: settings.pool.allocator,
                    chain_size: settings.pool.chain_size,
                    unit_size: settings.unit_size.bytes(),
                    openers: e.device.openers(),
                    backing_dev: settings
                        .backing_dev
                        .as_ref()
                        .map(|p| p.display().to_string()),
                    backing: zram.as_ref().and_then(|z| z.backing_stats()),
                    post: zram.as_deref().map(PostCounters::of).unwrap_or_default(),
                    policy: PolicyFigures::new(
                        &e.device.policy(),
                        &zram.as_ref().map(|z| z.policy_stats()).unwrap_or_default(),
                    ),
                    fold: zram.as_ref().map_or(
                        FoldFigures {
                            dedup: settings.dedup,
                            ..FoldFigures::default()
                        },
                        |z| z.fold_stats(),
                    ),
                    requests: e.stats.figures(),
                }
            })
            .collect()
    }
}
