//! Folding (seed 004): `fold` finds written objects with identical bytes, keeps one of
//! each, turns the other handles into handles of the one kept, and gives the pages this
//! frees back (`pages_folded`; its compaction is not `pages_compacted`). Never-written
//! objects are left alone; a second pass finds nothing; already shared and indexed objects
//! take part. Copies in different shards of a class are folded too. In both layouts: the
//! zram device's and the seed kernel's (headers).

#[path = "common/dedup_in.rs"]
mod dedup_in;
#[path = "common/layouts.rs"]
mod layouts;
#[path = "common/pool.rs"]
mod pool;
#[path = "common/store_in.rs"]
mod store_in;

use std::collections::HashMap;

use dedup_in::dedup_in;
use layouts::layouts;
use pool::pool;
use store_in::store_in;
use zsmalloc::{Error, Handle, Pool};

/// Content `kind` of `len` bytes.
fn content(kind: usize, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|i| (i * 13 + kind * 7) as u8).collect();
    v[..8].copy_from_slice(&(kind as u64).to_le_bytes());
    v
}

/// Frees every handle of `handles`: the pool is left valid and empty.
fn free_all(pool: &Pool, handles: impl IntoIterator<Item = Handle>) {
    for h in handles {
        pool.free(h).unwrap();
    }
    pool.check_invariants().unwrap();
    assert_eq!(pool.total_pages(), 0);
}

fn check_all(pool: &Pool, objs: &[(Handle, Vec<u8>)]) {
    for (h, data) in objs {
        let mut got = vec![0u8; data.len()];
        pool.read(*h, &mut got).unwrap();
        assert_eq!(&got, data, "handle {h}");
    }
}

#[test]
fn fold_keeps_one_object_per_content_and_frees_pages() {
    for config in layouts() {
        let pool = pool(config, 1);
        // 40 contents in several classes, each stored 25 times, interleaved.
        let mut objs: Vec<(Handle, Vec<u8>)> = Vec::new();
        for copy in 0..25 {
            for kind in 0..40 {
                let len = 100 + kind * 97;
                // Some copies shorter: zero-filled, they hold the same capacity bytes.
                let mut data = content(kind, len);
                if copy % 5 == 4 {
                    data.extend_from_slice(&[0, 0, 0]);
                    if pool.lookup_class(data.len()).unwrap().size
                        != pool.lookup_class(len).unwrap().size
                    {
                        data.truncate(len);
                    }
                }
                let h = pool.malloc(data.len()).unwrap();
                pool.write(h, &data).unwrap();
                objs.push((h, data));
            }
        }
        pool.check_invariants().unwrap();
        let before = pool.total_pages();
        let class_bytes: u64 = (0..40)
            .map(|kind| 24 * pool.lookup_class(100 + kind * 97).unwrap().size as u64)
            .sum();

        let report = pool.fold();
        pool.check_invariants().unwrap();
        assert_eq!(report.objects_scanned, 1000);
        assert_eq!(report.objects_folded, 960, "{:?}", config.header);
        assert_eq!(report.bytes_folded, class_bytes);
        assert_eq!(pool.stats().obj_used, 40);
        assert!(report.pages_freed > 0);
        assert_eq!(
            pool.total_pages() as u64,
            before as u64 - report.pages_freed
        );
        assert_eq!(pool.pages_folded(), report.pages_freed);
        assert_eq!(pool.stats().pages_folded, report.pages_freed);
        assert_eq!(pool.pages_compacted(), 0, "fold's compaction is its own");
        assert_eq!(pool.freeable_pages(), 0);
        check_all(&pool, &objs);

        // Handles of one content name one object, 25 of them; contents differ otherwise.
        let mut by_id: HashMap<u64, Vec<u8>> = HashMap::new();
        for (h, data) in &objs {
            assert_eq!(pool.refs(*h).unwrap(), 25);
            let padded = {
                let mut d = data.clone();
                d.resize(pool.capacity(*h).unwrap(), 0);
                d
            };
            let id = pool.object_id(*h).unwrap();
            assert_eq!(by_id.entry(id).or_insert_with(|| padded.clone()), &padded);
            // Folded objects are shared, so read-only.
            assert!(matches!(pool.write(*h, b"x"), Err(Error::Shared(_))));
        }
        assert_eq!(by_id.len(), 40);
        let s = pool.share_stats();
        assert_eq!((s.shared_objects, s.extra_handles), (40, 960));

        // A second pass has nothing to fold.
        let again = pool.fold();
        assert_eq!((again.objects_scanned, again.objects_folded), (40, 0));
        assert_eq!(again.pages_freed, 0);
        assert_eq!(pool.pages_folded(), report.pages_freed);

        free_all(&pool, objs.into_iter().map(|(h, _)| h));
    }
}

#[test]
fn never_written_objects_are_not_folded() {
    for config in layouts() {
        let pool = pool(config, 1);
        // Fresh objects read as zeros, all alike, but their bytes are not the caller's.
        let fresh: Vec<Handle> = (0..300).map(|_| pool.malloc(200).unwrap()).collect();
        let written: Vec<Handle> = (0..3)
            .map(|_| {
                let h = pool.malloc(200).unwrap();
                pool.write(h, &[0; 200]).unwrap();
                h
            })
            .collect();
        let report = pool.fold();
        assert_eq!(report.objects_scanned, 3);
        assert_eq!(report.objects_folded, 2);
        for &h in &fresh {
            assert_eq!(pool.refs(h).unwrap(), 1);
            pool.write(h, b"still writable").unwrap();
        }
        assert_eq!(pool.refs(written[0]).unwrap(), 3);
        pool.check_invariants().unwrap();
        free_all(&pool, fresh.into_iter().chain(written));
    }
}

#[test]
fn fold_joins_existing_shared_and_indexed_objects() {
    for config in layouts() {
        let pool = pool(config, 1);
        let data = content(3, 1000);
        // A shared object (an anchor), an indexed one and plain copies, all alike.
        let a = pool.malloc(1000).unwrap();
        pool.write(a, &data).unwrap();
        let a2 = pool.share(a).unwrap();
        let copies: Vec<Handle> = (0..5)
            .map(|_| {
                let h = pool.malloc(1000).unwrap();
                pool.write(h, &data).unwrap();
                h
            })
            .collect();
        pool.check_invariants().unwrap();
        let report = pool.fold();
        assert_eq!(report.objects_folded, 5);
        pool.check_invariants().unwrap();
        let id = pool.object_id(a).unwrap();
        for &h in copies.iter().chain([&a, &a2]) {
            assert_eq!(
                pool.object_id(h).unwrap(),
                id,
                "folded into the shared object"
            );
            assert_eq!(pool.refs(h).unwrap(), 7);
        }

        // An indexed object folded into another: the index follows to the one kept.
        let other = content(4, 1000);
        let plain = pool.malloc(1000).unwrap();
        pool.write(plain, &other).unwrap();
        let (indexed, shared) = pool.malloc_dedup(&other).unwrap();
        assert!(!shared, "plain objects are not in the index");
        pool.fold();
        pool.check_invariants().unwrap();
        assert_eq!(
            pool.object_id(plain).unwrap(),
            pool.object_id(indexed).unwrap()
        );
        let (third, shared) = pool.malloc_dedup(&other).unwrap();
        assert!(shared, "the index names the object kept");
        assert_eq!(pool.refs(third).unwrap(), 3);
        assert_eq!(pool.share_stats().index_entries, 1);
        pool.check_invariants().unwrap();
        free_all(
            &pool,
            copies.into_iter().chain([a, a2, plain, indexed, third]),
        );
    }
}

#[test]
fn fold_keeps_one_object_per_content_across_shards() {
    for config in layouts() {
        let pool = pool(config, 3);
        // 40 contents in several classes, each stored 12 times, spread over three shards
        // (content `kind`'s copies start in shard `kind % 3`).
        let mut objs: Vec<(Handle, Vec<u8>)> = Vec::new();
        for copy in 0..12 {
            for kind in 0..40 {
                let data = content(kind, 100 + kind * 97);
                objs.push((store_in(&pool, (copy + kind) % 3, &data), data));
            }
        }
        pool.check_invariants().unwrap();
        let before = pool.total_pages();
        let report = pool.fold();
        pool.check_invariants().unwrap();
        assert_eq!(report.objects_scanned, 480);
        assert_eq!(report.objects_folded, 440, "{:?}", config.header);
        assert_eq!(pool.stats().obj_used, 40);
        assert!(report.pages_freed > 0);
        assert_eq!(
            pool.total_pages() as u64,
            before as u64 - report.pages_freed
        );
        assert_eq!(pool.freeable_pages(), 0);
        check_all(&pool, &objs);
        let mut ids: HashMap<u64, &[u8]> = HashMap::new();
        for (h, data) in &objs {
            assert_eq!(pool.refs(*h).unwrap(), 12);
            let id = pool.object_id(*h).unwrap();
            assert_eq!(*ids.entry(id).or_insert(data), &data[..]);
            assert!(matches!(pool.write(*h, b"x"), Err(Error::Shared(_))));
        }
        assert_eq!(ids.len(), 40);
        let s = pool.share_stats();
        assert_eq!((s.shared_objects, s.extra_handles), (40, 440));
        assert_eq!(pool.fold().objects_folded, 0);
        // Handles go in any order, from any shard.
        free_all(&pool, objs.into_iter().rev().map(|(h, _)| h));
    }
}

#[test]
fn fold_across_shards_joins_anchors_and_indexed_objects_but_never_two_anchors() {
    for config in layouts() {
        let pool = pool(config, 2);
        let data = content(5, 2000);
        // A shared object in each shard (two anchors), and plain copies in both.
        let a0 = store_in(&pool, 0, &data);
        let a0b = pool.share(a0).unwrap();
        let a1 = store_in(&pool, 1, &data);
        let a1b = pool.share(a1).unwrap();
        let plain: Vec<Handle> = (0..4).map(|i| store_in(&pool, i % 2, &data)).collect();
        let report = pool.fold();
        pool.check_invariants().unwrap();
        // The copies go; the two anchors stay two objects (anchors are only ever kept).
        assert_eq!(report.objects_folded, 4);
        assert_eq!(pool.stats().obj_used, 2);
        let id0 = pool.object_id(a0).unwrap();
        assert_eq!(pool.object_id(a0b).unwrap(), id0);
        assert_eq!(pool.object_id(a1b).unwrap(), pool.object_id(a1).unwrap());
        assert_ne!(pool.object_id(a1).unwrap(), id0);
        for &h in &plain {
            assert_eq!(
                pool.object_id(h).unwrap(),
                id0,
                "folded into the first anchor"
            );
        }
        assert_eq!(pool.refs(a0).unwrap(), 6);

        // An indexed object in shard 1 folded into a plain one in shard 0: the index follows
        // the object kept, so malloc_dedup still finds it, from either shard.
        let other = content(6, 700);
        let kept = store_in(&pool, 0, &other);
        let (indexed, shared) = dedup_in(&pool, 1, &other);
        assert!(!shared, "plain objects are not in the index");
        assert_eq!(pool.fold().objects_folded, 1);
        pool.check_invariants().unwrap();
        assert_eq!(
            pool.object_id(indexed).unwrap(),
            pool.object_id(kept).unwrap()
        );
        assert_eq!(pool.share_stats().index_entries, 1);
        for s in [0, 1] {
            let (h, shared) = dedup_in(&pool, s, &other);
            assert!(shared, "the index names the object kept");
            assert_eq!(pool.object_id(h).unwrap(), pool.object_id(kept).unwrap());
            pool.free(h).unwrap();
        }
        pool.check_invariants().unwrap();
        free_all(
            &pool,
            plain.into_iter().chain([a0, a0b, a1, a1b, kept, indexed]),
        );
    }
}
