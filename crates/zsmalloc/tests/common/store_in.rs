//! Putting an object in a chosen shard of its class.

use zsmalloc::{Handle, Pool, pin_malloc_shard};

/// A new object written with `data`, in shard `shard` of its class (of a sharded pool).
pub fn store_in(pool: &Pool, shard: usize, data: &[u8]) -> Handle {
    pin_malloc_shard(Some(shard));
    let h = pool.malloc(data.len()).unwrap();
    pool.write(h, data).unwrap();
    pin_malloc_shard(None);
    h
}
