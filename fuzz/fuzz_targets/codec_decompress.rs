//! Every device decompressor (lz4, lz4hc, zstd, lzo, lzo-rle; those that take one, also with
//! a dictionary) on arbitrary bytes into a page, as a read of a corrupt slot would feed
//! them; then a round trip of the bytes as a page.
//!
//! Run: `cargo +nightly fuzz run codec_decompress` from `fuzz/`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use zram::comp::{Algorithm, AlgorithmParams, new_codec};

fuzz_target!(|data: &[u8]| {
    let mut page = vec![0u8; 4096];
    let dict: std::sync::Arc<Vec<u8>> = std::sync::Arc::new(
        (0..8192u32)
            .map(|i| b"zram stores pages compressed; "[i as usize % 30] ^ (i / 97) as u8)
            .collect(),
    );
    let with_dict = Algorithm::ALL
        .into_iter()
        .filter(|a| a.takes_dictionary())
        .map(|a| {
            let params = AlgorithmParams {
                level: None,
                dictionary: Some(dict.clone()),
            };
            (a, params)
        });
    let plain = Algorithm::ALL
        .into_iter()
        .map(|a| (a, AlgorithmParams::default()));
    for (alg, params) in plain.chain(with_dict) {
        let Ok(mut codec) = new_codec(alg, &params) else {
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
