//! How a pool is built: one settings struct, read from config files (serde) and command
//! lines (clap, with the `clap` feature), passed down whole.

use serde::{Deserialize, Serialize};

use crate::allocator::Allocator;
use crate::class::{
    ClassTable, DEFAULT_CHAIN_SIZE, Geometry, Header, MAX_CHAIN_SIZE, MIN_CHAIN_SIZE,
};
use crate::error::{Error, Result};

/// Pages of freed zspages a pool keeps resident for reuse by default (4 MiB).
pub const DEFAULT_PAGE_CACHE_PAGES: usize = 1024;

/// How a pool is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct PoolConfig {
    /// The allocator (zsmalloc, afmalloc, zbud, malloc). Command lines that take a list of
    /// allocators (`bench untar --allocator A,B`) or one (`serve --allocator A`) say so
    /// themselves; the settings below are zsmalloc's, and the others use what applies.
    #[cfg_attr(feature = "clap", arg(skip))]
    pub allocator: Allocator,
    /// zsmalloc chain size: most pages one zspage may have (the kernel's
    /// `CONFIG_ZSMALLOC_CHAIN_SIZE`), 1..=16.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = DEFAULT_CHAIN_SIZE))]
    pub chain_size: usize,
    /// zsmalloc zspage-length rule: seed (kernels up to 6.2) or min-waste (6.3 and later).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_enum, default_value_t = Geometry::default())
    )]
    pub geometry: Geometry,
    /// Where zsmalloc objects keep their handle: omitted (8 bytes less per object) or handle
    /// (the kernel's layout, for like-for-like comparisons).
    #[serde(rename = "object_header")]
    #[cfg_attr(
        feature = "clap",
        arg(long = "object-header", value_enum, default_value_t = Header::default())
    )]
    pub header: Header,
    /// zsmalloc shards per size class, each with its own lock (0 = 16, the most: one per
    /// thread for up to 16 threads, a shard's state made only once a thread uses it; 1 packs
    /// exactly as the kernel). afmalloc's heaps and malloc's handle-table shards: 0 = one
    /// per CPU.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 0))]
    pub shards: usize,
    /// zsmalloc locking: pool (one lock for the whole pool), class (one lock per size
    /// class, the kernel's) or sharded (a lock per class shard, zramd's; `shards` applies
    /// to it alone).
    #[cfg_attr(
        feature = "clap",
        arg(long, value_enum, default_value_t = Locking::default())
    )]
    pub locking: Locking,
    /// Fault every new zspage in at once so that process RSS follows the pages held (with
    /// the cached ones: `page_cache_pages`, and those `fault_ahead` faults in).
    #[cfg_attr(feature = "clap", arg(skip = true))]
    pub populate: bool,
    /// Pages of freed zspages kept resident for immediate reuse (like the kernel's per-cpu
    /// page lists); the rest go back to the OS at once.
    #[cfg_attr(feature = "clap", arg(skip = DEFAULT_PAGE_CACHE_PAGES))]
    pub page_cache_pages: usize,
    /// Fault fresh pages in ahead while the pool grows, on a thread of the pool's own, so
    /// that writers find them resident (with `populate`; at most a quarter of
    /// `page_cache_pages`, reported with the cached pages). On by default;
    /// `--no-fault-ahead` (config key `fault_ahead = false`) turns it off.
    #[cfg_attr(
        feature = "clap",
        arg(long = "no-fault-ahead", action = clap::ArgAction::SetFalse)
    )]
    pub fault_ahead: bool,
}

/// Which locks guard a zsmalloc pool's size classes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Locking {
    /// One lock for the whole pool: every malloc, free, read, write and compaction step of
    /// any class takes it (the consolidation of seed 001, kernels 6.3 to 6.11).
    Pool,
    /// One lock per size class, never sharded (the kernel's per-class locks).
    Class,
    /// A lock per class shard, classes sharded per thread once contended (zramd's).
    #[default]
    Sharded,
}

impl Locking {
    /// Every mode, in the order tests and benches go through them.
    pub const ALL: [Locking; 3] = [Locking::Pool, Locking::Class, Locking::Sharded];

    /// The name config files and command lines use.
    pub fn name(self) -> &'static str {
        match self {
            Locking::Pool => "pool",
            Locking::Class => "class",
            Locking::Sharded => "sharded",
        }
    }
}

impl std::fmt::Display for Locking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Locking {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        Locking::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| format!("unknown locking {s:?} (pool, class or sharded)"))
    }
}

impl PoolConfig {
    /// The layout of seed 000's kernel (6.2): its zspage-length rule and the in-object
    /// handle, for conformance with the seed's tables and like-for-like runs.
    pub fn seed(chain_size: usize) -> Self {
        Self {
            chain_size,
            geometry: Geometry::Seed,
            header: Header::Handle,
            ..Self::default()
        }
    }
}

impl PoolConfig {
    /// The huge-class watermark zsmalloc reports for these settings (its layout:
    /// `chain_size`, `geometry`, `header`): every allocator reports the same, so that
    /// devices store the same streams whatever their allocator.
    pub(crate) fn huge_class_size(&self) -> Result<usize> {
        if !(MIN_CHAIN_SIZE..=MAX_CHAIN_SIZE).contains(&self.chain_size) {
            return Err(Error::InvalidChainSize(self.chain_size));
        }
        Ok(ClassTable::with_layout(self.chain_size, self.geometry, self.header).huge_class_size())
    }

    /// The shards (or heaps) `allocator` makes: `shards`, or `default` for 0, or
    /// `Error::InvalidShards` past `max` (an allocator names at most `max`).
    pub(crate) fn shards_or(
        &self,
        default: impl FnOnce() -> usize,
        max: usize,
        allocator: &'static str,
    ) -> Result<usize> {
        match self.shards {
            0 => Ok(default().clamp(1, max)),
            n if n > max => Err(Error::InvalidShards {
                given: n,
                max,
                allocator,
            }),
            n => Ok(n),
        }
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            allocator: Allocator::Zsmalloc,
            chain_size: DEFAULT_CHAIN_SIZE,
            populate: true,
            page_cache_pages: DEFAULT_PAGE_CACHE_PAGES,
            fault_ahead: true,
            shards: 0,
            locking: Locking::default(),
            geometry: Geometry::default(),
            header: Header::default(),
        }
    }
}

/// CPUs this process may run on (1 where that cannot be told): the default number of
/// afmalloc's heaps and malloc's handle-table shards.
pub(crate) fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
