//! Shared objects: `share` gives another handle to the same object, `free_shared` drops one
//! handle and says when the object went, `refs` and `object_id` tell which handles name
//! one object; shared objects are read-only; stale, double and forged frees fail loudly
//! and change nothing. In both layouts: the zram device's (no header) and the seed
//! kernel's (`PoolConfig::seed`: the handle in every object's header, which for a shared
//! object names its anchor — the invariants check it). Handles of one object may live in
//! different shards of its class (remote aliases, made by folding copies in two shards):
//! they share, read, count and free like any other.

#[path = "common/layouts.rs"]
mod layouts;
#[path = "common/pool.rs"]
mod pool;
#[path = "common/read.rs"]
mod read;
#[path = "common/store_in.rs"]
mod store_in;

use layouts::layouts;
use pool::pool;
use read::read;
use store_in::store_in;
use zsmalloc::{Error, Handle, Pool};

fn is_stale<T: std::fmt::Debug>(r: zsmalloc::Result<T>, h: Handle) -> bool {
    matches!(r, Err(Error::StaleHandle(x)) if x == h)
}

/// Every handle-taking operation but `free` refuses the forged handle `forged` as stale.
fn assert_forged_refused(pool: &Pool, forged: Handle) {
    assert!(is_stale(pool.free_shared(forged), forged), "free {forged}");
    assert!(is_stale(pool.share(forged), forged));
    assert!(is_stale(pool.refs(forged), forged));
    assert!(is_stale(pool.object_id(forged), forged));
    assert!(is_stale(pool.read(forged, &mut [0u8; 3]), forged));
    assert!(is_stale(pool.write(forged, b"x"), forged));
    assert!(is_stale(pool.capacity(forged), forged));
}

#[test]
fn share_counts_references_and_the_last_free_takes_the_object() {
    for config in layouts() {
        let pool = pool(config, 1);
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
        let pool = pool(config, 1);
        let h = pool.malloc(100).unwrap();
        assert!(pool.free_shared(h).unwrap());
        assert!(is_stale(pool.free_shared(h), h));
        assert_eq!(pool.total_pages(), 0);
    }
}

#[test]
fn writes_to_a_shared_object_are_refused_through_every_handle() {
    for config in layouts() {
        let pool = pool(config, 1);
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
        let pool = pool(config, 1);
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
            assert_forged_refused(&pool, forged);
            assert!(is_stale(pool.free(forged), forged));
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
        let pool = pool(config, 1);
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

/// The class-shard position a handle names (`handle.rs`: bits 47..59).
fn shard(h: Handle) -> u64 {
    (h.to_raw() >> 47) & 0xFFF
}

/// Two copies of `data`, written in shards 0 and 1 of a two-shard pool, then folded: the
/// copy in shard 0 is kept and the handle in shard 1 becomes a remote alias of its anchor.
fn remote_pair(pool: &Pool, data: &[u8]) -> (Handle, Handle) {
    let mut hs = [0, 1].map(|s| store_in(pool, s, data));
    assert_eq!(shard(hs[1]), shard(hs[0]) + 1);
    assert_eq!(pool.fold().objects_folded, 1);
    pool.check_invariants().unwrap();
    hs.sort_by_key(|&h| shard(h));
    (hs[0], hs[1])
}

#[test]
fn remote_aliases_share_read_count_and_free_across_shards() {
    for config in layouts() {
        let pool = pool(config, 2);
        let (local, remote) = remote_pair(&pool, b"one object, two shards");
        let id = pool.object_id(local).unwrap();
        assert_eq!(pool.object_id(remote).unwrap(), id);
        assert_eq!(
            (pool.refs(local).unwrap(), pool.refs(remote).unwrap()),
            (2, 2)
        );
        assert_eq!(read(&pool, remote, 22), b"one object, two shards");
        assert!(pool.with_object(remote, 3, |b| b == b"one").unwrap());
        assert_eq!(
            pool.capacity(remote).unwrap(),
            pool.capacity(local).unwrap()
        );
        for h in [local, remote] {
            assert!(matches!(pool.write(h, b"x"), Err(Error::Shared(x)) if x == h));
        }
        assert_eq!(pool.stats().obj_used, 1);

        // Sharing a remote alias issues the new handle in the anchor's shard.
        let third = pool.share(remote).unwrap();
        assert_eq!(shard(third), shard(local));
        assert_eq!(pool.refs(remote).unwrap(), 3);
        assert_eq!(pool.object_id(third).unwrap(), id);
        let s = pool.share_stats();
        assert_eq!((s.shared_objects, s.extra_handles), (1, 2));
        pool.check_invariants().unwrap();

        // Freeing the remote alias drops the anchor's count in the other shard.
        assert!(!pool.free_shared(remote).unwrap());
        assert!(is_stale(pool.read(remote, &mut [0u8; 1]), remote));
        assert_eq!(pool.refs(local).unwrap(), 2);
        pool.check_invariants().unwrap();
        assert!(!pool.free_shared(local).unwrap());
        assert!(pool.free_shared(third).unwrap());
        assert_eq!(pool.total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}

#[test]
fn the_last_handle_of_an_object_may_be_a_remote_alias() {
    for config in layouts() {
        let pool = pool(config, 2);
        let (local, remote) = remote_pair(&pool, &[0x5A; 3000]);
        let more: Vec<Handle> = (0..3).map(|_| pool.share(remote).unwrap()).collect();
        assert!(!pool.free_shared(local).unwrap());
        for h in more {
            assert!(!pool.free_shared(h).unwrap());
        }
        // Only the alias in shard 1 is left: it still reads the object in shard 0.
        assert_eq!(pool.refs(remote).unwrap(), 1);
        assert_eq!(read(&pool, remote, 3000), [0x5A; 3000]);
        pool.check_invariants().unwrap();
        assert!(pool.free_shared(remote).unwrap());
        assert_eq!((pool.stats().obj_used, pool.total_pages()), (0, 0));
        pool.check_invariants().unwrap();
    }
}

#[test]
fn stale_double_and_forged_uses_of_remote_aliases_fail_and_change_nothing() {
    for config in layouts() {
        let pool = pool(config, 2);
        let (local, remote) = remote_pair(&pool, b"abc");
        // In the new pool `local` took entry 0 of its table and the fold's anchor entry 1.
        let anchor = Handle::from_raw(local.to_raw() + 1);
        let next_generation = Handle::from_raw(remote.to_raw() + (1 << 28));
        let no_shard = Handle::from_raw(remote.to_raw() | (0xFFF << 47));
        let before = (pool.total_pages(), pool.refs(local).unwrap());
        for forged in [anchor, next_generation, no_shard] {
            assert_forged_refused(&pool, forged);
        }
        assert_eq!((pool.total_pages(), pool.refs(local).unwrap()), before);
        pool.check_invariants().unwrap();
        // A remote alias freed twice: the second free fails, and the object stays.
        assert!(!pool.free_shared(remote).unwrap());
        for _ in 0..2 {
            assert!(is_stale(pool.free_shared(remote), remote));
            assert!(is_stale(pool.share(remote), remote));
            assert!(is_stale(pool.refs(remote), remote));
            assert!(is_stale(pool.object_id(remote), remote));
        }
        assert_eq!(pool.refs(local).unwrap(), 1);
        assert_eq!(read(&pool, local, 3), b"abc");
        pool.check_invariants().unwrap();
        // Its entry is reused by the next handle of its shard, with a new generation.
        zsmalloc::pin_malloc_shard(Some(1));
        let reuse = pool.malloc(3).unwrap();
        zsmalloc::pin_malloc_shard(None);
        assert_eq!(shard(reuse), shard(remote));
        assert_ne!(reuse, remote);
        assert!(is_stale(pool.free_shared(remote), remote));
        pool.check_invariants().unwrap();
        assert!(pool.free_shared(local).unwrap());
        pool.free(reuse).unwrap();
        assert_eq!(pool.total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}
