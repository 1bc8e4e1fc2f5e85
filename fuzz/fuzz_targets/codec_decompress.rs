//! Every device decompressor (lz4, zstd, lzo, lzo-rle) on arbitrary bytes into a page, as a
//! read of a corrupt slot would feed them; then a round trip of the bytes as a page.
//!
//! Run: `cargo +nightly fuzz run codec_decompress` from `fuzz/`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use zram::comp::{Algorithm, AlgorithmParams, new_codec};

fuzz_target!(|data: &[u8]| {
    let mut page = vec![0u8; 4096];
    for alg in Algorithm::ALL {
        let Ok(mut codec) = new_codec(alg, &AlgorithmParams::default()) else {
            return;
        };
        let _ = codec.decompress(data, &mut page);
        if data.len() <= 4096 {
            let mut src = data.to_vec();
            src.resize(4096, 0);
            let mut packed = Vec::new();
            if codec.compress(&src, &mut packed).is_ok() {
                let mut back = vec![0u8; 4096];
                assert!(codec.decompress(&packed, &mut back).is_ok(), "{alg}");
                assert_eq!(back, src, "{alg}");
            }
        }
    }
});
