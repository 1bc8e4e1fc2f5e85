//! Model test of shared objects: random sequences of malloc, write, share, free_shared,
//! malloc_dedup, fold, compact and stale-handle use against a model of objects (their
//! bytes, how many handles name them, whether they are shared, written, indexed), with
//! `check_invariants()` after every step and every handle's bytes (read back), `refs` and
//! `object_id` checked. Contents come from a few patterns and sizes, so duplicates are
//! common. In both layouts (the seed kernel's, with headers, and the zram device's), with
//! one shard per class and with several: then a `Pin` step moves the test thread's
//! allocations to another shard (`pin_malloc_shard`, as contention would), so copies,
//! shared objects and their handles spread over the shards of a class.

#[path = "common/pool.rs"]
mod pool;

use std::collections::HashMap;

use pool::pool;
use proptest::prelude::*;
use zsmalloc::{Error, Handle, Pool, PoolConfig, pin_malloc_shard};

/// Sizes from a few classes (the last one huge), so that duplicates meet.
const SIZES: [usize; 5] = [40, 200, 1000, 3000, 4096];

#[derive(Debug, Clone)]
enum Op {
    Malloc(usize),
    /// Write pattern `kind`, `len_sel` (see `data`), to a handle.
    Write(usize, u8, u8),
    Share(usize),
    Free(usize),
    Dedup(usize, u8, u8),
    Fold,
    Compact,
    Stale(usize),
    /// Allocate in shard `n % shards` from now on.
    Pin(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..SIZES.len()).prop_map(Op::Malloc),
        5 => (any::<usize>(), 0u8..3, any::<u8>()).prop_map(|(i, k, l)| Op::Write(i, k, l)),
        2 => any::<usize>().prop_map(Op::Share),
        4 => any::<usize>().prop_map(Op::Free),
        5 => (0..SIZES.len(), 0u8..3, any::<u8>()).prop_map(|(s, k, l)| Op::Dedup(s, k, l)),
        1 => Just(Op::Fold),
        1 => Just(Op::Compact),
        1 => any::<usize>().prop_map(Op::Stale),
        2 => any::<usize>().prop_map(Op::Pin),
    ]
}

/// Pattern `kind`, `len` bytes long: the whole capacity, a short prefix, or one byte.
fn data(kind: u8, len_sel: u8, cap: usize) -> Vec<u8> {
    let len = match len_sel % 3 {
        0 => cap,
        1 => 16.min(cap),
        _ => 1,
    };
    (0..len)
        .map(|i| kind.wrapping_mul(101) ^ (i % 7) as u8)
        .collect()
}

#[derive(Debug, Clone)]
struct Obj {
    /// The capacity bytes (zero-filled) once written; empty before.
    bytes: Vec<u8>,
    cap: usize,
    handles: usize,
    shared: bool,
    indexed: bool,
    /// A compaction ran with the object alive in a pool of several shards: it may have been
    /// merged into its class's home shard, and a merged object is an anchor, which fold
    /// keeps but never folds into another (`merge.rs`).
    merged: bool,
}

struct Harness {
    pool: Pool,
    shards: usize,
    objs: HashMap<u64, Obj>,
    of: HashMap<Handle, u64>,
    live: Vec<Handle>,
    stale: Vec<Handle>,
    next: u64,
}

fn fail(msg: impl Into<String>) -> TestCaseError {
    TestCaseError::fail(msg.into())
}

impl Harness {
    fn new(config: PoolConfig, shards: usize) -> Self {
        // Proptest runs the cases on one thread: start each unpinned.
        pin_malloc_shard(None);
        let pool = pool(config, shards);
        Self {
            pool,
            shards,
            objs: HashMap::new(),
            of: HashMap::new(),
            live: Vec::new(),
            stale: Vec::new(),
            next: 0,
        }
    }

    fn pick(&self, i: usize) -> Option<Handle> {
        (!self.live.is_empty()).then(|| self.live[i % self.live.len()])
    }

    fn add(&mut self, h: Handle, obj: Obj) {
        self.next += 1;
        self.objs.insert(self.next, obj);
        self.of.insert(h, self.next);
        self.live.push(h);
    }

    fn padded(&self, data: &[u8], cap: usize) -> Vec<u8> {
        let mut v = data.to_vec();
        v.resize(cap, 0);
        v
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Malloc(s) => {
                let h = self
                    .pool
                    .malloc(SIZES[s])
                    .map_err(|e| fail(e.to_string()))?;
                let cap = self.pool.capacity(h).unwrap();
                let obj = Obj {
                    bytes: Vec::new(),
                    cap,
                    handles: 1,
                    shared: false,
                    indexed: false,
                    merged: false,
                };
                self.add(h, obj);
            }
            Op::Write(i, kind, len_sel) => {
                let Some(h) = self.pick(i) else { return Ok(()) };
                let key = self.of[&h];
                let cap = self.objs[&key].cap;
                let d = data(kind, len_sel, cap);
                let r = self.pool.write(h, &d);
                let obj = self.objs.get_mut(&key).unwrap();
                if obj.shared {
                    prop_assert!(matches!(r, Err(Error::Shared(x)) if x == h), "{:?}", r);
                } else {
                    r.map_err(|e| fail(e.to_string()))?;
                    obj.bytes = d;
                    obj.bytes.resize(cap, 0);
                    obj.indexed = false;
                }
            }
            Op::Share(i) => {
                let Some(h) = self.pick(i) else { return Ok(()) };
                let h2 = self.pool.share(h).map_err(|e| fail(e.to_string()))?;
                let key = self.of[&h];
                let obj = self.objs.get_mut(&key).unwrap();
                obj.handles += 1;
                obj.shared = true;
                self.of.insert(h2, key);
                self.live.push(h2);
            }
            Op::Free(i) => {
                if self.live.is_empty() {
                    return Ok(());
                }
                let h = self.live.swap_remove(i % self.live.len());
                let key = self.of.remove(&h).unwrap();
                let gone = self.pool.free_shared(h).map_err(|e| fail(e.to_string()))?;
                let obj = self.objs.get_mut(&key).unwrap();
                obj.handles -= 1;
                prop_assert_eq!(gone, obj.handles == 0);
                if gone {
                    self.objs.remove(&key);
                }
                self.stale.push(h);
            }
            Op::Dedup(s, kind, len_sel) => {
                let d = data(kind, len_sel, SIZES[s]);
                let cap = self.pool.lookup_class(d.len()).unwrap().capacity();
                let padded = self.padded(&d, cap);
                let hit = self
                    .objs
                    .iter()
                    .find(|(_, o)| o.indexed && o.cap == cap && o.bytes == padded)
                    .map(|(&k, _)| k);
                let (h, shared) = self
                    .pool
                    .malloc_dedup(&d)
                    .map_err(|e| fail(e.to_string()))?;
                prop_assert_eq!(shared, hit.is_some());
                match hit {
                    Some(key) => {
                        let obj = self.objs.get_mut(&key).unwrap();
                        obj.handles += 1;
                        obj.shared = true;
                        self.of.insert(h, key);
                        self.live.push(h);
                    }
                    None => {
                        let obj = Obj {
                            bytes: padded,
                            cap,
                            handles: 1,
                            shared: false,
                            indexed: true,
                            merged: false,
                        };
                        self.add(h, obj);
                    }
                }
            }
            Op::Fold => self.fold()?,
            Op::Compact => {
                let before = self.pool.total_pages();
                let freed = self.pool.compact();
                prop_assert_eq!(self.pool.total_pages(), before - freed);
                prop_assert_eq!(self.pool.freeable_pages(), 0);
                if self.shards > 1 {
                    for o in self.objs.values_mut() {
                        o.merged = true;
                    }
                }
            }
            Op::Pin(n) => pin_malloc_shard(Some(n)),
            Op::Stale(i) => {
                if !self.stale.is_empty() {
                    let h = self.stale[i % self.stale.len()];
                    prop_assert!(matches!(
                        self.pool.free_shared(h),
                        Err(Error::StaleHandle(_))
                    ));
                    prop_assert!(matches!(self.pool.share(h), Err(Error::StaleHandle(_))));
                    prop_assert!(matches!(self.pool.refs(h), Err(Error::StaleHandle(_))));
                    prop_assert!(matches!(
                        self.pool.write(h, b"x"),
                        Err(Error::StaleHandle(_))
                    ));
                }
            }
        }
        self.check()
    }

    /// Folds, then regroups the model by the pool's object ids: objects may only have been
    /// joined when written with equal bytes in the same class.
    fn fold(&mut self) -> Result<(), TestCaseError> {
        let before = self.pool.total_pages();
        let folded_before = self.pool.pages_folded();
        let report = self.pool.fold();
        prop_assert_eq!(
            self.pool.total_pages() as u64,
            before as u64 - report.pages_freed
        );
        prop_assert_eq!(self.pool.pages_folded(), folded_before + report.pages_freed);
        let mut by_id: HashMap<u64, u64> = HashMap::new();
        let mut joined = 0;
        for &h in &self.live {
            let id = self.pool.object_id(h).unwrap();
            let key = self.of[&h];
            let into = *by_id.entry(id).or_insert(key);
            if into == key {
                continue;
            }
            let obj = self.objs.remove(&key).unwrap();
            let keep = self.objs.get_mut(&into).unwrap();
            prop_assert!(!obj.bytes.is_empty() && obj.bytes == keep.bytes && obj.cap == keep.cap);
            keep.handles += obj.handles;
            keep.shared = true;
            keep.indexed |= obj.indexed;
            joined += 1;
            for k in self.of.values_mut().filter(|k| **k == key) {
                *k = into;
            }
        }
        prop_assert_eq!(report.objects_folded, joined);
        // Every written content with two objects or more is kept only by shared (or maybe
        // merged) objects (anchors are never folded into each other).
        let mut contents: HashMap<(usize, &[u8]), Vec<bool>> = HashMap::new();
        for o in self.objs.values().filter(|o| !o.bytes.is_empty()) {
            contents
                .entry((o.cap, &o.bytes))
                .or_default()
                .push(o.shared || o.merged);
        }
        for shared in contents.values().filter(|v| v.len() > 1) {
            prop_assert!(shared.iter().all(|&s| s), "duplicates left after fold");
        }
        Ok(())
    }

    fn check(&self) -> Result<(), TestCaseError> {
        self.pool.check_invariants().map_err(fail)?;
        let stats = self.pool.stats();
        prop_assert_eq!(stats.obj_used, self.objs.len());
        let share = self.pool.share_stats();
        let shared = self.objs.values().filter(|o| o.shared && o.handles > 1);
        prop_assert_eq!(share.shared_objects, shared.clone().count() as u64);
        let extra: usize = shared.map(|o| o.handles - 1).sum();
        prop_assert_eq!(share.extra_handles, extra as u64);
        let indexed = self.objs.values().filter(|o| o.indexed).count();
        prop_assert_eq!(share.index_entries, indexed as u64);
        let mut ids: HashMap<u64, u64> = HashMap::new();
        for &h in &self.live {
            let key = self.of[&h];
            let obj = &self.objs[&key];
            let mut got = vec![0u8; obj.bytes.len()];
            self.pool
                .read(h, &mut got)
                .map_err(|e| fail(e.to_string()))?;
            prop_assert!(got == obj.bytes, "handle {h}: contents differ");
            let refs = if obj.shared { obj.handles } else { 1 };
            prop_assert_eq!(self.pool.refs(h).unwrap() as usize, refs);
            let id = self.pool.object_id(h).unwrap();
            prop_assert_eq!(*ids.entry(id).or_insert(key), key, "one id, two objects");
        }
        prop_assert_eq!(ids.len(), self.objs.len(), "one object, two ids");
        if self.objs.is_empty() {
            prop_assert_eq!(self.pool.total_pages(), 0);
        }
        Ok(())
    }
}

fn run(config: PoolConfig, shards: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut h = Harness::new(config, shards);
    let result = (|| {
        for op in ops {
            h.step(op)?;
        }
        h.step(&Op::Fold)?;
        while !h.live.is_empty() {
            h.step(&Op::Free(0))?;
        }
        prop_assert_eq!(h.pool.total_pages(), 0);
        Ok(())
    })();
    pin_malloc_shard(None);
    result
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn shared_model_chain_4_seed(ops in prop::collection::vec(op(), 1..250)) {
        run(PoolConfig::seed(4), 1, &ops)?;
    }

    #[test]
    fn shared_model_chain_8_device(ops in prop::collection::vec(op(), 1..250)) {
        run(PoolConfig { chain_size: 8, ..PoolConfig::default() }, 1, &ops)?;
    }

    #[test]
    fn shared_model_chain_16_seed(ops in prop::collection::vec(op(), 1..250)) {
        run(PoolConfig::seed(16), 1, &ops)?;
    }

    #[test]
    fn shared_model_3_shards_chain_4_seed(ops in prop::collection::vec(op(), 1..250)) {
        run(PoolConfig::seed(4), 3, &ops)?;
    }

    #[test]
    fn shared_model_2_shards_chain_8_device(ops in prop::collection::vec(op(), 1..250)) {
        run(PoolConfig { chain_size: 8, ..PoolConfig::default() }, 2, &ops)?;
    }
}
