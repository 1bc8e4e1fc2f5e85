//! Inline deduplication: `malloc_dedup` stores bytes in a new object, or — when the content
//! index of a shard of the class holds an object with the same bytes (zero-filled to the
//! class capacity, compared in full) — hands out another handle to it. The index follows objects
//! as they are written, shared, folded and freed. In both layouts.

#[path = "common/dedup_in.rs"]
mod dedup_in;
#[path = "common/layouts.rs"]
mod layouts;
#[path = "common/pool.rs"]
mod pool;
#[path = "common/read.rs"]
mod read;

use dedup_in::dedup_in;
use layouts::layouts;
use pool::pool;
use read::read;
use zsmalloc::{Error, Handle, PoolConfig};

fn bytes(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed ^ (i as u8).wrapping_mul(3)).collect()
}

#[test]
fn identical_bytes_share_one_object_and_others_do_not() {
    for config in layouts() {
        let pool = pool(config, 1);
        let a = bytes(1, 700);
        let (h1, shared) = pool.malloc_dedup(&a).unwrap();
        assert!(!shared);
        assert_eq!(read(&pool, h1, 700), a);
        let pages = pool.total_pages();
        let (h2, shared) = pool.malloc_dedup(&a).unwrap();
        assert!(shared);
        assert_eq!(pool.object_id(h1).unwrap(), pool.object_id(h2).unwrap());
        assert_eq!((pool.refs(h1).unwrap(), pool.refs(h2).unwrap()), (2, 2));
        assert_eq!(read(&pool, h2, 700), a);
        // Trailing zeros within the class are the same stored bytes.
        let mut a0 = a.clone();
        a0.extend_from_slice(&[0; 4]);
        assert_eq!(
            pool.lookup_class(704).unwrap().size,
            pool.lookup_class(700).unwrap().size
        );
        let (h3, shared) = pool.malloc_dedup(&a0).unwrap();
        assert!(shared);
        assert_eq!(read(&pool, h3, 704), a0);
        assert_eq!(pool.stats().obj_used, 1);
        assert_eq!(pool.total_pages(), pages);
        // Other bytes, or the same bytes in another class, are new objects.
        let (h4, shared) = pool.malloc_dedup(&bytes(2, 700)).unwrap();
        assert!(!shared);
        let (h5, shared) = pool.malloc_dedup(&a[..300]).unwrap();
        assert!(!shared);
        assert_ne!(pool.object_id(h5).unwrap(), pool.object_id(h1).unwrap());
        let s = pool.share_stats();
        assert_eq!(
            (s.shared_objects, s.extra_handles, s.index_entries),
            (1, 2, 3)
        );
        pool.check_invariants().unwrap();
        // Deduplicated objects are read-only; the one handle of an unshared one writes.
        assert!(matches!(pool.write(h2, b"x"), Err(Error::Shared(_))));
        pool.write(h4, b"x").unwrap();
        for h in [h1, h2, h3, h4, h5] {
            pool.free(h).unwrap();
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.total_pages(), 0);
        assert_eq!(pool.share_stats().index_entries, 0);
    }
}

#[test]
fn the_index_follows_writes_and_frees() {
    for config in layouts() {
        let pool = pool(config, 1);
        let a = bytes(5, 200);
        let b = bytes(6, 200);
        // Plain writes are not indexed.
        let plain = pool.malloc(200).unwrap();
        pool.write(plain, &a).unwrap();
        let (d1, shared) = pool.malloc_dedup(&a).unwrap();
        assert!(!shared);
        // Rewriting an indexed (unshared) object takes it out of the index.
        pool.write(d1, &b).unwrap();
        pool.check_invariants().unwrap();
        assert_eq!(pool.share_stats().index_entries, 0);
        let (d2, shared) = pool.malloc_dedup(&a).unwrap();
        assert!(!shared);
        // Freeing one handle of an indexed shared object keeps it indexed...
        let (d3, shared) = pool.malloc_dedup(&a).unwrap();
        assert!(shared);
        assert!(!pool.free_shared(d2).unwrap());
        let (d4, shared) = pool.malloc_dedup(&a).unwrap();
        assert!(shared);
        pool.check_invariants().unwrap();
        // ...and its last takes it out.
        assert!(!pool.free_shared(d3).unwrap());
        assert!(pool.free_shared(d4).unwrap());
        assert_eq!(pool.share_stats().index_entries, 0);
        pool.check_invariants().unwrap();
        let (d5, shared) = pool.malloc_dedup(&a).unwrap();
        assert!(!shared);
        assert_eq!(read(&pool, d5, 200), a);
        pool.check_invariants().unwrap();
        for h in [plain, d1, d5] {
            assert!(pool.free_shared(h).unwrap());
        }
        assert_eq!(pool.total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}

#[test]
fn the_index_is_counted_in_metadata_and_bad_sizes_are_refused() {
    let pool = pool(PoolConfig::default(), 1);
    let before = pool.metadata_bytes();
    let hs: Vec<Handle> = (0..1000u32)
        .map(|i| {
            let data = i.to_le_bytes().repeat(20);
            pool.malloc_dedup(&data).unwrap().0
        })
        .collect();
    let s = pool.share_stats();
    assert_eq!(s.index_entries, 1000);
    assert!(s.index_bytes >= 1000 * 12);
    assert!(pool.metadata_bytes() >= before + s.index_bytes as usize);
    assert!(matches!(pool.malloc_dedup(&[]), Err(Error::InvalidSize(0))));
    assert!(matches!(
        pool.malloc_dedup(&[1; 4097]),
        Err(Error::InvalidSize(4097))
    ));
    // Whole pages (the huge class) deduplicate too.
    let page = vec![0x5A; 4096];
    let (p1, _) = pool.malloc_dedup(&page).unwrap();
    let (p2, shared) = pool.malloc_dedup(&page).unwrap();
    assert!(shared);
    assert_eq!(read(&pool, p2, 4096), page);
    pool.check_invariants().unwrap();
    for h in hs.into_iter().chain([p1, p2]) {
        pool.free(h).unwrap();
    }
    assert_eq!(pool.total_pages(), 0);
}

/// The class-shard position a handle names (`handle.rs`: bits 47..59).
fn shard(h: Handle) -> u64 {
    (h.to_raw() >> 47) & 0xFFF
}

#[test]
fn malloc_dedup_finds_bytes_indexed_in_another_shard() {
    for config in layouts() {
        let pool = pool(config, 4);
        let a = bytes(7, 1500);
        let (first, shared) = dedup_in(&pool, 2, &a);
        assert!(!shared);
        // From every other shard: another handle to the object of shard 2, issued there.
        let mut hs = vec![first];
        for s in [0, 1, 3, 2] {
            let (h, shared) = dedup_in(&pool, s, &a);
            assert!(shared, "from shard {s}");
            assert_eq!(shard(h), shard(first));
            assert_eq!(pool.object_id(h).unwrap(), pool.object_id(first).unwrap());
            assert_eq!(read(&pool, h, 1500), a);
            hs.push(h);
        }
        assert_eq!(pool.refs(first).unwrap(), 5);
        assert_eq!(pool.stats().obj_used, 1);
        // A content of its own: stored in the pinned shard and indexed there.
        let (b, shared) = dedup_in(&pool, 3, &bytes(8, 1500));
        assert!(!shared);
        assert_eq!(shard(b), shard(first) + 1);
        let s = pool.share_stats();
        assert_eq!(
            (s.shared_objects, s.extra_handles, s.index_entries),
            (1, 4, 2)
        );
        pool.check_invariants().unwrap();
        // The index entry goes with the object: then the bytes are stored anew.
        for h in hs {
            pool.free(h).unwrap();
        }
        let (again, shared) = dedup_in(&pool, 0, &a);
        assert!(!shared);
        assert_eq!(shard(again) + 2, shard(first));
        pool.check_invariants().unwrap();
        for h in [again, b] {
            assert!(pool.free_shared(h).unwrap());
        }
        assert_eq!(pool.total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}
