//! Compaction moves a shared object once, through its anchor, and every handle naming it
//! still reads it afterwards; objects count once however many handles name them. In both
//! layouts: the zram device's (no header) and the seed kernel's (`PoolConfig::seed`, where
//! a shared object's header names its anchor and must still after the move — the
//! invariants check it). Also when the handles are in another shard than the object.

#[path = "common/layouts.rs"]
mod layouts;
#[path = "common/pool.rs"]
mod pool;
#[path = "common/random.rs"]
mod random;
#[path = "common/store_in.rs"]
mod store_in;

use layouts::layouts;
use pool::pool;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use random::random_object;
use store_in::store_in;
use zsmalloc::Handle;

#[test]
fn compaction_moves_shared_objects_once_and_every_handle_follows() {
    for config in layouts() {
        let pool = pool(config, 1);
        let mut rng = StdRng::seed_from_u64(4);
        // Objects of one class, each written with its own bytes.
        let size = 900;
        let class = *pool.lookup_class(size).unwrap();
        let mut objs: Vec<(Handle, Vec<u8>)> = (0..2000)
            .map(|_| random_object(&pool, &mut rng, size))
            .collect();
        objs.shuffle(&mut rng);
        // Free three quarters; share every survivor 1..=3 times.
        for (h, _) in objs.drain(..1500) {
            pool.free(h).unwrap();
        }
        let mut handles: Vec<(Handle, usize)> = Vec::new();
        for (i, (h, _)) in objs.iter().enumerate() {
            handles.push((*h, i));
            for _ in 0..rng.gen_range(1..=3) {
                handles.push((pool.share(*h).unwrap(), i));
            }
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.stats().obj_used, 500);
        let ids: Vec<u64> = objs
            .iter()
            .map(|(h, _)| pool.object_id(*h).unwrap())
            .collect();
        let before = pool.total_pages();
        assert!(pool.freeable_pages() > 0);

        let freed = pool.compact();
        pool.check_invariants().unwrap();
        assert!(freed > 0);
        assert_eq!(pool.total_pages(), before - freed);
        assert_eq!(pool.freeable_pages(), 0);
        // 500 objects in nearly full zspages: the moves counted objects, not handles.
        let row = pool
            .class_stats()
            .into_iter()
            .find(|r| r.index == class.index)
            .unwrap();
        assert_eq!(row.obj_used, 500);
        assert!(row.obj_allocated - row.obj_used < class.objs_per_zspage);
        for &(h, i) in &handles {
            let mut got = vec![0u8; size];
            pool.read(h, &mut got).unwrap();
            assert_eq!(
                got, objs[i].1,
                "{:?}: handle {h} after compaction",
                config.header
            );
            assert_eq!(pool.object_id(h).unwrap(), ids[i]);
        }
        // Dropping every handle but one per object, in random order, frees nothing.
        handles.shuffle(&mut rng);
        let mut last = vec![None; objs.len()];
        for (h, i) in handles {
            if let Some(prev) = last[i].replace(h) {
                assert!(!pool.free_shared(prev).unwrap());
            }
        }
        assert_eq!(pool.total_pages(), before - freed);
        pool.compact();
        pool.check_invariants().unwrap();
        for h in last.into_iter().flatten() {
            assert!(pool.free_shared(h).unwrap());
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.total_pages(), 0);
    }
}

/// Anchors in shard 0 whose only handles are remote aliases in shard 1: compacting shard 0
/// moves the objects, and the aliases in shard 1 (which name the anchors' entries, not
/// places) still read them. In both layouts (with headers, each moved object's header
/// still names its anchor).
#[test]
fn compaction_moves_objects_whose_handles_are_in_another_shard() {
    for config in layouts() {
        let pool = pool(config, 2);
        let mut rng = StdRng::seed_from_u64(9);
        let size = 900;
        let contents: Vec<Vec<u8>> = (0..1200)
            .map(|_| {
                let mut data = vec![0u8; size];
                rng.fill(&mut data[..]);
                data
            })
            .collect();
        // Every content in shard 0; every fourth one copied into shard 1.
        let originals: Vec<Handle> = contents.iter().map(|d| store_in(&pool, 0, d)).collect();
        let copies: Vec<(Handle, usize)> = (0..contents.len())
            .step_by(4)
            .map(|i| (store_in(&pool, 1, &contents[i]), i))
            .collect();
        let report = pool.fold();
        assert_eq!(report.objects_folded, copies.len() as u64);
        // Shard 0 keeps the objects; the copies' handles are remote aliases now. Free every
        // handle in shard 0: the folded objects stay for their remote aliases alone.
        for (i, h) in originals.into_iter().enumerate() {
            assert_eq!(pool.free_shared(h).unwrap(), i % 4 != 0);
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.stats().obj_used, copies.len());
        assert!(pool.freeable_pages() > 0);
        let before = pool.total_pages();
        let freed = pool.compact();
        pool.check_invariants().unwrap();
        assert!(freed > 0);
        assert_eq!(pool.total_pages(), before - freed);
        assert_eq!(pool.freeable_pages(), 0);
        for &(h, i) in &copies {
            let mut got = vec![0u8; size];
            pool.read(h, &mut got).unwrap();
            assert_eq!(
                got, contents[i],
                "{:?}: handle {h} after compaction",
                config.header
            );
            assert_eq!(pool.refs(h).unwrap(), 1);
        }
        for (h, _) in copies {
            assert!(pool.free_shared(h).unwrap());
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.total_pages(), 0);
    }
}
