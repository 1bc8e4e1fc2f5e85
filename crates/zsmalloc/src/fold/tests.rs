//! Folding and deduplication when every content hash collides: bytes decide, never hashes,
//! within a shard and across the shards of a class.

use crate::sharing::collide_hashes;
use crate::thread::pin_malloc_shard;
use crate::{Handle, Pool, PoolConfig};

fn pool(config: PoolConfig) -> Pool {
    pool_with(config, 1)
}

fn pool_with(config: PoolConfig, shards: usize) -> Pool {
    Pool::with_config(PoolConfig {
        populate: false,
        shards,
        ..config
    })
    .unwrap()
}

/// Runs `f` with this thread's allocations pinned to shard `shard`.
fn in_shard<R>(shard: usize, f: impl FnOnce() -> R) -> R {
    pin_malloc_shard(Some(shard));
    let r = f();
    pin_malloc_shard(None);
    r
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

/// Each of `objs` (handles of 200-byte objects) reads back its bytes, two handles name one
/// object exactly when their bytes are the same; then all are freed and no page is left.
fn check_one_object_per_content_and_free(
    pool: &Pool,
    objs: Vec<(Handle, Vec<u8>)>,
    config: PoolConfig,
) {
    for (h, data) in &objs {
        assert_eq!(&read(pool, *h, 200), data);
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
        check_one_object_per_content_and_free(&pool, objs, config);
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

#[test]
fn fold_across_shards_never_merges_or_shares_different_bytes_when_hashes_collide() {
    collide_hashes(true);
    for config in layouts() {
        let pool = pool_with(config, 2);
        // Contents 0..4 three times each, over both shards; content 4 once, in shard 1.
        let mut objs: Vec<(Handle, Vec<u8>)> = (0..12u8)
            .map(|i| {
                let data = content(i % 4, 200);
                let h = in_shard(usize::from(i % 3 % 2), || pool.malloc(200).unwrap());
                pool.write(h, &data).unwrap();
                (h, data)
            })
            .collect();
        let single = in_shard(1, || pool.malloc(200).unwrap());
        pool.write(single, &content(4, 200)).unwrap();
        let report = pool.fold();
        pool.check_invariants().unwrap();
        assert_eq!(report.objects_scanned, 13);
        assert_eq!(report.objects_folded, 8, "{config:?}");
        assert_eq!(pool.stats().obj_used, 5);
        // The object without a copy was compared with every kept object, never shared.
        assert_eq!(pool.refs(single).unwrap(), 1);
        pool.write(single, &content(4, 200)).unwrap();
        objs.push((single, content(4, 200)));
        check_one_object_per_content_and_free(&pool, objs, config);
    }
    collide_hashes(false);
}

#[test]
fn malloc_dedup_across_shards_never_shares_different_bytes_when_hashes_collide() {
    collide_hashes(true);
    for config in layouts() {
        let pool = pool_with(config, 2);
        let a = content(1, 300);
        let b = content(2, 300);
        let (ha, shared) = in_shard(0, || pool.malloc_dedup(&a).unwrap());
        assert!(!shared);
        // Shard 0's index holds the hash with other bytes: a new object, indexed in shard 1.
        let (hb, shared) = in_shard(1, || pool.malloc_dedup(&b).unwrap());
        assert!(!shared);
        assert_eq!(pool.share_stats().index_entries, 2);
        // Each content is found in the shard that indexes it, from either shard.
        for s in [0, 1] {
            let (h, shared) = in_shard(s, || pool.malloc_dedup(&a).unwrap());
            assert!(shared);
            assert_eq!(pool.object_id(h).unwrap(), pool.object_id(ha).unwrap());
            assert_eq!(read(&pool, h, 300), a);
            let (h2, shared) = in_shard(s, || pool.malloc_dedup(&b).unwrap());
            assert!(shared);
            assert_eq!(pool.object_id(h2).unwrap(), pool.object_id(hb).unwrap());
            assert_eq!(read(&pool, h2, 300), b);
            pool.free(h).unwrap();
            pool.free(h2).unwrap();
        }
        // A third content with the same hash: no shard indexes its bytes.
        let c = content(3, 300);
        let (hc, shared) = in_shard(0, || pool.malloc_dedup(&c).unwrap());
        assert!(!shared);
        assert_eq!(pool.share_stats().index_entries, 2);
        pool.check_invariants().unwrap();
        assert_eq!(pool.fold().objects_folded, 0);
        for (h, data) in [(ha, &a), (hb, &b), (hc, &c)] {
            assert_eq!(&read(&pool, h, 300), data);
            assert!(pool.free_shared(h).unwrap());
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.total_pages(), 0);
    }
    collide_hashes(false);
}
