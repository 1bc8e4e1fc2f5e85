//! The process's resident memory, and how its growth must follow what a pool reports.

use zsmalloc::{Allocator, PAGE_SIZE, Pool, PoolConfig};

pub const MIB: f64 = (1 << 20) as f64;
/// About how many bytes of objects a test stores.
pub const TARGET_BYTES: usize = 1 << 30;

/// The settings of the allocator a test fills: the default layout, zspages of up to 8
/// pages, populated.
pub fn rss_config(allocator: Allocator) -> PoolConfig {
    PoolConfig {
        allocator,
        chain_size: 8,
        populate: true,
        // Freed pages go back to the OS at once: no resident cache to account for.
        page_cache_pages: 0,
        ..PoolConfig::default()
    }
}

/// The zsmalloc pool a test fills ([`rss_config`]).
pub fn rss_pool() -> Pool {
    Pool::with_config(rss_config(Allocator::Zsmalloc)).unwrap()
}

/// This process's resident memory in bytes: `/proc/self/statm`'s second field, in pages.
pub fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: usize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|f| f.parse().ok())
        .expect("resident pages in /proc/self/statm");
    pages * PAGE_SIZE
}

/// The RSS growth `grown` is within 5% of the `expected` bytes the pool reports.
pub fn assert_close(what: &str, grown: usize, expected: usize) {
    let diff = grown.abs_diff(expected);
    let pct = diff as f64 * 100.0 / expected as f64;
    println!(
        "{what}: RSS grew {:.1} MiB, pool reports {:.1} MiB ({pct:.2}% apart)",
        grown as f64 / MIB,
        expected as f64 / MIB,
    );
    assert!(
        pct <= 5.0,
        "{what}: RSS growth {grown} is {pct:.2}% away from the reported {expected}"
    );
}
