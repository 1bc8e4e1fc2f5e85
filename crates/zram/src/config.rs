//! How a device is set up: one settings struct, nesting the allocator's, read from config
//! files (serde) and command lines (clap, with the `clap` feature) and passed down whole.
//!
//! `disksize` is not a setting in the kernel's sense (writing it initializes the device),
//! so front ends take it on its own (`--size`, a config file's `size`) and it is skipped
//! here by serde and clap.

use serde::{Deserialize, Serialize};
use zsmalloc::PoolConfig;

use crate::PAGE_SIZE;
use crate::comp::{Algorithm, AlgorithmParams};
use crate::compact::AutoCompact;
use crate::error::{Error, Result};
use crate::size::Size;

/// The device size when none is given: 1 GiB.
pub const DEFAULT_DISKSIZE: Size = Size(1 << 30);
/// The smallest compression unit: one page (the kernel's model).
pub const MIN_UNIT_SIZE: usize = PAGE_SIZE;
/// The largest compression unit.
pub const MAX_UNIT_SIZE: usize = 128 * 1024;

/// How a device is set up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct ZramConfig {
    /// Size in bytes (rounded up to whole pages).
    #[serde(skip)]
    #[cfg_attr(feature = "clap", arg(skip = DEFAULT_DISKSIZE.bytes()))]
    pub disksize: u64,
    /// Compression algorithm: lz4, zstd, lzo, lzo-rle.
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
            auto_compact: Some(AutoCompact::default()),
            pool: PoolConfig::default(),
        }
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
