//! Model test: random operation sequences against a `HashMap<Handle, Vec<u8>>`, with
//! `check_invariants()` after every step and every object's contents read back exactly,
//! for chain sizes 1, 4, 8 and 16. Stale and double-free attempts must fail and change
//! nothing; compaction must keep every object's bytes behind its handle.
//!
//! Each in both layouts: the seed kernel's (`PoolConfig::seed`: its zspage lengths, the
//! handle in every object's header, which the invariants check) and the zram device's (the
//! default: min-waste zspage lengths, no header, so compaction finds objects through the
//! handle table alone).
//!
//! And in each locking mode (`PoolConfig::locking`): sharded (the default), class and pool.
//! With three shards, mallocs go to the shards in turn (as threads contending for every
//! class would put them), so compaction also merges the shards (`merge.rs`).

use std::collections::HashMap;

use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use zsmalloc::{Error, Handle, Locking, Pool, PoolConfig, pin_malloc_shard};

/// How a malloc size is chosen; `NearHuge` is relative to the pool's `huge_class_size`.
#[derive(Debug, Clone, Copy)]
enum SizeSel {
    Exact(usize),
    NearHuge(isize),
}

#[derive(Debug, Clone)]
enum Op {
    Malloc(SizeSel),
    /// Many objects of one size, so that classes get several zspages.
    Burst(SizeSel, usize),
    /// Write `len_sel` bytes (see `write_len`) generated from `seed` to a live object.
    Write(usize, u16, u64),
    Read(usize),
    Free(usize),
    /// Free a random share (in per mille) of the live objects.
    FreeMany(u16, u64),
    /// Free, read, write, capacity on an already freed handle.
    Stale(usize),
    /// Write one byte past the object's capacity.
    WriteTooLarge(usize),
    Compact,
}

fn size_sel() -> impl Strategy<Value = SizeSel> {
    prop_oneof![
        Just(SizeSel::Exact(1)),
        (2usize..=32).prop_map(SizeSel::Exact),
        (33usize..=512).prop_map(SizeSel::Exact),
        (513usize..=3000).prop_map(SizeSel::Exact),
        (-24isize..=24).prop_map(SizeSel::NearHuge),
        (3800usize..=4096).prop_map(SizeSel::Exact),
        Just(SizeSel::Exact(4096)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => size_sel().prop_map(Op::Malloc),
        1 => (size_sel(), 1usize..80).prop_map(|(s, n)| Op::Burst(s, n)),
        5 => (any::<usize>(), any::<u16>(), any::<u64>()).prop_map(|(i, l, s)| Op::Write(i, l, s)),
        3 => any::<usize>().prop_map(Op::Read),
        4 => any::<usize>().prop_map(Op::Free),
        1 => (0u16..=1000, any::<u64>()).prop_map(|(f, s)| Op::FreeMany(f, s)),
        2 => any::<usize>().prop_map(Op::Stale),
        1 => any::<usize>().prop_map(Op::WriteTooLarge),
        2 => Just(Op::Compact),
    ]
}

fn resolve(sel: SizeSel, huge: usize) -> usize {
    match sel {
        SizeSel::Exact(s) => s,
        SizeSel::NearHuge(d) => huge.saturating_add_signed(d).clamp(1, 4096),
    }
}

/// Lengths biased to the edges: the whole capacity, nothing, one byte, or anything.
fn write_len(sel: u16, cap: usize) -> usize {
    match sel % 5 {
        0 => cap,
        1 => 0,
        2 => 1.min(cap),
        _ => usize::from(sel) % (cap + 1),
    }
}

fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

/// The seed kernel's layout.
fn seed(chain: usize) -> PoolConfig {
    PoolConfig::seed(chain)
}

/// The zram device's layout (the default).
fn device(chain: usize) -> PoolConfig {
    PoolConfig {
        chain_size: chain,
        ..PoolConfig::default()
    }
}

/// `config` with another locking mode (its `shards` setting, given to `run`, then applies
/// to nothing).
fn locking(locking: Locking, config: PoolConfig) -> PoolConfig {
    PoolConfig { locking, ..config }
}

/// The pool under test, the model, and the handles in a stable order for picking.
struct Harness {
    pool: Pool,
    model: HashMap<Handle, Vec<u8>>,
    live: Vec<Handle>,
    stale: Vec<Handle>,
    /// Shards per class, and mallocs so far (they go to the shards in turn).
    shards: usize,
    mallocs: usize,
}

impl Harness {
    fn new(config: PoolConfig, shards: usize) -> Self {
        Self {
            pool: Pool::with_config(PoolConfig {
                populate: false,
                shards,
                ..config
            })
            .unwrap(),
            model: HashMap::new(),
            live: Vec::new(),
            stale: Vec::new(),
            shards,
            mallocs: 0,
        }
    }

    fn pick(&self, i: usize) -> Option<Handle> {
        (!self.live.is_empty()).then(|| self.live[i % self.live.len()])
    }

    fn malloc(&mut self, size: usize) -> Result<(), TestCaseError> {
        pin_malloc_shard((self.shards > 1).then_some(self.mallocs % self.shards));
        self.mallocs += 1;
        let h = self.pool.malloc(size);
        pin_malloc_shard(None);
        let h = h.map_err(|e| fail(format!("malloc({size}): {e}")))?;
        prop_assert!(!self.model.contains_key(&h), "handle {h} issued twice");
        let cap = self.pool.capacity(h).unwrap();
        prop_assert!(cap >= size, "capacity {cap} < size {size}");
        prop_assert_eq!(cap, self.pool.lookup_class(size).unwrap().capacity());
        self.model.insert(h, Vec::new());
        self.live.push(h);
        Ok(())
    }

    fn free(&mut self, pos: usize) -> Result<(), TestCaseError> {
        let h = self.live.swap_remove(pos);
        self.model.remove(&h);
        self.pool
            .free(h)
            .map_err(|e| fail(format!("free({h}): {e}")))?;
        self.stale.push(h);
        Ok(())
    }

    fn verify(&self, h: Handle) -> Result<(), TestCaseError> {
        let want = &self.model[&h];
        let mut got = vec![0u8; want.len()];
        self.pool
            .read(h, &mut got)
            .map_err(|e| fail(format!("read({h}): {e}")))?;
        prop_assert!(&got == want, "handle {h}: contents differ");
        let same = self
            .pool
            .with_object(h, want.len(), |b| b == &want[..])
            .map_err(|e| fail(format!("with_object({h}): {e}")))?;
        prop_assert!(same, "handle {h}: with_object contents differ");
        Ok(())
    }

    fn verify_all(&self) -> Result<(), TestCaseError> {
        for &h in &self.live {
            self.verify(h)?;
        }
        Ok(())
    }

    /// Pool-wide counters agree with the model.
    fn check_counters(&self) -> Result<(), TestCaseError> {
        self.pool.check_invariants().map_err(fail)?;
        let stats = self.pool.stats();
        prop_assert_eq!(stats.obj_used, self.model.len());
        prop_assert!(stats.obj_allocated >= stats.obj_used);
        prop_assert_eq!(stats.pages_allocated, self.pool.total_pages());
        let rows = self.pool.class_stats();
        let pages: usize = rows.iter().map(|r| r.pages_used).sum();
        prop_assert_eq!(pages, self.pool.total_pages());
        let freeable: usize = rows.iter().map(|r| r.freeable).sum();
        prop_assert_eq!(freeable, self.pool.freeable_pages());
        if self.model.is_empty() {
            prop_assert_eq!(self.pool.total_pages(), 0, "an empty pool holds no pages");
        }
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let huge = self.pool.huge_class_size();
        match *op {
            Op::Malloc(sel) => self.malloc(resolve(sel, huge))?,
            Op::Burst(sel, n) => {
                let size = resolve(sel, huge);
                for _ in 0..n {
                    self.malloc(size)?;
                }
            }
            Op::Write(i, len_sel, seed) => {
                if let Some(h) = self.pick(i) {
                    let cap = self.pool.capacity(h).unwrap();
                    let data = bytes(seed, write_len(len_sel, cap));
                    self.pool
                        .write(h, &data)
                        .map_err(|e| fail(format!("write: {e}")))?;
                    // A write zero-fills the rest of the object: its whole capacity reads so.
                    let m = self.model.get_mut(&h).unwrap();
                    *m = data;
                    m.resize(cap, 0);
                    self.verify(h)?;
                }
            }
            Op::Read(i) => {
                if let Some(h) = self.pick(i) {
                    self.verify(h)?;
                }
            }
            Op::Free(i) => {
                if !self.live.is_empty() {
                    self.free(i % self.live.len())?;
                }
            }
            Op::FreeMany(per_mille, seed) => {
                let mut rng = StdRng::seed_from_u64(seed);
                let mut i = 0;
                while i < self.live.len() {
                    if rng.gen_range(0..1000) < per_mille {
                        self.free(i)?;
                    } else {
                        i += 1;
                    }
                }
            }
            Op::Stale(i) => {
                if !self.stale.is_empty() {
                    let h = self.stale[i % self.stale.len()];
                    let before = (self.pool.total_pages(), self.pool.stats().obj_used);
                    prop_assert!(matches!(self.pool.free(h), Err(Error::StaleHandle(x)) if x == h));
                    prop_assert!(matches!(
                        self.pool.read(h, &mut [0u8; 1]),
                        Err(Error::StaleHandle(_))
                    ));
                    prop_assert!(matches!(
                        self.pool.write(h, b"x"),
                        Err(Error::StaleHandle(_))
                    ));
                    prop_assert!(matches!(self.pool.capacity(h), Err(Error::StaleHandle(_))));
                    prop_assert!(matches!(
                        self.pool.with_object(h, 0, |_| ()),
                        Err(Error::StaleHandle(_))
                    ));
                    let after = (self.pool.total_pages(), self.pool.stats().obj_used);
                    prop_assert_eq!(before, after);
                    self.verify_all()?;
                }
            }
            Op::WriteTooLarge(i) => {
                if let Some(h) = self.pick(i) {
                    let cap = self.pool.capacity(h).unwrap();
                    let r = self.pool.write(h, &vec![0xEE; cap + 1]);
                    prop_assert!(
                        matches!(r, Err(Error::TooLarge { len, capacity }) if len == cap + 1 && capacity == cap),
                        "write of cap+1: {:?}",
                        r
                    );
                    self.verify(h)?;
                }
            }
            Op::Compact => {
                let before = self.pool.total_pages();
                let compacted = self.pool.stats().pages_compacted;
                let freed = self.pool.compact();
                prop_assert_eq!(self.pool.total_pages(), before - freed);
                // Nothing left to free, and no partly used zspage longer than it must be.
                prop_assert_eq!(self.pool.freeable_pages(), 0);
                prop_assert_eq!(self.pool.shortenable_pages(), 0);
                prop_assert_eq!(self.pool.stats().pages_compacted, compacted + freed as u64);
                self.verify_all()?;
            }
        }
        self.check_counters()
    }
}

fn fail(msg: impl Into<String>) -> TestCaseError {
    TestCaseError::fail(msg.into())
}

fn run(config: PoolConfig, shards: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut h = Harness::new(config, shards);
    for op in ops {
        h.step(op)?;
    }
    h.step(&Op::Compact)?;
    h.verify_all()?;
    while !h.live.is_empty() {
        h.free(0)?;
    }
    h.check_counters()?;
    prop_assert_eq!(h.pool.total_pages(), 0);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn model_chain_1_seed(ops in prop::collection::vec(op(), 1..300)) {
        run(seed(1), 1, &ops)?;
    }

    #[test]
    fn model_chain_4_seed(ops in prop::collection::vec(op(), 1..300)) {
        run(seed(4), 1, &ops)?;
    }

    #[test]
    fn model_chain_8_three_shards_seed(ops in prop::collection::vec(op(), 1..300)) {
        run(seed(8), 3, &ops)?;
    }

    #[test]
    fn model_chain_16_seed(ops in prop::collection::vec(op(), 1..300)) {
        run(seed(16), 1, &ops)?;
    }

    #[test]
    fn model_chain_4_device(ops in prop::collection::vec(op(), 1..300)) {
        run(device(4), 1, &ops)?;
    }

    #[test]
    fn model_chain_8_three_shards_device(ops in prop::collection::vec(op(), 1..300)) {
        run(device(8), 3, &ops)?;
    }

    #[test]
    fn model_chain_16_device(ops in prop::collection::vec(op(), 1..300)) {
        run(device(16), 1, &ops)?;
    }

    #[test]
    fn model_chain_4_pool_locking_seed(ops in prop::collection::vec(op(), 1..300)) {
        run(locking(Locking::Pool, seed(4)), 3, &ops)?;
    }

    #[test]
    fn model_chain_8_pool_locking_device(ops in prop::collection::vec(op(), 1..300)) {
        run(locking(Locking::Pool, device(8)), 3, &ops)?;
    }

    #[test]
    fn model_chain_8_class_locking_device(ops in prop::collection::vec(op(), 1..300)) {
        run(locking(Locking::Class, device(8)), 3, &ops)?;
    }
}

/// Deterministic: many small objects, most freed at random, then compaction must move the
/// survivors into fewer zspages (freeing pages) without changing what their handles read.
#[test]
fn compaction_moves_objects_and_keeps_contents() {
    for config in [1, 4, 8, 16].into_iter().flat_map(|c| [seed(c), device(c)]) {
        let chain = format!(
            "{} ({:?}, {:?})",
            config.chain_size, config.geometry, config.header
        );
        let pool = Pool::with_config(PoolConfig {
            populate: false,
            shards: 1,
            ..config
        })
        .unwrap();
        let mut rng = StdRng::seed_from_u64(0x5eed + config.chain_size as u64);
        let mut objs: Vec<(Handle, Vec<u8>)> = (0..20_000)
            .map(|i| {
                let size = rng.gen_range(16..=400);
                let h = pool.malloc(size).unwrap();
                let mut data = vec![0u8; size];
                rng.fill(&mut data[..]);
                data[..8].copy_from_slice(&(i as u64).to_le_bytes());
                pool.write(h, &data).unwrap();
                (h, data)
            })
            .collect();
        objs.shuffle(&mut rng);
        for (h, _) in objs.drain(..16_000) {
            pool.free(h).unwrap();
        }
        pool.check_invariants().unwrap();
        let before = pool.total_pages();
        let freeable = pool.freeable_pages();
        assert!(freeable > 0, "chain {chain}: nothing to compact");
        assert_eq!(pool.stats().pages_compacted, 0);

        let freed = pool.compact();
        pool.check_invariants().unwrap();
        assert!(freed > 0, "chain {chain}: compaction freed nothing");
        assert!(
            freed >= freeable,
            "chain {chain}: freed {freed} < {freeable}"
        );
        assert_eq!(pool.total_pages(), before - freed);
        assert_eq!(pool.freeable_pages(), 0);
        assert_eq!(pool.shortenable_pages(), 0);
        assert_eq!(pool.stats().pages_compacted, freed as u64);
        // Occupied zspages are now nearly full: per class, fewer than one zspage of holes.
        for row in pool.class_stats() {
            let c = pool.classes().class_at_index(row.index).unwrap();
            assert!(
                row.obj_allocated - row.obj_used < c.objs_per_zspage,
                "chain {chain}: class {} still has {} holes",
                row.index,
                row.obj_allocated - row.obj_used
            );
        }
        for (h, data) in &objs {
            let mut got = vec![0u8; data.len()];
            pool.read(*h, &mut got).unwrap();
            assert_eq!(&got, data, "chain {chain}: handle {h} after compaction");
        }
        // A second compaction has nothing left to do.
        assert_eq!(pool.compact(), 0);
        assert_eq!(pool.stats().pages_compacted, freed as u64);
        // The survivors are still writable and freeable through their handles.
        for (h, data) in &objs {
            pool.write(*h, &data.iter().rev().copied().collect::<Vec<_>>())
                .unwrap();
        }
        for (h, data) in objs {
            let mut got = vec![0u8; data.len()];
            pool.read(h, &mut got).unwrap();
            assert!(got.iter().eq(data.iter().rev()));
            pool.free(h).unwrap();
        }
        pool.check_invariants().unwrap();
        assert_eq!(pool.total_pages(), 0);
    }
}

/// Beyond the kernel: a partly used zspage is moved into a short zspage of just enough pages.
#[test]
fn compaction_shortens_partly_used_zspages() {
    for config in [seed(8), device(8)] {
        let header = config.header;
        let pool = Pool::with_config(PoolConfig {
            populate: false,
            shards: 1,
            ..config
        })
        .unwrap();
        // A class whose zspages have several pages.
        let class = *pool
            .classes()
            .classes()
            .iter()
            .find(|c| c.pages_per_zspage >= 4 && c.size >= 400)
            .unwrap();
        let size = class.capacity();
        let full = class.objs_per_zspage;
        let mut objs: Vec<(Handle, Vec<u8>)> = (0..full + 3)
            .map(|i| {
                let h = pool.malloc(size).unwrap();
                let data: Vec<u8> = (0..size).map(|j| (i * 7 + j) as u8).collect();
                pool.write(h, &data).unwrap();
                (h, data)
            })
            .collect();
        // Two zspages: one full, one holding 3 objects.
        assert_eq!(pool.total_pages(), 2 * class.pages_per_zspage);
        assert_eq!(
            pool.freeable_pages(),
            0,
            "nothing for the kernel's compaction"
        );
        let short = (3 * class.size).div_ceil(4096);
        assert_eq!(
            pool.shortenable_pages(),
            class.pages_per_zspage - short,
            "{header:?}"
        );
        let freed = pool.compact();
        assert_eq!(freed, class.pages_per_zspage - short, "{header:?}");
        assert_eq!(pool.total_pages(), class.pages_per_zspage + short);
        assert_eq!(pool.shortenable_pages(), 0);
        pool.check_invariants().unwrap();
        for (h, data) in &objs {
            let mut got = vec![0u8; size];
            pool.read(*h, &mut got).unwrap();
            assert_eq!(&got, data, "{header:?}: {h} after shortening");
        }
        let row = pool
            .class_stats()
            .into_iter()
            .find(|r| r.index == class.index)
            .unwrap();
        assert_eq!(row.pages_used, pool.total_pages());
        assert_eq!(row.obj_used, full + 3);
        assert_eq!(row.obj_allocated, full + short * 4096 / class.size);
        // New objects fill the short zspage first, then get full-length zspages again.
        let room = short * 4096 / class.size - 3;
        for _ in 0..room {
            objs.push((pool.malloc(size).unwrap(), Vec::new()));
        }
        assert_eq!(pool.total_pages(), class.pages_per_zspage + short);
        objs.push((pool.malloc(size).unwrap(), Vec::new()));
        assert_eq!(pool.total_pages(), 2 * class.pages_per_zspage + short);
        pool.check_invariants().unwrap();
        for (h, _) in objs {
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
        pool.check_invariants().unwrap();
    }
}
