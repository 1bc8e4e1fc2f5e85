//! The LZO decoder on bad input: truncated, corrupted, overlong and arbitrary streams give
//! an error (or some output that fits), never a panic or an out-of-bounds access.

use proptest::prelude::*;
use zram::lzo::{DecodeError, Variant, compress, decompress};

const VARIANTS: [Variant; 2] = [Variant::Lzo, Variant::LzoRle];

/// Inputs that exercise every instruction kind: literals of all run lengths, near, mid and
/// far copies, and zero runs.
fn samples() -> Vec<Vec<u8>> {
    let text: Vec<u8> = b"The zram module creates RAM based block devices named /dev/zram<id>. "
        .iter()
        .copied()
        .cycle()
        .take(3000)
        .collect();
    let mut mixed = Vec::new();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..40usize {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        mixed.extend((0..(i * 37) % 300).map(|j| (x >> (j % 56)) as u8));
        mixed.resize(mixed.len() + (i * 53) % 700, 0);
        mixed.extend_from_slice(&text[..(i * 91) % 400]);
    }
    let mut far = mixed[..600].to_vec();
    far.resize(40_000, 0);
    far.extend_from_slice(&mixed[..600]);
    vec![
        Vec::new(),
        b"a".to_vec(),
        b"abcdefgh".to_vec(),
        text[..100].to_vec(),
        text,
        mixed,
        vec![0; 4096],
        far,
    ]
}

#[test]
fn every_truncation_is_rejected() {
    for src in samples() {
        for v in VARIANTS {
            let mut c = Vec::new();
            compress(v, &src, &mut c);
            let mut out = vec![0u8; src.len()];
            for cut in 0..c.len() {
                let r = decompress(&c[..cut], &mut out);
                // A version-1 prefix shorter than five bytes is read as a version-0 stream
                // (the marker needs five bytes); it may then be a complete empty stream.
                if cut >= 5 || v == Variant::Lzo {
                    assert!(r.is_err(), "{v:?}: {cut}/{} bytes decoded: {r:?}", c.len());
                } else {
                    assert_ne!(r, Ok(src.len()), "{v:?}: {cut}-byte prefix");
                }
            }
        }
    }
}

#[test]
fn trailing_bytes_and_small_outputs_are_rejected() {
    for src in samples() {
        for v in VARIANTS {
            let mut c = Vec::new();
            compress(v, &src, &mut c);
            let mut out = vec![0u8; src.len() + 10];
            assert_eq!(decompress(&c, &mut out), Ok(src.len()));
            assert_eq!(&out[..src.len()], &src[..]);

            let mut longer = c.clone();
            longer.push(0);
            assert_eq!(
                decompress(&longer, &mut out),
                Err(DecodeError::TrailingGarbage { extra: 1 })
            );

            if !src.is_empty() {
                let mut small = vec![0u8; src.len() - 1];
                assert!(
                    matches!(
                        decompress(&c, &mut small),
                        Err(DecodeError::OutputOverrun { .. })
                    ),
                    "{v:?}: {} bytes into {}",
                    src.len(),
                    small.len()
                );
            }
        }
    }
}

#[test]
fn specific_errors() {
    let mut out = [0u8; 64];
    // One literal, then a near copy from two bytes back.
    assert_eq!(
        decompress(&[18, b'x', 0x40 | (1 << 2), 0, 0x11, 0, 0], &mut out),
        Err(DecodeError::LookBehind {
            at: 2,
            distance: 2,
            written: 1
        })
    );
    // Four literals and nothing else.
    assert_eq!(
        decompress(&[1, 1, 2, 3, 4], &mut out),
        Err(DecodeError::MissingEndMarker)
    );
    assert_eq!(
        decompress(&[17, 2, 0x11, 0, 0], &mut out),
        Err(DecodeError::UnsupportedVersion(2))
    );
    // An explicit version 0 marker is accepted.
    assert_eq!(decompress(&[17, 0, 0x11, 0, 0], &mut out), Ok(0));
    // A zero run is only a zero run in version 1: in version 0 it is a far copy.
    let run = [21, 1, 2, 3, 4, 0x18 | 3, 0xfc, 0xff, 2, 0x11, 0, 0];
    assert!(matches!(
        decompress(&run, &mut out),
        Err(DecodeError::LookBehind { .. })
    ));
    let mut v1 = vec![17, 1];
    v1.extend_from_slice(&run);
    // Version 1: four literals, then (2 << 3 | 3) + 4 = 23 zeros.
    assert_eq!(decompress(&v1, &mut out), Ok(27));
    assert_eq!(&out[..4], &[1, 2, 3, 4]);
    assert!(out[4..27].iter().all(|&b| b == 0));
    // A zero run missing its length byte.
    assert_eq!(
        decompress(&v1[..9], &mut out),
        Err(DecodeError::InputTruncated { at: 7 })
    );
    // Literal counts in the low bits of a zero run's distance.
    let v1 = [17, 1, 21, 1, 2, 3, 4, 0x18, 0xfd, 0xff, 0, 9, 0x11, 0, 0];
    assert_eq!(decompress(&v1, &mut out), Ok(9));
    assert_eq!(&out[..9], &[1, 2, 3, 4, 0, 0, 0, 0, 9]);
}

#[test]
fn long_extension_runs_do_not_overflow() {
    // A literal run whose length field is followed by a megabyte of zero bytes.
    let mut c = vec![0u8; 1 << 20];
    c.push(1);
    let mut out = vec![0u8; 4096];
    assert!(decompress(&c, &mut out).is_err());
    c.truncate(1 << 20);
    assert!(matches!(
        decompress(&c, &mut out),
        Err(DecodeError::InputTruncated { at: 0 })
    ));
    // A mid copy whose extended length is far beyond the output.
    let mut c = vec![21, 1, 2, 3, 4, 0x20];
    c.extend_from_slice(&[0; 1000]);
    c.extend_from_slice(&[7, 0, 0, 0x11, 0, 0]);
    assert!(matches!(
        decompress(&c, &mut out),
        Err(DecodeError::OutputOverrun { at: 5, .. })
    ));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic(
        data in prop::collection::vec(any::<u8>(), 0..600),
        cap in 0usize..5000,
        v1 in any::<bool>(),
    ) {
        let mut input = if v1 { vec![17, 1] } else { Vec::new() };
        input.extend_from_slice(&data);
        let mut out = vec![0u8; cap];
        if let Ok(n) = decompress(&input, &mut out) {
            prop_assert!(n <= cap);
        }
    }

    #[test]
    fn corrupted_streams_never_panic(
        pick in 0usize..8,
        v1 in any::<bool>(),
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6),
        extra in 0usize..64,
    ) {
        let src = &samples()[pick];
        let mut c = Vec::new();
        compress(if v1 { Variant::LzoRle } else { Variant::Lzo }, src, &mut c);
        for (at, byte) in edits {
            let i = at.index(c.len());
            c[i] = byte;
        }
        let mut out = vec![0u8; src.len() + extra];
        if let Ok(n) = decompress(&c, &mut out) {
            prop_assert!(n <= out.len());
        }
    }
}
