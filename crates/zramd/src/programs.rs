//! The figures of a program run by `zramd run`: what its preloaded shim
//! (`crates/preload`, `libzramd_uswap.so`) writes at exit and answers on its control
//! socket, `{"pid":P,"uswap":[RegionStats…],"served":N,"passed_through":M}`.

use serde::{Deserialize, Serialize};
use uswap::RegionStats;

/// One process's figures (several when the program starts others that load the shim too).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgramFigures {
    /// The process (0 in a sum over several).
    #[serde(default)]
    pub pid: u32,
    /// Every region served, those already unmapped first.
    pub uswap: Vec<RegionStats>,
    /// Mappings served by a region.
    pub served: u64,
    /// `mmap` calls passed to the kernel.
    pub passed_through: u64,
    /// Why qualifying mappings were passed through instead, if they were.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
}

impl ProgramFigures {
    /// The figures of several processes as one: regions listed together, counts summed.
    pub fn merge(all: Vec<Self>) -> Self {
        if all.len() == 1 {
            return all.into_iter().next().unwrap_or_default();
        }
        let mut sum = Self::default();
        for f in all {
            sum.uswap.extend(f.uswap);
            sum.served += f.served;
            sum.passed_through += f.passed_through;
            sum.unavailable = sum.unavailable.or(f.unavailable);
        }
        sum
    }

    /// The figures as text: a summary line, then each region's counters in the kernel's
    /// `/proc/vmstat` style.
    pub fn format(&self) -> String {
        use crate::human::size;
        let mut s = format!(
            "uswap{}: {} mapping(s) served, {} mmap call(s) passed through\n",
            if self.pid == 0 {
                String::new()
            } else {
                format!(" (pid {})", self.pid)
            },
            self.served,
            self.passed_through
        );
        if let Some(why) = &self.unavailable {
            s.push_str(&format!("not served: {why}\n"));
        }
        for (i, r) in self.uswap.iter().enumerate() {
            s.push_str(&format!("region {i}: {}\n", size(r.len)));
            s.push_str(&r.format());
        }
        s
    }
}
