//! A device's `mm_stat` as a FUSE tree shows it.

use std::path::Path;

/// The numbers of `mm_stat` in the device's directory `dev`.
pub fn mm_stat(dev: &Path) -> Vec<u64> {
    std::fs::read_to_string(dev.join("mm_stat"))
        .unwrap()
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect()
}
