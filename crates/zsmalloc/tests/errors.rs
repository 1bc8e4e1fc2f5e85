//! Bad input gets a clear error, never a panic, and loses nothing: out-of-range sizes and
//! chain sizes, stale and double-freed handles, forged handles, handles from another pool,
//! and writes past an object's capacity. Each in both layouts: the zram device's (the
//! default: min-waste geometry, no handle header) and the seed kernel's (`PoolConfig::seed`:
//! its geometry, the handle in every object's header, which a bad write must not clobber).

#[path = "common/random.rs"]
mod random;

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use random::random_object;
use zsmalloc::{Error, Handle, Pool, PoolConfig};

/// The device's layout and the seed kernel's, for zspages of at most `chain` pages.
fn layouts(chain: usize) -> [PoolConfig; 2] {
    [
        PoolConfig {
            chain_size: chain,
            ..PoolConfig::default()
        },
        PoolConfig::seed(chain),
    ]
}

fn pool(config: PoolConfig) -> Pool {
    Pool::with_config(PoolConfig {
        populate: false,
        shards: 2,
        ..config
    })
    .unwrap()
}

fn is_stale(r: zsmalloc::Result<impl std::fmt::Debug>, h: Handle) -> bool {
    matches!(r, Err(Error::StaleHandle(x)) if x == h)
}

/// Every handle-taking operation refuses `h` with `StaleHandle(h)`.
fn assert_refused(pool: &Pool, h: Handle) {
    assert!(is_stale(pool.free(h), h), "free({h})");
    assert!(is_stale(pool.read(h, &mut [0u8; 4]), h), "read({h})");
    assert!(is_stale(pool.read(h, &mut []), h), "empty read({h})");
    assert!(is_stale(pool.write(h, b"abcd"), h), "write({h})");
    assert!(is_stale(pool.write(h, b""), h), "empty write({h})");
    assert!(is_stale(pool.capacity(h), h), "capacity({h})");
    assert!(
        is_stale(pool.with_object(h, 1, |b| b.to_vec()), h),
        "with_object({h})"
    );
}

/// Live objects with known contents, to check that refused operations lose nothing.
struct Population {
    objs: HashMap<Handle, Vec<u8>>,
}

impl Population {
    fn fill(pool: &Pool, sizes: &[usize], seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let objs = sizes
            .iter()
            .map(|&size| random_object(pool, &mut rng, size))
            .collect();
        Self { objs }
    }

    /// Contents intact, identities hold, and the pool holds `others` objects besides.
    fn verify(&self, pool: &Pool, others: usize) {
        pool.check_invariants().unwrap();
        assert_eq!(pool.stats().obj_used, self.objs.len() + others);
        for (&h, data) in &self.objs {
            let mut got = vec![0u8; data.len()];
            pool.read(h, &mut got).unwrap();
            assert_eq!(&got, data, "handle {h}");
        }
    }
}

#[test]
fn out_of_range_sizes() {
    for config in layouts(8) {
        out_of_range_sizes_in(&pool(config));
    }
}

fn out_of_range_sizes_in(p: &Pool) {
    for size in [0, 4097, 8192, usize::MAX] {
        assert!(
            matches!(p.malloc(size), Err(Error::InvalidSize(s)) if s == size),
            "malloc({size})"
        );
        assert!(matches!(p.lookup_class(size), Err(Error::InvalidSize(s)) if s == size));
    }
    assert_eq!(p.total_pages(), 0);
    assert_eq!(p.stats().obj_used, 0);
    p.check_invariants().unwrap();
    // The bounds themselves are fine.
    let a = p.malloc(1).unwrap();
    let b = p.malloc(4096).unwrap();
    assert!(p.capacity(a).unwrap() >= 1);
    assert_eq!(p.capacity(b).unwrap(), 4096);
    p.free(a).unwrap();
    p.free(b).unwrap();
    assert!(!Error::InvalidSize(0).to_string().is_empty());
}

#[test]
fn out_of_range_chain_sizes() {
    for chain in [0, 17, 64, usize::MAX] {
        assert!(
            matches!(Pool::new(chain), Err(Error::InvalidChainSize(c)) if c == chain),
            "chain {chain}"
        );
    }
    for chain in 1..=16 {
        assert_eq!(Pool::new(chain).unwrap().chain_size(), chain);
    }
}

#[test]
fn stale_and_double_free() {
    for config in [1, 4, 16].into_iter().flat_map(layouts) {
        let p = pool(config);
        let keep = Population::fill(&p, &[1, 50, 100, 100, 3000, 4096], 1);
        for size in [1, 100, p.huge_class_size() - 1, p.huge_class_size(), 4096] {
            let h = p.malloc(size).unwrap();
            p.write(h, &vec![7; size]).unwrap();
            p.free(h).unwrap();
            let pages = p.total_pages();
            // Double free and every other use of the freed handle.
            assert_refused(&p, h);
            assert_eq!(p.total_pages(), pages);
            keep.verify(&p, 0);

            // The handle-table entry is reused for the next object of the class, under a new
            // generation: the old handle stays stale and cannot touch the new object.
            let h2 = p.malloc(size).unwrap();
            assert_ne!(h2, h, "a freed handle is never issued again at once");
            p.write(h2, &vec![9; size]).unwrap();
            assert_refused(&p, h);
            let mut got = vec![0u8; size];
            p.read(h2, &mut got).unwrap();
            assert!(
                got.iter().all(|&b| b == 9),
                "stale ops touched the new object"
            );
            p.free(h2).unwrap();
            assert_refused(&p, h2);
            keep.verify(&p, 0);
        }
    }
}

#[test]
fn forged_handles() {
    for config in layouts(8) {
        forged_handles_in(&pool(config));
    }
}

fn forged_handles_in(p: &Pool) {
    let mut rng = StdRng::seed_from_u64(42);
    let sizes: Vec<usize> = (0..300).map(|_| rng.gen_range(1..=4096)).collect();
    let keep = Population::fill(p, &sizes, 2);
    let live: Vec<u64> = keep.objs.keys().map(|h| h.to_raw()).collect();
    let pages = p.total_pages();

    let mut forged: Vec<u64> = vec![0, 1, u64::MAX, u64::MAX >> 1, 0xA5 << 56, u64::MAX << 56];
    // Random values, random values with a plausible top byte, and every one-bit and
    // two-bit mutation of live handles: whatever is not a live handle must be refused.
    forged.extend((0..2000).map(|_| rng.r#gen::<u64>()));
    let magic = live[0] >> 56;
    forged.extend((0..2000).map(|_| (magic << 56) | (rng.r#gen::<u64>() >> 8)));
    for &raw in live.iter().take(40) {
        for bit in 0..64 {
            forged.push(raw ^ (1 << bit));
            forged.push(raw ^ (1 << bit) ^ (1 << rng.gen_range(0..64)));
        }
    }
    let mut refused = 0;
    for raw in forged {
        if live.contains(&raw) {
            continue;
        }
        assert_refused(p, Handle::from_raw(raw));
        refused += 1;
    }
    assert!(refused > 5000);
    assert_eq!(p.total_pages(), pages);
    keep.verify(p, 0);
}

#[test]
fn handles_from_another_pool() {
    for (big, small) in layouts(16).into_iter().zip(layouts(4)) {
        handles_from_another_pool_in(big, small);
    }
}

/// A chain-16 pool has more classes than a chain-4 pool (191 and 69 in the seed's layout):
/// a handle of a chain-16 class with no counterpart position in the chain-4 pool is refused
/// by it, as is any handle of one pool used on another pool that holds nothing.
fn handles_from_another_pool_in(big: PoolConfig, small: PoolConfig) {
    let empty16 = pool(big);
    let big = pool(big);
    let small = pool(small);
    let sizes = [1, 700, 2000, 3000, 3500, 3700, 3830, 4096];
    let foreign: Vec<Handle> = sizes.iter().map(|&s| big.malloc(s).unwrap()).collect();
    let n_small = small.classes().classes().len();
    for &s in &sizes[4..] {
        let index = big.lookup_class(s).unwrap().index;
        let pos = big
            .classes()
            .classes()
            .iter()
            .position(|c| c.index == index);
        assert!(
            pos.unwrap() >= n_small,
            "size {s} has a counterpart class position"
        );
    }
    for &h in &foreign {
        assert_refused(&small, h);
    }
    let mine: Vec<Handle> = [1, 100, 2000, 4096]
        .iter()
        .map(|&s| small.malloc(s).unwrap())
        .collect();
    for &h in &mine {
        assert_refused(&empty16, h);
    }
    // Handles of the last chain-16 classes (positions past the chain-4 pool's last class)
    // are refused even by a chain-4 pool full of objects; nothing there is disturbed.
    let keep = Population::fill(&small, &[1, 24, 25, 100, 1000, 2000, 3000, 4096], 3);
    for &h in &foreign[4..] {
        assert_refused(&small, h);
    }
    keep.verify(&small, mine.len());
    // Whatever else happens with a foreign handle, no operation panics and the pool's
    // identities hold.
    for &h in &foreign {
        let _ = small.read(h, &mut [0u8; 8]);
        let _ = small.capacity(h);
        let _ = small.with_object(h, 0, |_| ());
        small.check_invariants().unwrap();
    }
    for h in foreign {
        big.free(h).unwrap();
    }
    for h in mine {
        small.free(h).unwrap();
    }
    assert_eq!(big.total_pages(), 0);
}

#[test]
fn write_past_capacity_loses_nothing() {
    for config in [1, 4, 8, 16].into_iter().flat_map(layouts) {
        let chain = config.chain_size;
        let p = pool(config);
        let huge = p.huge_class_size();
        for size in [1, 24, 25, 100, 1000, huge - 1, huge, 4000, 4096] {
            let h = p.malloc(size).unwrap();
            let cap = p.capacity(h).unwrap();
            assert!(
                cap >= size && cap <= 4096,
                "chain {chain}: size {size} cap {cap}"
            );
            let data: Vec<u8> = (0..cap).map(|i| (i * 7 + size) as u8).collect();
            p.write(h, &data).unwrap();
            for len in [cap + 1, cap + 100, 4097, 1 << 20] {
                let r = p.write(h, &vec![0xFF; len]);
                assert!(
                    matches!(r, Err(Error::TooLarge { len: l, capacity }) if l == len && capacity == cap),
                    "chain {chain}: write {len} into {cap}: {r:?}"
                );
                let mut buf = vec![0u8; len];
                assert!(matches!(p.read(h, &mut buf), Err(Error::TooLarge { .. })));
                assert!(matches!(
                    p.with_object(h, len, |b| b.len()),
                    Err(Error::TooLarge { .. })
                ));
            }
            let mut got = vec![0u8; cap];
            p.read(h, &mut got).unwrap();
            assert_eq!(got, data, "chain {chain}: size {size}: data changed");
            // A write shorter than the capacity zero-fills the rest of the object.
            p.write(h, &[0xAB; 1]).unwrap();
            p.read(h, &mut got).unwrap();
            assert_eq!(got[0], 0xAB);
            assert!(got[1..].iter().all(|&b| b == 0), "chain {chain}: tail kept");
            p.check_invariants().unwrap();
            p.free(h).unwrap();
        }
        assert_eq!(p.total_pages(), 0);
    }
}

#[test]
fn stale_handle_stays_stale_while_its_entry_is_reused() {
    // Freeing bumps the entry's 19-bit generation; a malloc/free loop reuses the same entry
    // every time, so the freed handle must stay refused through thousands of reuses.
    let p = pool(PoolConfig {
        chain_size: 4,
        ..PoolConfig::default()
    });
    let anchor = p.malloc(100).unwrap();
    let old = p.malloc(100).unwrap();
    p.write(old, b"old").unwrap();
    p.free(old).unwrap();
    let mut seen = std::collections::HashSet::new();
    for i in 0..30_000u32 {
        let h = p.malloc(100).unwrap();
        assert_ne!(h, old, "reuse {i}: a freed handle was issued again");
        assert!(seen.insert(h), "reuse {i}: handle {h} issued twice");
        p.write(h, &i.to_le_bytes()).unwrap();
        assert!(is_stale(p.free(old), old), "reuse {i}: stale free accepted");
        assert!(is_stale(p.read(old, &mut [0u8; 4]), old));
        let mut got = [0u8; 4];
        p.read(h, &mut got).unwrap();
        assert_eq!(u32::from_le_bytes(got), i);
        p.free(h).unwrap();
    }
    p.free(anchor).unwrap();
    p.check_invariants().unwrap();
    assert_eq!(p.total_pages(), 0);
}
