//! LZO1X-1 and LZO-RLE through our clean-room [`crate::lzo`] module.

use super::{Algorithm, Codec};
use crate::error::{Error, Result};
use crate::lzo::{Compressor, Variant};

#[derive(Debug)]
pub(super) struct Lzo {
    compressor: Compressor,
}

impl Lzo {
    pub(super) fn new(variant: Variant) -> Self {
        Self {
            compressor: Compressor::new(variant),
        }
    }
}

impl Codec for Lzo {
    fn algorithm(&self) -> Algorithm {
        match self.compressor.variant() {
            Variant::Lzo => Algorithm::Lzo,
            Variant::LzoRle => Algorithm::LzoRle,
        }
    }

    fn compress(&mut self, src: &[u8], dst: &mut Vec<u8>) -> Result<usize> {
        self.compressor.compress(src, dst);
        Ok(dst.len())
    }

    fn decompress(&mut self, src: &[u8], dst: &mut [u8]) -> Result<()> {
        match crate::lzo::decompress(src, dst) {
            Ok(n) if n == dst.len() => Ok(()),
            Ok(n) => Err(Error::Corrupt(format!(
                "lzo: {n} bytes decoded, {} expected",
                dst.len()
            ))),
            Err(e) => Err(Error::Corrupt(format!("lzo: {e}"))),
        }
    }
}
