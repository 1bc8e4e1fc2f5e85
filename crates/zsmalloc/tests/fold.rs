//! Folding (seed 004): `fold` finds written objects with identical bytes, keeps one of
//! each, turns the other handles into handles of the one kept, and gives the pages this
//! frees back (`pages_folded`; its compaction is not `pages_compacted`). Never-written
//! objects are left alone; a second pass finds nothing; already shared and indexed objects
//! take part. In both layouts: the zram device's and the seed kernel's (headers).

use std::collections::HashMap;

use zsmalloc::{Error, Handle, Pool, PoolConfig};

fn layouts() -> [PoolConfig; 2] {
    [PoolConfig::default(), PoolConfig::seed(8)]
}

fn pool(config: PoolConfig) -> Pool {
    Pool::with_config(PoolConfig {
        populate: false,
        shards: 1,
        ..config
    })
    .unwrap()
}

/// Content `kind` of `len` bytes.
fn content(kind: usize, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|i| (i * 13 + kind * 7) as u8).collect();
    v[..8].copy_from_slice(&(kind as u64).to_le_bytes());
    v
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
        let pool = pool(config);
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

        for (h, _) in objs {
            pool.free(h).unwrap();
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.total_pages(), 0);
    }
}

#[test]
fn never_written_objects_are_not_folded() {
    for config in layouts() {
        let pool = pool(config);
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
        for h in fresh.into_iter().chain(written) {
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
    }
}

#[test]
fn fold_joins_existing_shared_and_indexed_objects() {
    for config in layouts() {
        let pool = pool(config);
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
        for h in copies.into_iter().chain([a, a2, plain, indexed, third]) {
            pool.free(h).unwrap();
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.total_pages(), 0);
    }
}
