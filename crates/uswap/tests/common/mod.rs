//! Helpers for region tests: a region or a reason to skip, page patterns.

#![allow(dead_code, reason = "each test file uses its own subset")]

use uswap::{Error, Region, RegionConfig};

pub const PAGE: usize = uswap::sys::PAGE_SIZE;

/// A region, or `None` after saying why this kernel cannot give one (the test is skipped).
pub fn region_or_skip(len: usize, config: RegionConfig) -> Option<Region> {
    match Region::new(len, config) {
        Ok(r) => Some(r),
        Err(Error::Unavailable(why)) => {
            eprintln!("SKIPPED: userfaultfd regions unavailable: {why}");
            None
        }
        Err(e) => panic!("region: {e}"),
    }
}

/// Settings with a small budget and a small device.
pub fn config(budget_pages: usize) -> RegionConfig {
    RegionConfig {
        resident_budget: budget_pages * PAGE,
        ..RegionConfig::default()
    }
}

/// Settings with a small budget and a small device, faults served as `mode` says.
pub fn config_in(mode: uswap::FaultMode, budget_pages: usize) -> RegionConfig {
    RegionConfig {
        faults: mode,
        ..config(budget_pages)
    }
}

/// A page of compressible bytes that depend on `seed`.
pub fn page_of(seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; PAGE];
    for (i, chunk) in v.chunks_mut(8).enumerate() {
        let w = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (i as u64 / 16);
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    v
}
