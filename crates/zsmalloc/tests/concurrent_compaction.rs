//! Two compactions of one class shard at once (folding compacts the shards it folded
//! alongside any `Pool::compact`, the background compactor's or the `compact` attribute's).
//! Each keeps its object index across its lock holds while the shard's epoch is unchanged,
//! so every migration must move the epoch on: otherwise one compaction's moves leave the
//! other's index stale, and it copies the wrong bytes and frees slots still in use.

use std::sync::{Arc, Barrier};
use std::thread;

use zsmalloc::{Handle, Pool, PoolConfig};

fn data(i: usize, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|j| (i.wrapping_mul(31) ^ j) as u8).collect();
    v[..8].copy_from_slice(&(i as u64).to_le_bytes());
    v
}

#[test]
fn two_compactions_of_one_shard_keep_every_object() {
    for round in 0..20 {
        let pool = Arc::new(
            Pool::with_config(PoolConfig {
                populate: false,
                shards: 1,
                ..PoolConfig::default()
            })
            .unwrap(),
        );
        let mut kept: Vec<(Handle, Vec<u8>)> = Vec::new();
        let all: Vec<(Handle, Vec<u8>)> = (0..60_000)
            .map(|i| {
                let d = data(i, 200);
                let h = pool.malloc(200).unwrap();
                pool.write(h, &d).unwrap();
                (h, d)
            })
            .collect();
        for (i, (h, d)) in all.into_iter().enumerate() {
            if i % 3 == 0 {
                pool.free(h).unwrap();
            } else {
                kept.push((h, d));
            }
        }
        let barrier = Arc::new(Barrier::new(4));
        let others: Vec<_> = (0..3)
            .map(|_| {
                let pool = Arc::clone(&pool);
                let barrier = Arc::clone(&barrier);
                thread::spawn(move || {
                    barrier.wait();
                    pool.compact()
                })
            })
            .collect();
        barrier.wait();
        let a = pool.compact();
        let b: Vec<usize> = others.into_iter().map(|t| t.join().unwrap()).collect();
        println!("round {round}: compactions freed {a} and {b:?}");
        let mut bad = 0;
        for (h, d) in &kept {
            let mut got = vec![0u8; d.len()];
            pool.read(*h, &mut got).unwrap();
            if got != *d {
                bad += 1;
            }
        }
        assert_eq!(bad, 0, "round {round}: {bad} objects read back other bytes");
        pool.check_invariants().unwrap();
    }
}

/// The same through folding: `fold` compacts the shards it folded while an auto-compaction
/// (or `echo 1 > compact`) runs `Pool::compact`.
#[test]
fn fold_compaction_racing_compact_keeps_every_object() {
    for round in 0..20 {
        let pool = Arc::new(
            Pool::with_config(PoolConfig {
                populate: false,
                shards: 1,
                ..PoolConfig::default()
            })
            .unwrap(),
        );
        // Every second object a copy of the one before: folding frees half of them.
        let all: Vec<(Handle, Vec<u8>)> = (0..60_000)
            .map(|i| {
                let d = data(i / 2, 200);
                let h = pool.malloc(200).unwrap();
                pool.write(h, &d).unwrap();
                (h, d)
            })
            .collect();
        let barrier = Arc::new(Barrier::new(2));
        let folder = {
            let pool = Arc::clone(&pool);
            let barrier = Arc::clone(&barrier);
            thread::spawn(move || {
                barrier.wait();
                pool.fold()
            })
        };
        barrier.wait();
        let mut freed = 0;
        while !folder.is_finished() {
            freed += pool.compact();
        }
        let report = folder.join().unwrap();
        println!("round {round}: compact freed {freed}, fold {report:?}");
        let mut bad = 0;
        for (h, d) in &all {
            let mut got = vec![0u8; d.len()];
            pool.read(*h, &mut got).unwrap();
            if got != *d {
                bad += 1;
            }
        }
        assert_eq!(bad, 0, "round {round}: {bad} objects read back other bytes");
        pool.check_invariants().unwrap();
    }
}
