//! LZ4 through C liblz4, no size prefix (the kernel's zram stores raw LZ4 blocks too): `lz4`
//! with `LZ4_compress_fast`, whose acceleration is the level (the kernel's backend passes
//! its level there), and `lz4hc`, the high-compression encoder, whose blocks read back the
//! same way (`LZ4_decompress_safe`). Either takes a dictionary (`algorithm_params dict=`,
//! as the kernel's backends do; its last 64 KiB count), which reading back needs too.

use std::ops::RangeInclusive;

use lz4::block::CompressionMode;

use super::{Algorithm, AlgorithmParams, Codec};
use crate::error::{Error, Result};
use crate::sys::lz4::{Dict, DictState, HcState};

/// lz4's accelerations (`LZ4_ACCELERATION_MAX`; 1, the default, is `LZ4_compress_default`).
pub(super) const ACCELERATIONS: RangeInclusive<i32> = 1..=65537;
/// lz4hc's levels (`LZ4HC_CLEVEL_MAX`).
pub(super) const HC_LEVELS: RangeInclusive<i32> = 1..=12;
/// lz4hc's default level, the kernel's (`LZ4HC_DEFAULT_CLEVEL`).
const HC_DEFAULT_LEVEL: i32 = 9;

#[derive(Debug)]
pub(super) struct Lz4 {
    acceleration: i32,
    dict: Option<(Dict, DictState)>,
}

impl Lz4 {
    /// A context at the level's acceleration (checked by the caller), with the dictionary.
    pub(super) fn new(params: &AlgorithmParams) -> Result<Self> {
        let dict = match &params.dictionary {
            Some(bytes) => Some((
                Dict::load(bytes.clone(), None).ok_or_else(|| setup("lz4", "the dictionary"))?,
                DictState::new().ok_or_else(|| setup("lz4", "its state"))?,
            )),
            None => None,
        };
        Ok(Self {
            acceleration: params.level.unwrap_or(1),
            dict,
        })
    }
}

/// liblz4 refused to set `what` up.
fn setup(algorithm: &'static str, what: &str) -> Error {
    Error::CodecSetup {
        algorithm,
        reason: format!("liblz4 refused {what}"),
    }
}

impl Codec for Lz4 {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Lz4
    }

    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) -> Result<usize> {
        let bound = lz4::block::compress_bound(src.len()).map_err(|e| compress_error("lz4", e))?;
        dst.clear();
        dst.resize(bound, 0);
        let n = match &mut self.dict {
            Some((dict, state)) => state
                .compress(dict, src, dst, self.acceleration)
                .ok_or_else(|| failed("lz4"))?,
            None => {
                let mode = Some(CompressionMode::FAST(self.acceleration));
                lz4::block::compress_to_buffer(src, mode, false, dst)
                    .map_err(|e| compress_error("lz4", e))?
            }
        };
        dst.truncate(n);
        Ok(n)
    }

    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        decompress(self.dict.as_ref().map(|(d, _)| d), src, dst)
    }
}

#[derive(Debug)]
pub(super) struct Lz4Hc {
    state: HcState,
    level: i32,
    dict: Option<Dict>,
}

impl Lz4Hc {
    /// A context at the level (checked by the caller), with its state and the dictionary.
    pub(super) fn new(params: &AlgorithmParams) -> Result<Self> {
        let level = params.level.unwrap_or(HC_DEFAULT_LEVEL);
        let dict = match &params.dictionary {
            Some(bytes) => Some(
                Dict::load(bytes.clone(), Some(level))
                    .ok_or_else(|| setup("lz4hc", "the dictionary"))?,
            ),
            None => None,
        };
        Ok(Self {
            state: HcState::new().ok_or_else(|| setup("lz4hc", "its state"))?,
            level,
            dict,
        })
    }
}

impl Codec for Lz4Hc {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Lz4Hc
    }

    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) -> Result<usize> {
        let bound =
            lz4::block::compress_bound(src.len()).map_err(|e| compress_error("lz4hc", e))?;
        dst.clear();
        dst.resize(bound, 0);
        let n = self
            .state
            .compress(self.dict.as_ref(), src, dst, self.level)
            .ok_or_else(|| failed("lz4hc"))?;
        dst.truncate(n);
        Ok(n)
    }

    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        decompress(self.dict.as_ref(), src, dst)
    }
}

/// Decodes one raw LZ4 block (compressed with `dict`, if given), which must fill `dst`
/// exactly.
fn decompress(dict: Option<&Dict>, src: &[u8], dst: &mut [u8]) -> Result<()> {
    let want =
        i32::try_from(dst.len()).map_err(|_| Error::Corrupt("lz4: output too large".into()))?;
    let decoded = match dict {
        Some(dict) => dict
            .decompress(src, dst)
            .ok_or_else(|| "a corrupt block".to_owned()),
        None => lz4::block::decompress_to_buffer(src, Some(want), dst).map_err(|e| e.to_string()),
    };
    match decoded {
        Ok(n) if n == dst.len() => Ok(()),
        Ok(n) => Err(Error::Corrupt(format!(
            "lz4: {n} bytes decoded, {} expected",
            dst.len()
        ))),
        Err(e) => Err(Error::Corrupt(format!("lz4: {e}"))),
    }
}

/// A compression the library gave up on (a block larger than the bound: never expected).
fn failed(algorithm: &'static str) -> Error {
    compress_error(algorithm, std::io::Error::other("compression failed"))
}

fn compress_error(algorithm: &'static str, e: std::io::Error) -> Error {
    Error::Compress {
        algorithm,
        reason: e.to_string(),
    }
}
