//! Two compactions of one class shard at once (folding compacts the shards it folded
//! alongside any `Pool::compact`, the background compactor's or the `compact` attribute's).
//! Each keeps its object index across its lock holds while the shard's epoch is unchanged,
//! so every migration must move the epoch on: otherwise one compaction's moves leave the
//! other's index stale, and it copies the wrong bytes and frees slots still in use.

use std::sync::{Arc, Barrier};
use std::thread;

#[path = "common/pool.rs"]
mod pool;

use pool::pool;
use zsmalloc::{Handle, Pool, PoolConfig};

fn data(i: usize, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|j| (i.wrapping_mul(31) ^ j) as u8).collect();
    v[..8].copy_from_slice(&(i as u64).to_le_bytes());
    v
}

/// 60 000 objects of 200 bytes, the `i`th holding `data(content(i), 200)`.
fn store(pool: &Pool, content: impl Fn(usize) -> usize) -> Vec<(Handle, Vec<u8>)> {
    (0..60_000)
        .map(|i| {
            let d = data(content(i), 200);
            let h = pool.malloc(200).unwrap();
            pool.write(h, &d).unwrap();
            (h, d)
        })
        .collect()
}

/// Every object of `objs` reads back its bytes, and the pool's invariants hold.
fn check_all(pool: &Pool, objs: &[(Handle, Vec<u8>)], round: usize) {
    let mut bad = 0;
    for (h, d) in objs {
        let mut got = vec![0u8; d.len()];
        pool.read(*h, &mut got).unwrap();
        if got != *d {
            bad += 1;
        }
    }
    assert_eq!(bad, 0, "round {round}: {bad} objects read back other bytes");
    pool.check_invariants().unwrap();
}

#[test]
fn two_compactions_of_one_shard_keep_every_object() {
    for round in 0..20 {
        let pool = Arc::new(pool(PoolConfig::default(), 1));
        let mut kept: Vec<(Handle, Vec<u8>)> = Vec::new();
        let all = store(&pool, |i| i);
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
        check_all(&pool, &kept, round);
    }
}

/// The same through folding: `fold` compacts the shards it folded while an auto-compaction
/// (or `echo 1 > compact`) runs `Pool::compact`.
#[test]
fn fold_compaction_racing_compact_keeps_every_object() {
    for round in 0..20 {
        let pool = Arc::new(pool(PoolConfig::default(), 1));
        // Every second object a copy of the one before: folding frees half of them.
        let all = store(&pool, |i| i / 2);
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
        check_all(&pool, &all, round);
    }
}
