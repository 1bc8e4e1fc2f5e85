//! The fuzz targets' property, run on a bounded set of random and mutated inputs in the
//! normal suite: every decompressor rejects garbage with an error (never a panic), and
//! every page round-trips.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use zram::comp::{Algorithm, AlgorithmParams, new_codec};

#[test]
fn decoders_survive_random_and_mutated_input() {
    let mut rng = SmallRng::seed_from_u64(0x5eed);
    let text: Vec<u8> = b"the kernel keeps memory compressed with zram; "
        .iter()
        .cycle()
        .take(4096)
        .copied()
        .collect();
    let mut out = vec![0u8; 4096];
    for alg in Algorithm::ALL {
        let mut codec = new_codec(alg, &AlgorithmParams::default()).unwrap();
        let mut valid = Vec::new();
        codec.compress(&text, &mut valid).unwrap();
        codec.decompress(&valid, &mut out).unwrap();
        assert_eq!(out, text, "{alg}");
        let mut rejected = 0;
        for round in 0..3000 {
            let input: Vec<u8> = if round % 2 == 0 {
                let len = rng.gen_range(0..600);
                (0..len).map(|_| rng.r#gen()).collect()
            } else {
                let mut m = valid.clone();
                for _ in 0..rng.gen_range(1..4) {
                    let i = rng.gen_range(0..m.len());
                    m[i] ^= 1 << rng.gen_range(0..8);
                }
                if rng.gen_bool(0.3) {
                    m.truncate(rng.gen_range(0..m.len()));
                }
                m
            };
            if codec.decompress(&input, &mut out).is_err() {
                rejected += 1;
            }
        }
        assert!(
            rejected > 1000,
            "{alg}: only {rejected} of 3000 bad inputs rejected"
        );
    }
}
