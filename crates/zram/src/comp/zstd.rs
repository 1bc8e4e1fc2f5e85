//! Zstandard through C libzstd, with a level and an optional dictionary.

use super::{Algorithm, AlgorithmParams, Codec};
use crate::error::{Error, Result};

/// The kernel zram's default zstd level.
pub(super) const DEFAULT_LEVEL: i32 = 3;

/// The levels libzstd takes (`ZSTD_minCLevel()..=ZSTD_maxCLevel()`; 0 is its default,
/// negative ones trade ratio for speed).
pub(super) const LEVELS: std::ops::RangeInclusive<i32> = -(1 << 17)..=22;

pub(super) struct Zstd {
    compressor: zstd::bulk::Compressor<'static>,
    decompressor: zstd::bulk::Decompressor<'static>,
}

impl std::fmt::Debug for Zstd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Zstd").finish_non_exhaustive()
    }
}

impl Zstd {
    pub(super) fn new(params: &AlgorithmParams) -> Result<Self> {
        let level = params.level.unwrap_or(DEFAULT_LEVEL);
        let setup = |e: std::io::Error| Error::CodecSetup {
            algorithm: "zstd",
            reason: e.to_string(),
        };
        let (compressor, decompressor) = match &params.dictionary {
            Some(dict) => (
                zstd::bulk::Compressor::with_dictionary(level, dict).map_err(setup)?,
                zstd::bulk::Decompressor::with_dictionary(dict).map_err(setup)?,
            ),
            None => (
                zstd::bulk::Compressor::new(level).map_err(setup)?,
                zstd::bulk::Decompressor::new().map_err(setup)?,
            ),
        };
        Ok(Self {
            compressor,
            decompressor,
        })
    }
}

impl Codec for Zstd {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Zstd
    }

    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) -> Result<usize> {
        dst.clear();
        dst.reserve(zstd::zstd_safe::compress_bound(src.len()));
        self.compressor
            .compress_to_buffer(src, dst)
            .map_err(|e| Error::Compress {
                algorithm: "zstd",
                reason: e.to_string(),
            })
    }

    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        match self.decompressor.decompress_to_buffer(src, dst) {
            Ok(n) if n == dst.len() => Ok(()),
            Ok(n) => Err(Error::Corrupt(format!(
                "zstd: {n} bytes decoded, {} expected",
                dst.len()
            ))),
            Err(e) => Err(Error::Corrupt(format!("zstd: {e}"))),
        }
    }
}
