//! Inline deduplication from a chosen shard of a class.

use zsmalloc::{Handle, Pool, pin_malloc_shard};

/// `malloc_dedup(data)` from a thread pinned to shard `shard`: the handle, and whether it
/// shares.
pub fn dedup_in(pool: &Pool, shard: usize, data: &[u8]) -> (Handle, bool) {
    pin_malloc_shard(Some(shard));
    let r = pool.malloc_dedup(data).unwrap();
    pin_malloc_shard(None);
    r
}
