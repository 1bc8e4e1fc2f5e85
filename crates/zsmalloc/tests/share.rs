//! Shared objects: `share` gives another handle to the same object, `free_shared` drops one
//! handle and says when the object went, `refs` and `object_id` tell which handles name
//! one object; shared objects are read-only; stale, double and forged frees fail loudly
//! and change nothing. In both layouts: the zram device's (no header) and the seed
//! kernel's (`PoolConfig::seed`: the handle in every object's header, which for a shared
//! object names its anchor — the invariants check it).

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

fn read(pool: &Pool, h: Handle, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    pool.read(h, &mut buf).unwrap();
    buf
}

fn is_stale<T: std::fmt::Debug>(r: zsmalloc::Result<T>, h: Handle) -> bool {
    matches!(r, Err(Error::StaleHandle(x)) if x == h)
}

#[test]
fn share_counts_references_and_the_last_free_takes_the_object() {
    for config in layouts() {
        let pool = pool(config);
        let h = pool.malloc(500).unwrap();
        pool.write(h, b"shared bytes").unwrap();
        let id = pool.object_id(h).unwrap();
        assert_eq!(pool.refs(h).unwrap(), 1);
        let pages = pool.total_pages();

        let h2 = pool.share(h).unwrap();
        let h3 = pool.share(h2).unwrap();
        assert!(h2 != h && h3 != h && h3 != h2);
        for x in [h, h2, h3] {
            assert_eq!(pool.refs(x).unwrap(), 3);
            // Sharing keeps the object's id: it is the same object.
            assert_eq!(pool.object_id(x).unwrap(), id);
            assert_eq!(read(&pool, x, 12), b"shared bytes");
            assert_eq!(pool.capacity(x).unwrap(), pool.capacity(h).unwrap());
        }
        // One object, three handles: one object in use, no new pages.
        assert_eq!(pool.stats().obj_used, 1);
        assert_eq!(pool.total_pages(), pages);
        let s = pool.share_stats();
        assert_eq!((s.shared_objects, s.extra_handles), (1, 2));
        assert!(s.index_bytes > 0);
        pool.check_invariants().unwrap();

        // Handles go one by one, in any order; the object stays until the last.
        assert!(!pool.free_shared(h).unwrap());
        assert!(is_stale(pool.read(h, &mut [0u8; 1]), h));
        assert_eq!(pool.refs(h3).unwrap(), 2);
        assert_eq!(read(&pool, h3, 12), b"shared bytes");
        pool.check_invariants().unwrap();
        assert!(!pool.free_shared(h3).unwrap());
        // One handle left: it still reads the object, which stays read-only.
        assert_eq!(pool.refs(h2).unwrap(), 1);
        assert_eq!(pool.object_id(h2).unwrap(), id);
        assert!(matches!(pool.write(h2, b"x"), Err(Error::Shared(x)) if x == h2));
        assert_eq!(pool.share_stats().shared_objects, 0);
        pool.check_invariants().unwrap();
        assert!(pool.free_shared(h2).unwrap());
        assert_eq!(pool.stats().obj_used, 0);
        assert_eq!(pool.total_pages(), 0);
        assert_eq!(pool.share_stats().extra_handles, 0);
        pool.check_invariants().unwrap();
    }
}

#[test]
fn an_unshared_object_is_freed_by_its_one_handle() {
    for config in layouts() {
        let pool = pool(config);
        let h = pool.malloc(100).unwrap();
        assert!(pool.free_shared(h).unwrap());
        assert!(is_stale(pool.free_shared(h), h));
        assert_eq!(pool.total_pages(), 0);
    }
}

#[test]
fn writes_to_a_shared_object_are_refused_through_every_handle() {
    for config in layouts() {
        let pool = pool(config);
        let h = pool.malloc(64).unwrap();
        pool.write(h, &[7; 64]).unwrap();
        let other = pool.malloc(64).unwrap();
        pool.write(other, &[9; 64]).unwrap();
        let h2 = pool.share(h).unwrap();
        for x in [h, h2] {
            assert!(matches!(pool.write(x, &[1; 64]), Err(Error::Shared(y)) if y == x));
            assert!(matches!(pool.write(x, b""), Err(Error::Shared(_))));
        }
        assert_eq!(read(&pool, h, 64), [7; 64]);
        // Other objects are as writable as ever.
        pool.write(other, &[8; 10]).unwrap();
        assert_eq!(read(&pool, other, 11), [8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 0]);
        pool.check_invariants().unwrap();
        for x in [h, h2, other] {
            pool.free(x).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
    }
}

#[test]
fn double_stale_and_forged_frees_fail_and_change_nothing() {
    for config in layouts() {
        let pool = pool(config);
        // In a new one-shard pool the first handle takes entry 0 of its class's table.
        let h = pool.malloc(300).unwrap();
        pool.write(h, b"abc").unwrap();
        let h2 = pool.share(h).unwrap();
        // Entry 1 is the object's anchor, never handed out; the new handle took entry 2.
        assert_eq!(h2.to_raw(), h.to_raw() + 2);
        let anchor = Handle::from_raw(h.to_raw() + 1);
        let before = (
            pool.total_pages(),
            pool.stats().obj_used,
            pool.refs(h).unwrap(),
        );
        for forged in [
            anchor,
            Handle::from_raw(h.to_raw() + 3),
            Handle::from_raw(0),
        ] {
            assert!(is_stale(pool.free_shared(forged), forged), "free {forged}");
            assert!(is_stale(pool.free(forged), forged));
            assert!(is_stale(pool.share(forged), forged));
            assert!(is_stale(pool.refs(forged), forged));
            assert!(is_stale(pool.object_id(forged), forged));
            assert!(is_stale(pool.read(forged, &mut [0u8; 3]), forged));
            assert!(is_stale(pool.write(forged, b"x"), forged));
            assert!(is_stale(pool.capacity(forged), forged));
        }
        // An alias freed twice: the second free fails, and the object stays.
        assert!(!pool.free_shared(h2).unwrap());
        assert!(is_stale(pool.free_shared(h2), h2));
        assert!(is_stale(pool.free(h2), h2));
        assert!(is_stale(pool.share(h2), h2));
        let after = (
            pool.total_pages(),
            pool.stats().obj_used,
            pool.refs(h).unwrap(),
        );
        assert_eq!((before.0, before.1, before.2 - 1), after);
        assert_eq!(read(&pool, h, 3), b"abc");
        pool.check_invariants().unwrap();
        // The last handle goes, then it is stale too.
        assert!(pool.free_shared(h).unwrap());
        assert!(is_stale(pool.free_shared(h), h));
        assert!(is_stale(pool.free_shared(anchor), anchor));
        assert_eq!(pool.total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}

#[test]
fn object_ids_differ_between_objects_and_survive_compaction() {
    for config in layouts() {
        let pool = pool(config);
        let hs: Vec<Handle> = (0..200)
            .map(|i| {
                let h = pool.malloc(700).unwrap();
                pool.write(h, &[i as u8; 700]).unwrap();
                h
            })
            .collect();
        let shared: Vec<Handle> = hs
            .iter()
            .step_by(7)
            .map(|&h| pool.share(h).unwrap())
            .collect();
        let ids: Vec<u64> = hs.iter().map(|&h| pool.object_id(h).unwrap()).collect();
        let distinct: std::collections::HashSet<u64> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), hs.len());
        // Free most of the unshared ones, compact: ids do not change.
        let mut kept = Vec::new();
        for (i, &h) in hs.iter().enumerate() {
            if i % 7 == 0 || i % 3 == 0 {
                kept.push((h, ids[i], i as u8));
            } else {
                pool.free(h).unwrap();
            }
        }
        assert!(pool.compact() > 0);
        pool.check_invariants().unwrap();
        for &(h, id, byte) in &kept {
            assert_eq!(pool.object_id(h).unwrap(), id);
            assert_eq!(read(&pool, h, 700), [byte; 700]);
        }
        for (&s, &(h, id, _)) in shared.iter().zip(kept.iter().filter(|k| k.2 % 7 == 0)) {
            assert_eq!(pool.object_id(s).unwrap(), id);
            assert_eq!(pool.object_id(h).unwrap(), id);
        }
        for (h, _, _) in kept {
            pool.free(h).unwrap();
        }
        for s in shared {
            pool.free(s).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}
