//! A pool for a test: `config` with `shards` shards per class and nothing populated ahead.

use zsmalloc::{Pool, PoolConfig};

pub fn pool(config: PoolConfig, shards: usize) -> Pool {
    Pool::with_config(PoolConfig {
        populate: false,
        shards,
        ..config
    })
    .unwrap()
}
