//! Folding and deduplication when every content hash collides: bytes decide, never hashes.

use crate::sharing::collide_hashes;
use crate::{Handle, Pool, PoolConfig};

fn pool(config: PoolConfig) -> Pool {
    Pool::with_config(PoolConfig {
        populate: false,
        shards: 1,
        ..config
    })
    .unwrap()
}

/// Both layouts: the device's (no header) and the seed kernel's (the handle in the header).
fn layouts() -> [PoolConfig; 2] {
    [PoolConfig::default(), PoolConfig::seed(8)]
}

fn content(kind: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| kind.wrapping_mul(31).wrapping_add(i as u8))
        .collect()
}

fn read(pool: &Pool, h: Handle, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    pool.read(h, &mut buf).unwrap();
    buf
}

#[test]
fn fold_never_merges_different_bytes_when_hashes_collide() {
    collide_hashes(true);
    for config in layouts() {
        let pool = pool(config);
        // Four different contents, each stored three times, interleaved; one class.
        let objs: Vec<(Handle, Vec<u8>)> = (0..12u8)
            .map(|i| {
                let data = content(i % 4, 200);
                let h = pool.malloc(200).unwrap();
                pool.write(h, &data).unwrap();
                (h, data)
            })
            .collect();
        let report = pool.fold();
        pool.check_invariants().unwrap();
        assert_eq!(report.objects_scanned, 12);
        // Every content keeps one object (up to MAX_KEEPERS contents per hash).
        assert_eq!(report.objects_folded, 8, "{config:?}");
        assert_eq!(pool.stats().obj_used, 4);
        for (h, data) in &objs {
            assert_eq!(&read(&pool, *h, 200), data);
        }
        for (a, da) in &objs {
            for (b, db) in &objs {
                let same = pool.object_id(*a).unwrap() == pool.object_id(*b).unwrap();
                assert_eq!(same, da == db, "{config:?}");
            }
        }
        for (h, _) in objs {
            pool.free(h).unwrap();
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.total_pages(), 0);
    }
    collide_hashes(false);
}

#[test]
fn malloc_dedup_never_shares_different_bytes_when_hashes_collide() {
    collide_hashes(true);
    for config in layouts() {
        let pool = pool(config);
        let a = content(1, 300);
        let b = content(2, 300);
        let (ha, shared) = pool.malloc_dedup(&a).unwrap();
        assert!(!shared);
        // Same hash, other bytes: a new object, and the index keeps the first.
        let (hb, shared) = pool.malloc_dedup(&b).unwrap();
        assert!(!shared);
        assert_ne!(pool.object_id(ha).unwrap(), pool.object_id(hb).unwrap());
        assert_eq!(pool.share_stats().index_entries, 1);
        // The same bytes as the indexed object: shared.
        let (ha2, shared) = pool.malloc_dedup(&a).unwrap();
        assert!(shared);
        assert_eq!(pool.object_id(ha).unwrap(), pool.object_id(ha2).unwrap());
        // The same bytes as the object left out of the index: stored again.
        let (hb2, shared) = pool.malloc_dedup(&b).unwrap();
        assert!(!shared);
        pool.check_invariants().unwrap();
        for (h, data) in [(ha, &a), (hb, &b), (ha2, &a), (hb2, &b)] {
            assert_eq!(&read(&pool, h, 300), data);
        }
        // Folding then merges the two copies of `b`, and nothing else.
        let report = pool.fold();
        assert_eq!(report.objects_folded, 1);
        assert_eq!(pool.object_id(hb).unwrap(), pool.object_id(hb2).unwrap());
        assert_ne!(pool.object_id(ha).unwrap(), pool.object_id(hb).unwrap());
        pool.check_invariants().unwrap();
        for h in [ha, hb, ha2, hb2] {
            pool.free(h).unwrap();
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.total_pages(), 0);
    }
    collide_hashes(false);
}
