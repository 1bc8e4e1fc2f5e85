//! How a device is set up: one settings struct, nesting the allocator's, read from config
//! files (serde) and command lines (clap, with the `clap` feature) and passed down whole.
//!
//! `disksize` is not a setting in the kernel's sense (writing it initializes the device),
//! so front ends take it on its own (`--size`, a config file's `size`) and it is skipped
//! here by serde and clap.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use zsmalloc::PoolConfig;

use crate::PAGE_SIZE;
use crate::comp::{Algorithm, AlgorithmParams};
use crate::compact::AutoCompact;
use crate::error::{Error, Result};
use crate::policy::Policy;
use crate::size::Size;

/// The device size when none is given: 1 GiB.
pub const DEFAULT_DISKSIZE: Size = Size(1 << 30);
/// The smallest compression unit: one page (the kernel's model).
pub const MIN_UNIT_SIZE: usize = PAGE_SIZE;
/// The largest compression unit.
pub const MAX_UNIT_SIZE: usize = 128 * 1024;
pub use crate::slot::MAX_PRIORITY;
/// Slots written back per append when none is said (the kernel's `writeback_batch_size`).
pub const DEFAULT_WRITEBACK_BATCH: u32 = 32;

/// A secondary algorithm for recompression (the kernel's `recomp_algorithm`): written as
/// the kernel takes it, `algo=zstd priority=1`, with `level=N` beyond the kernel (the
/// kernel sets it through `algorithm_params priority=N level=N`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecompAlgorithm {
    /// 1..=3; recompression names the algorithm by it.
    pub priority: u8,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Its parameters.
    #[serde(flatten)]
    pub params: AlgorithmParams,
}

impl std::str::FromStr for RecompAlgorithm {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidArgument(s.to_owned());
        let (mut algorithm, mut priority, mut level) = (None, None, None);
        for kv in s.split_whitespace() {
            let (k, v) = kv.split_once('=').ok_or_else(bad)?;
            match k {
                "algo" => algorithm = Some(v.parse::<Algorithm>()?),
                "priority" => priority = Some(v.parse::<u8>().map_err(|_| bad())?),
                "level" => level = Some(v.parse::<i32>().map_err(|_| bad())?),
                _ => return Err(bad()),
            }
        }
        let r = Self {
            priority: priority.ok_or_else(bad)?,
            algorithm: algorithm.ok_or_else(bad)?,
            params: AlgorithmParams {
                level,
                dictionary: None,
            },
        };
        r.check()?;
        Ok(r)
    }
}

impl RecompAlgorithm {
    /// Refuses a priority outside 1..=3, and parameters its algorithm cannot take.
    pub fn check(&self) -> Result<()> {
        if !(1..=MAX_PRIORITY).contains(&self.priority) {
            return Err(Error::InvalidArgument(format!(
                "priority {} (secondary algorithms take 1..={MAX_PRIORITY})",
                self.priority
            )));
        }
        self.params.check(self.algorithm)
    }
}

impl std::fmt::Display for RecompAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "algo={} priority={}", self.algorithm, self.priority)?;
        if let Some(level) = self.params.level {
            write!(f, " level={level}")?;
        }
        Ok(())
    }
}

/// How a device is set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct ZramConfig {
    /// Size in bytes (rounded up to whole pages).
    #[serde(skip)]
    #[cfg_attr(feature = "clap", arg(skip = DEFAULT_DISKSIZE.bytes()))]
    pub disksize: u64,
    /// Compression algorithm: lz4, lz4hc, zstd, lzo, lzo-rle.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Algorithm::Lz4))]
    pub algorithm: Algorithm,
    /// The algorithm's parameters.
    #[serde(flatten)]
    #[cfg_attr(feature = "clap", command(flatten))]
    pub params: AlgorithmParams,
    /// Memory limit (K/M/G suffixes; 0 = none).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Size(0)))]
    pub mem_limit: Size,
    /// Bytes compressed as one stream: 4K (the kernel's page at a time) up to 128K, a power
    /// of two. Larger units compress better; reading part of one decompresses all of it
    /// (beyond the kernel).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = Size(MIN_UNIT_SIZE as u64)))]
    pub unit_size: Size,
    /// Secondary algorithms for recompression, each `algo=NAME priority=N [level=N]`
    /// (repeat for up to three).
    #[cfg_attr(
        feature = "clap",
        arg(long = "recomp-algorithm", value_name = "algo=NAME priority=N")
    )]
    pub recomp_algorithm: Vec<RecompAlgorithm>,
    /// Backing file for writeback: a regular file (beyond the kernel) or a block device. Its
    /// contents are discarded when the device starts.
    #[cfg_attr(feature = "clap", arg(long))]
    pub backing_dev: Option<PathBuf>,
    /// Slots gathered into one write to the backing file (the kernel's
    /// `writeback_batch_size`: I/O in flight).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = DEFAULT_WRITEBACK_BATCH))]
    pub writeback_batch_size: u32,
    /// Reading a written-back slot brings the neighbouring written-back slots of its file
    /// extent into a small read-back cache (beyond the kernel).
    #[cfg_attr(feature = "clap", arg(long, default_value_t = true, action = clap::ArgAction::Set))]
    pub readback_readahead: bool,
    /// Inline deduplication (beyond the kernel and seed 004; off by default): a write whose
    /// compressed bytes equal those of an object already stored shares that object instead
    /// of storing them again.
    #[cfg_attr(feature = "clap", arg(long))]
    pub dedup: bool,
    /// Automatic recompression and writeback (beyond the kernel; off by default): a
    /// `[device.policy]` table in config files, the `policy` attribute at run time.
    #[cfg_attr(feature = "clap", arg(skip))]
    pub policy: Policy,
    /// Background compaction (beyond the kernel); `None` turns it off.
    #[serde(skip)]
    #[cfg_attr(feature = "clap", arg(skip = Some(AutoCompact::default())))]
    pub auto_compact: Option<AutoCompact>,
    /// The allocator's settings (chain size, zspage geometry, object header, shards).
    #[serde(flatten)]
    #[cfg_attr(feature = "clap", command(flatten))]
    pub pool: PoolConfig,
}

impl Default for ZramConfig {
    fn default() -> Self {
        Self {
            disksize: DEFAULT_DISKSIZE.bytes(),
            algorithm: Algorithm::Lz4,
            params: AlgorithmParams::default(),
            mem_limit: Size(0),
            unit_size: Size(MIN_UNIT_SIZE as u64),
            recomp_algorithm: Vec::new(),
            backing_dev: None,
            writeback_batch_size: DEFAULT_WRITEBACK_BATCH,
            readback_readahead: true,
            dedup: false,
            policy: Policy::default(),
            auto_compact: Some(AutoCompact::default()),
            pool: PoolConfig::default(),
        }
    }
}

impl ZramConfig {
    /// Refuses settings that cannot work together: recompression priorities out of range or
    /// repeated, a zero writeback batch.
    pub fn check_post_processing(&self) -> Result<()> {
        let mut seen = [false; MAX_PRIORITY as usize + 1];
        for r in &self.recomp_algorithm {
            r.check()?;
            if std::mem::replace(&mut seen[usize::from(r.priority)], true) {
                return Err(Error::InvalidArgument(format!(
                    "priority {} is given twice",
                    r.priority
                )));
            }
        }
        if self.writeback_batch_size == 0 {
            return Err(Error::InvalidArgument("writeback_batch_size 0".into()));
        }
        Ok(())
    }
}

impl ZramConfig {
    /// Refuses `dedup` on an allocator that cannot share objects (only zsmalloc can).
    pub fn check_allocator(&self) -> Result<()> {
        if self.dedup && self.pool.allocator != zsmalloc::Allocator::Zsmalloc {
            return Err(Error::InvalidArgument(format!(
                "dedup needs the zsmalloc allocator (objects shared by several slots), not {}",
                self.pool.allocator
            )));
        }
        Ok(())
    }
}

/// Refuses a `unit_size` that is not a power of two from 4 KiB to 128 KiB.
pub fn check_unit_size(bytes: u64) -> Result<usize> {
    match usize::try_from(bytes) {
        Ok(n) if n.is_power_of_two() && (MIN_UNIT_SIZE..=MAX_UNIT_SIZE).contains(&n) => Ok(n),
        _ => Err(Error::InvalidUnitSize(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_sizes_are_checked() {
        for ok in [4096, 8192, 32768, 65536, 131072] {
            assert_eq!(check_unit_size(ok).unwrap(), ok as usize);
        }
        for bad in [0, 1, 2048, 4095, 12288, 262144, u64::MAX] {
            assert!(check_unit_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn settings_read_from_text_with_one_default() {
        let c: ZramConfig = toml::from_str(
            "algorithm = \"zstd\"\nlevel = 7\nmem_limit = \"64M\"\nunit_size = \"32K\"\n\
             chain_size = 16\nobject_header = \"handle\"\n",
        )
        .unwrap();
        assert_eq!(c.algorithm, Algorithm::Zstd);
        assert_eq!(c.params.level, Some(7));
        assert_eq!(c.mem_limit, Size(64 << 20));
        assert_eq!(c.unit_size, Size(32 << 10));
        assert_eq!(c.pool.chain_size, 16);
        assert_eq!(c.pool.header, zsmalloc::class::Header::Handle);
        // What the text does not say is the default, the same as the library's.
        let empty: ZramConfig = toml::from_str("").unwrap();
        assert_eq!(empty, ZramConfig::default());
        assert!(empty.auto_compact.is_some());
        assert!(empty.pool.populate);
    }
}
