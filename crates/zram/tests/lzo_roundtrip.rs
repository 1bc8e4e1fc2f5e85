//! LZO round trips: every input comes back byte for byte from both variants, and the
//! compressed size stays within `worst_case_compressed_len`.

use proptest::prelude::*;
use zram::lzo::{Compressor, Variant, compress, decompress, worst_case_compressed_len};

const VARIANTS: [Variant; 2] = [Variant::Lzo, Variant::LzoRle];

fn round_trip(variant: Variant, src: &[u8]) -> Vec<u8> {
    let mut c = Vec::new();
    compress(variant, src, &mut c);
    check(variant, src, &c);
    c
}

fn check(variant: Variant, src: &[u8], c: &[u8]) {
    assert!(
        c.len() <= worst_case_compressed_len(src.len()),
        "{variant:?}: {} bytes compress to {}",
        src.len(),
        c.len()
    );
    let rle = c.len() >= 5 && c[..2] == [17, 1];
    assert_eq!(rle, variant == Variant::LzoRle, "version marker");
    let mut out = vec![0u8; src.len()];
    match decompress(c, &mut out) {
        Ok(n) => {
            assert_eq!(n, src.len(), "{variant:?}: decoded length");
            assert!(out == src, "{variant:?}: decoded bytes differ");
        }
        Err(e) => panic!("{variant:?}: own stream of {} bytes: {e}", src.len()),
    }
}

/// A cheap deterministic generator, so that the fixed tests need no seed plumbing.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Data built from pieces: zero runs, byte runs, random bytes, repeats of earlier
/// data at any distance, and short periodic patterns.
fn piecewise(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        (1usize..3000).prop_map(|n| (0u8, n, 0u64)),
        (1usize..600, any::<u64>()).prop_map(|(n, s)| (1, n, s)),
        (1usize..300, any::<u64>()).prop_map(|(n, s)| (2, n, s)),
        (4usize..2000, any::<u64>()).prop_map(|(n, s)| (3, n, s)),
        (1usize..500, any::<u64>()).prop_map(|(n, s)| (4, n, s)),
    ];
    prop::collection::vec(piece, 0..64).prop_map(move |pieces| {
        let mut v = Vec::new();
        for (kind, n, seed) in pieces {
            let mut rng = XorShift(seed | 1);
            match kind {
                0 => v.resize(v.len() + n, 0),
                1 => v.resize(v.len() + n, seed as u8),
                2 => v.extend(rng.bytes(n)),
                3 if !v.is_empty() => {
                    let from = (seed as usize) % v.len();
                    for i in 0..n {
                        v.push(v[from + i % (v.len() - from)]);
                    }
                }
                _ => {
                    let period = rng.bytes(1 + (seed as usize >> 8) % 12);
                    v.extend(period.iter().cycle().take(n));
                }
            }
            if v.len() >= max_len {
                break;
            }
        }
        v.truncate(max_len);
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn short_random_inputs(src in prop::collection::vec(any::<u8>(), 0..64)) {
        for v in VARIANTS {
            round_trip(v, &src);
        }
    }

    #[test]
    fn short_inputs_of_few_symbols(src in prop::collection::vec(0u8..3, 0..64)) {
        for v in VARIANTS {
            round_trip(v, &src);
        }
    }

    #[test]
    fn random_pages(src in prop::collection::vec(any::<u8>(), 4096)) {
        for v in VARIANTS {
            round_trip(v, &src);
        }
    }

    #[test]
    fn compressible_pages(src in piecewise(4096)) {
        for v in VARIANTS {
            round_trip(v, &src);
        }
    }

    #[test]
    fn reused_compressor_matches_one_off(pages in prop::collection::vec(piecewise(4096), 1..8)) {
        for v in VARIANTS {
            let mut c = Compressor::new(v);
            let mut reused = Vec::new();
            let mut fresh = Vec::new();
            for page in &pages {
                c.compress(page, &mut reused);
                compress(v, page, &mut fresh);
                prop_assert_eq!(&reused, &fresh);
                check(v, page, &reused);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// One compressor going back and forth between inputs searched with the per-input
    /// `u16` table (up to 0xbffe bytes) and longer ones searched with the position-keyed
    /// table writes what a fresh compressor writes.
    #[test]
    fn reused_compressor_across_input_sizes_matches_one_off(
        inputs in prop::collection::vec(piecewise(96 << 10), 1..6)
    ) {
        for v in VARIANTS {
            let mut c = Compressor::new(v);
            let mut reused = Vec::new();
            let mut fresh = Vec::new();
            for input in &inputs {
                for part in [&input[..input.len().min(4096)], &input[..]] {
                    c.compress(part, &mut reused);
                    compress(v, part, &mut fresh);
                    prop_assert_eq!(&reused, &fresh);
                    check(v, part, &reused);
                }
            }
        }
    }

    #[test]
    fn large_compressible_buffers(src in piecewise(128 << 10)) {
        for v in VARIANTS {
            round_trip(v, &src);
        }
    }

    #[test]
    fn large_random_buffers(src in prop::collection::vec(any::<u8>(), 0..(128 << 10))) {
        for v in VARIANTS {
            round_trip(v, &src);
        }
    }
}

#[test]
fn zero_runs_of_every_length() {
    let mut rng = XorShift(0x1234_5678);
    for run in 0..=4200 {
        for lead in [0, 1, 5, 24] {
            let mut src = rng.bytes(lead);
            src.resize(lead + run, 0);
            src.extend(rng.bytes(7));
            for v in VARIANTS {
                round_trip(v, &src);
            }
            // The same run at the very end of the input.
            src.truncate(lead + run);
            for v in VARIANTS {
                round_trip(v, &src);
            }
        }
    }
}

#[test]
fn long_zero_runs_split_into_run_instructions() {
    for run in [
        2051,
        2052,
        2054,
        2055,
        2056,
        4102,
        4103,
        4106,
        10_000,
        128 << 10,
    ] {
        let mut src = b"head".to_vec();
        src.resize(4 + run, 0);
        src.extend_from_slice(b"tail and then some more bytes to be literals");
        let rle = round_trip(Variant::LzoRle, &src);
        let plain = round_trip(Variant::Lzo, &src);
        assert!(rle.len() < 64 + run / 500, "{run}: {}", rle.len());
        assert!(plain.len() < 64 + run / 200, "{run}: {}", plain.len());
    }
}

#[test]
fn every_length_up_to_a_page_of_a_repeating_pattern() {
    let pattern: Vec<u8> = b"zram keeps pages compressed in memory. "
        .iter()
        .copied()
        .cycle()
        .take(4096)
        .collect();
    let mut rng = XorShift(99);
    let noise = rng.bytes(4096);
    for n in 0..=4096 {
        for v in VARIANTS {
            round_trip(v, &pattern[..n]);
            round_trip(v, &noise[..n]);
        }
    }
}

#[test]
fn far_copies_at_every_distance_class() {
    let mut rng = XorShift(7);
    let block = rng.bytes(300);
    for distance in [
        2048, 2049, 3072, 3073, 16384, 16385, 16386, 32767, 32768, 32831, 40000, 0xbffe, 0xbfff,
        0xc000, 60000,
    ] {
        // The block, then zeros up to `distance`, then the block again: the second copy is
        // best found `distance` back.
        let mut src = block.clone();
        src.resize(distance, 0);
        src.extend_from_slice(&block);
        src.extend(rng.bytes(50));
        for v in VARIANTS {
            let c = round_trip(v, &src);
            assert!(c.len() < src.len(), "{v:?} at {distance}: {}", c.len());
        }
    }
}

#[test]
fn version_1_never_writes_a_far_copy_that_reads_as_a_zero_run() {
    // A block repeated at a distance with `distance & 0x803f == 0x803f`, for every length
    // around the reserved 261..=264, and at distance 0xbfff itself.
    let mut rng = XorShift(11);
    for (distance, len) in (258..=267)
        .map(|len| (0x803f, len))
        .chain((258..=267).map(|len| (0xbf3f, len)))
        .chain([(0xbfff, 300)])
    {
        let block = rng.bytes(len);
        let mut src = b"!!!!".to_vec();
        src.extend_from_slice(&block);
        src.push(1);
        src.resize(4 + distance, 0);
        src.extend_from_slice(&block);
        src.push(2);
        src.extend(rng.bytes(40));
        // Our decoder reads such a copy as a zero run, so a wrong stream fails here.
        round_trip(Variant::LzoRle, &src);
        round_trip(Variant::Lzo, &src);
    }
}

#[test]
fn worst_case_patterns_stay_within_the_bound() {
    // Literals and zero runs alternating: each run of four or more literals costs a
    // header byte, and a four-byte zero run saves nothing in lzo-rle (until the matcher
    // starts finding the short repeats around the zeros).
    let mut rng = XorShift(5);
    for (lits, zeros) in [
        (4, 4),
        (4, 5),
        (5, 4),
        (3, 4),
        (18, 4),
        (19, 4),
        (4, 1),
        (1, 1),
    ] {
        let mut src = Vec::new();
        while src.len() < 128 << 10 {
            src.extend(rng.bytes(lits).iter().map(|b| b | 1));
            src.resize(src.len() + zeros, 0);
        }
        for v in VARIANTS {
            for n in [0, 7, 64, 4096, src.len()] {
                round_trip(v, &src[..n]);
            }
        }
    }
}

#[test]
fn short_period_copies_decode_with_and_without_room_past_the_end() {
    // Copies whose distance is below, at and above the decoder's word and double-word
    // sizes, of many lengths, ending mid-buffer (where whole words are copied past their
    // end) and at its very end (where they are not).
    let mut rng = XorShift(3);
    for period in 1..=40 {
        let head = rng.bytes(period);
        for len in [4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100, 300] {
            let mut src = rng.bytes(24);
            src.extend(head.iter().cycle().take(period + len));
            src.extend(rng.bytes(24));
            for v in VARIANTS {
                let c = round_trip(v, &src);
                let mut roomy = vec![0xa5u8; src.len() + 64];
                assert_eq!(decompress(&c, &mut roomy), Ok(src.len()), "{v:?}");
                assert!(
                    roomy[..src.len()] == src[..],
                    "{v:?} period {period} len {len}"
                );
            }
        }
    }
}
