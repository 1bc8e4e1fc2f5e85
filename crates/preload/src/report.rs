//! What the shim reports, at exit on the stats descriptor and on the control socket: one
//! JSON object, `{"pid":P,"uswap":[RegionStats…],"served":N,"passed_through":M}`.

use serde::{Deserialize, Serialize};
use uswap::RegionStats;

/// The figures of one process's shim.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The process.
    pub pid: u32,
    /// Every region served so far, those already unmapped (their last figures) first.
    pub uswap: Vec<RegionStats>,
    /// Mappings served by a region.
    pub served: u64,
    /// `mmap` calls passed to the kernel (too small, not anonymous private, ...).
    pub passed_through: u64,
    /// Why mappings that qualified were passed through instead (userfaultfd unavailable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl Report {
    /// The report as one line of JSON, newline included.
    pub fn line(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec(self).unwrap_or_else(|e| {
            format!("{{\"error\":\"cannot write the figures: {e}\"}}").into_bytes()
        });
        out.push(b'\n');
        out
    }
}
