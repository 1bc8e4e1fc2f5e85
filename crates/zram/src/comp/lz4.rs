//! LZ4 through C liblz4: `LZ4_compress_default` and `LZ4_decompress_safe`, no size prefix
//! (the kernel's zram stores raw LZ4 blocks too).

use super::{Algorithm, Codec};
use crate::error::{Error, Result};

#[derive(Debug, Default)]
pub(super) struct Lz4;

impl Codec for Lz4 {
    fn algorithm(&self) -> Algorithm {
        Algorithm::Lz4
    }

    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) -> Result<usize> {
        let bound = lz4::block::compress_bound(src.len()).map_err(compress_error)?;
        dst.clear();
        dst.resize(bound, 0);
        let n = lz4::block::compress_to_buffer(src, None, false, dst).map_err(compress_error)?;
        dst.truncate(n);
        Ok(n)
    }

    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        let want =
            i32::try_from(dst.len()).map_err(|_| Error::Corrupt("lz4: output too large".into()))?;
        match lz4::block::decompress_to_buffer(src, Some(want), dst) {
            Ok(n) if n == dst.len() => Ok(()),
            Ok(n) => Err(Error::Corrupt(format!(
                "lz4: {n} bytes decoded, {} expected",
                dst.len()
            ))),
            Err(e) => Err(Error::Corrupt(format!("lz4: {e}"))),
        }
    }
}

fn compress_error(e: std::io::Error) -> Error {
    Error::Compress {
        algorithm: "lz4",
        reason: e.to_string(),
    }
}
