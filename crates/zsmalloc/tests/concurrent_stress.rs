//! Plain-thread stress: worker threads malloc/write/read/free their own objects and read a
//! shared set of objects while another thread compacts in a loop; every read must return
//! exactly what was written, and the pool's identities must hold at the end. In the seed
//! kernel's layout (`PoolConfig::seed`: the handle in every object) and in the zram
//! device's (the default: no header, min-waste zspage lengths).

#[path = "common/pool.rs"]
mod pool;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use pool::pool;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use zsmalloc::{Handle, Locking, Pool, PoolConfig};

const WORKERS: u64 = 3;
const ITERATIONS: usize = 600_000;

/// Contents derived from the handle and a version, so any mix-up shows.
fn contents(h: Handle, version: u64, len: usize) -> Vec<u8> {
    let mut x = (h.to_raw() ^ version.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn check(pool: &Pool, h: Handle, want: &[u8]) {
    let mut got = vec![0u8; want.len()];
    pool.read(h, &mut got).unwrap();
    assert!(got == want, "handle {h}: read back different bytes");
    assert!(pool.with_object(h, want.len(), |b| b == want).unwrap());
}

fn size(rng: &mut StdRng, huge: usize) -> usize {
    match rng.gen_range(0..10) {
        0 => rng.gen_range(1..=32),
        1..=5 => rng.gen_range(33..=600),
        6..=7 => rng.gen_range(601..=3000),
        8 => rng.gen_range(huge - 16..=huge + 16),
        _ => rng.gen_range(3900..=4096),
    }
}

fn stress(config: PoolConfig, shards: usize) {
    let chain = config.chain_size;
    let pool = Arc::new(pool(config, shards));
    let huge = pool.huge_class_size();

    // Shared, never-changing objects that everyone reads while compaction moves them;
    // half of their neighbours are freed so that their zspages are worth compacting.
    let mut rng = StdRng::seed_from_u64(chain as u64);
    let mut shared = Vec::new();
    for i in 0..4000 {
        let s = size(&mut rng, huge);
        let h = pool.malloc(s).unwrap();
        if i % 2 == 0 {
            let data = contents(h, 0, s);
            pool.write(h, &data).unwrap();
            shared.push((h, data));
        } else {
            pool.free(h).unwrap();
        }
    }
    let shared = Arc::new(shared);
    let stop = Arc::new(AtomicBool::new(false));

    let compactor = {
        let pool = Arc::clone(&pool);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let mut rounds = 0u64;
            let mut freed = 0;
            while !stop.load(Ordering::Relaxed) {
                freed += pool.compact();
                rounds += 1;
                if rounds.is_multiple_of(64) {
                    // Taking every class lock in turn also races with the workers.
                    let _ = pool.class_stats();
                    let _ = pool.freeable_pages();
                }
            }
            (rounds, freed)
        })
    };

    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let pool = Arc::clone(&pool);
            let shared = Arc::clone(&shared);
            thread::spawn(move || {
                let mut rng = StdRng::seed_from_u64(1000 * chain as u64 + w);
                let mut mine: Vec<(Handle, Vec<u8>)> = Vec::new();
                for i in 0..ITERATIONS {
                    match rng.gen_range(0..10) {
                        0..=3 => {
                            let s = size(&mut rng, huge);
                            let h = pool.malloc(s).unwrap();
                            let data = contents(h, i as u64, rng.gen_range(0..=s));
                            pool.write(h, &data).unwrap();
                            mine.push((h, data));
                        }
                        4..=5 if !mine.is_empty() => {
                            let k = rng.gen_range(0..mine.len());
                            let (h, data) = mine.swap_remove(k);
                            check(&pool, h, &data);
                            pool.free(h).unwrap();
                            assert!(pool.free(h).is_err(), "double free accepted");
                        }
                        6 if !mine.is_empty() => {
                            // Rewrite in place.
                            let k = rng.gen_range(0..mine.len());
                            let h = mine[k].0;
                            let cap = pool.capacity(h).unwrap();
                            let data = contents(h, i as u64 + 1, rng.gen_range(0..=cap));
                            pool.write(h, &data).unwrap();
                            check(&pool, h, &data);
                            mine[k].1 = data;
                        }
                        7 if !mine.is_empty() => {
                            let (h, data) = &mine[rng.gen_range(0..mine.len())];
                            check(&pool, *h, data);
                        }
                        _ => {
                            let (h, data) = &shared[rng.gen_range(0..shared.len())];
                            check(&pool, *h, data);
                        }
                    }
                    // Keep the population bounded so that frees empty zspages too.
                    if mine.len() > 3000 {
                        for (h, data) in mine.drain(..1500) {
                            check(&pool, h, &data);
                            pool.free(h).unwrap();
                        }
                    }
                }
                mine
            })
        })
        .collect();

    let survivors: Vec<Vec<(Handle, Vec<u8>)>> =
        workers.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    let (rounds, freed) = compactor.join().unwrap();
    assert!(rounds > 0);
    println!("chain {chain}, shards {shards}: {rounds} compactions freed {freed} pages");

    pool.check_invariants().unwrap();
    let live: usize = survivors.iter().map(Vec::len).sum::<usize>() + shared.len();
    assert_eq!(pool.stats().obj_used, live);
    for (h, data) in survivors.iter().flatten().chain(shared.iter()) {
        check(&pool, *h, data);
    }
    pool.compact();
    pool.check_invariants().unwrap();
    assert_eq!(pool.freeable_pages(), 0);
    for (h, data) in survivors
        .into_iter()
        .flatten()
        .chain(shared.iter().cloned())
    {
        check(&pool, h, &data);
        pool.free(h).unwrap();
    }
    pool.check_invariants().unwrap();
    assert_eq!(pool.total_pages(), 0);
    assert_eq!(pool.stats().obj_used, 0);
}

#[test]
fn stress_chain_4_one_shard_seed() {
    stress(PoolConfig::seed(4), 1);
}

#[test]
fn stress_chain_16_shard_per_cpu_seed() {
    stress(PoolConfig::seed(16), 0);
}

#[test]
fn stress_chain_8_shard_per_cpu_device() {
    stress(
        PoolConfig {
            chain_size: 8,
            ..PoolConfig::default()
        },
        0,
    );
}

#[test]
fn stress_chain_4_class_locking_seed() {
    stress(
        PoolConfig {
            locking: Locking::Class,
            ..PoolConfig::seed(4)
        },
        0,
    );
}

#[test]
fn stress_chain_8_pool_locking_device() {
    stress(
        PoolConfig {
            chain_size: 8,
            locking: Locking::Pool,
            ..PoolConfig::default()
        },
        0,
    );
}
