//! The NBD parsers on a few thousand random and mutated inputs: the same entry point the
//! fuzz target (`fuzz/fuzz_targets/nbd_parse.rs`) drives, bounded so it runs in the normal
//! test suite without cargo-fuzz.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use zramd::nbd::proto::*;
use zramd::nbd::rules::exercise_parsers;

/// Well-formed messages to mutate.
fn seeds() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for kind in 0..9u16 {
        for flags in [
            0,
            CMD_FLAG_FUA,
            CMD_FLAG_DF,
            CMD_FLAG_REQ_ONE,
            CMD_FLAG_NO_HOLE | CMD_FLAG_FAST_ZERO,
        ] {
            let r = Request {
                flags,
                kind,
                handle: 7,
                offset: 4096 * u64::from(kind),
                length: 65536,
            };
            let mut b = r.encode().to_vec();
            // Limits bytes after the header: size, max request, flags.
            b.extend_from_slice(&[0, 0, 1, 0, 0, 16, 0, 7]);
            out.push(b);
        }
    }
    let mut info = Vec::new();
    info.push(0); // exercise_parsers parses option bodies from offset 1
    info.extend_from_slice(&5u32.to_be_bytes());
    info.extend_from_slice(b"zram0");
    info.extend_from_slice(&2u16.to_be_bytes());
    info.extend_from_slice(&INFO_NAME.to_be_bytes());
    info.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    out.push(info);
    let mut meta = vec![0];
    meta.extend_from_slice(&0u32.to_be_bytes());
    meta.extend_from_slice(&2u32.to_be_bytes());
    for q in ["base:allocation", "base:"] {
        meta.extend_from_slice(&(q.len() as u32).to_be_bytes());
        meta.extend_from_slice(q.as_bytes());
    }
    out.push(meta);
    let mut opt = IHAVEOPT.to_be_bytes().to_vec();
    opt.extend_from_slice(&OPT_GO.to_be_bytes());
    opt.extend_from_slice(&11u32.to_be_bytes());
    out.push(opt);
    out.push(3u32.to_be_bytes().to_vec());
    out
}

#[test]
fn parsers_survive_random_and_mutated_input() {
    let mut rng = SmallRng::seed_from_u64(0x6e62_6421);
    let seeds = seeds();
    for seed in &seeds {
        exercise_parsers(seed);
    }
    for i in 0..6000 {
        let input: Vec<u8> = if i % 3 == 0 {
            let len = rng.gen_range(0..96);
            (0..len).map(|_| rng.r#gen()).collect()
        } else {
            let mut b = seeds[rng.gen_range(0..seeds.len())].clone();
            for _ in 0..rng.gen_range(1..6) {
                match rng.gen_range(0..4) {
                    0 if !b.is_empty() => {
                        let at = rng.gen_range(0..b.len());
                        b[at] = rng.r#gen();
                    }
                    1 if !b.is_empty() => {
                        let at = rng.gen_range(0..b.len());
                        b[at] ^= 1 << rng.gen_range(0..8);
                    }
                    2 => b.truncate(rng.gen_range(0..=b.len())),
                    _ => b.push(rng.r#gen()),
                }
            }
            b
        };
        exercise_parsers(&input);
    }
}
