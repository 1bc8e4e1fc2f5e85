//! The LZO decoder on arbitrary bytes, as a plain (`lzo`) stream and behind an `lzo-rle`
//! version marker, into output buffers of several sizes; then the same bytes round-tripped
//! through both encoders.
//!
//! Run: `cargo +nightly fuzz run lzo_decompress` from `fuzz/`.

#![no_main]

use libfuzzer_sys::fuzz_target;
use zram::lzo::{Compressor, Variant, decompress, worst_case_compressed_len};

fuzz_target!(|data: &[u8]| {
    // Arbitrary input to the decoder: no panic, and any success fits the buffer.
    let mut out = vec![0u8; 4096 * 4];
    let mut v1 = vec![17, 1];
    v1.extend_from_slice(data);
    for input in [data, &v1[..]] {
        for cap in [0, 1, 4096, out.len()] {
            if let Ok(n) = decompress(input, &mut out[..cap]) {
                assert!(n <= cap);
            }
        }
    }

    // Round trip through both variants.
    let mut c = Vec::new();
    let mut back = vec![0u8; data.len()];
    for variant in [Variant::Lzo, Variant::LzoRle] {
        Compressor::new(variant).compress(data, &mut c);
        assert!(c.len() <= worst_case_compressed_len(data.len()));
        let n = decompress(&c, &mut back).expect("decode our own stream");
        assert_eq!(n, data.len());
        assert!(back == data, "{variant:?}: round trip differs");
    }
});
