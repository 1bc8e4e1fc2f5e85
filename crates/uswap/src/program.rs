//! The figures of a program whose mappings are served by regions (`zramd run`): what its
//! preloaded shim writes at exit and answers on its control socket, and what `zramd run` and
//! `zramd stat` read back. One JSON object:
//! `{"pid":P,"uswap":[RegionStats…],"served":N,"passed_through":M}`.

use serde::{Deserialize, Serialize};

use crate::stats::RegionStats;

/// One process's figures (or a sum over several, when the program starts others that load
/// the shim too).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProgramFigures {
    /// The process (0 in a sum over several).
    #[serde(default)]
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

impl ProgramFigures {
    /// The figures as one line of JSON, newline included.
    pub fn line(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec(self).unwrap_or_else(|e| {
            format!("{{\"error\":\"cannot write the figures: {e}\"}}").into_bytes()
        });
        out.push(b'\n');
        out
    }

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

    /// The figures as text: a summary line, then each region's size and counters in the
    /// kernel's `/proc/vmstat` style.
    pub fn format(&self) -> String {
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
            s.push_str(&format!("region {i}: {} MiB\n", r.len >> 20));
            s.push_str(&r.format());
        }
        s
    }
}
