//! What the pool bench's runs share: the seed's object-size distribution, the pools they
//! open, and filling a pool with objects.

use std::sync::Arc;

use anyhow::Context as _;
use rand::Rng;
use rand::rngs::SmallRng;
use zsmalloc::{Allocator, Backend, Handle, PoolConfig};

/// (class size, obj_used) from seed 000's "Order 3" object distribution table.
const SEED_ORDER3_DISTRIBUTION: &[(usize, usize)] = &[
    (1168, 2994),
    (1184, 1609),
    (1200, 1442),
    (1216, 1510),
    (1232, 1479),
    (1248, 1451),
    (1280, 3033),
    (1296, 1571),
    (1360, 6375),
    (1376, 1796),
    (1424, 6006),
    (1440, 2101),
    (1456, 2064),
    (1488, 4159),
    (1504, 2007),
    (1536, 3900),
    (1552, 1873),
    (1568, 1958),
    (1584, 1974),
    (1632, 6187),
    (1680, 6477),
    (1696, 2253),
    (1712, 2340),
    (1744, 4696),
    (1792, 7734),
    (1808, 2649),
    (1856, 8365),
    (1888, 5862),
    (1904, 2942),
    (1920, 2997),
    (2048, 25276),
    (2080, 6052),
    (2096, 3080),
    (2176, 14830),
    (2192, 2758),
    (2224, 5077),
    (2272, 7232),
    (2336, 8423),
    (2384, 5313),
    (2448, 5443),
    (2512, 4121),
    (2560, 2205),
    (2592, 1133),
    (2720, 2712),
    (2864, 1098),
    (2912, 183),
    (2976, 166),
    (3072, 252),
    (3184, 192),
    (3264, 96),
    (3408, 208),
    (3504, 94),
    (3584, 104),
    (3632, 50),
    (4096, 33591),
];

/// A pool of `allocator` with `chain_size` (zsmalloc's; the others ignore it) and `shards`.
pub fn open(
    allocator: Allocator,
    chain_size: usize,
    shards: usize,
) -> anyhow::Result<Arc<dyn Backend>> {
    zsmalloc::open(PoolConfig {
        allocator,
        chain_size,
        shards,
        ..PoolConfig::default()
    })
    .with_context(|| format!("open the {allocator} pool"))
}

/// Draws object sizes from the seed's distribution.
#[derive(Debug)]
pub struct SizeDist {
    /// (cumulative weight, lowest size, highest size) — sizes are caller bytes.
    table: Vec<(usize, usize, usize)>,
    total: usize,
}

impl SizeDist {
    /// The seed's "Order 3" distribution.
    pub fn seed() -> Self {
        let mut table = Vec::new();
        let mut total = 0;
        let mut prev = SEED_ORDER3_DISTRIBUTION[0].0 - 16;
        for &(size, used) in SEED_ORDER3_DISTRIBUTION {
            total += used;
            let (lo, hi) = if size == 4096 {
                (4096, 4096)
            } else {
                (prev + 1 - 8, size - 8)
            };
            table.push((total, lo, hi));
            prev = size;
        }
        Self { table, total }
    }

    /// One object size, in caller bytes.
    pub fn sample(&self, rng: &mut SmallRng) -> usize {
        let w = rng.gen_range(0..self.total);
        let i = self.table.partition_point(|&(cum, _, _)| cum <= w);
        let (_, lo, hi) = self.table[i];
        rng.gen_range(lo..=hi)
    }
}

/// Stores `n` objects of sizes drawn from `dist`; returns their handles and sizes.
pub fn fill(
    pool: &dyn Backend,
    dist: &SizeDist,
    n: usize,
    rng: &mut SmallRng,
) -> anyhow::Result<Vec<(Handle, usize)>> {
    let data = payload();
    (0..n)
        .map(|_| {
            let size = dist.sample(rng);
            let h = pool.malloc(size)?;
            pool.write(h, &data[..size])?;
            Ok((h, size))
        })
        .collect()
}

/// The bytes every object is written from (a prefix of them).
pub fn payload() -> Vec<u8> {
    (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect()
}
