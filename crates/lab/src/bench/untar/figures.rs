//! The untar bench's figures: one [`Row`] per (side, allocator, cycle, step), built from
//! the step's `mm_stat` fields; seed 003's columns (`orig_size compr_size used_size overhead
//! overhead_ratio`, MB with two decimals and a percentage), and the same rows as CSV and
//! JSON with every column in bytes.
//!
//! Definitions (all from `mm_stat`):
//! - `overhead = mem_used_total - compr_data_size` and `overhead_ratio = overhead /
//!   compr_data_size` (seed 003's; 0 when nothing is stored);
//! - `metadata`: zramd's extra `mm_stat` field (slot table and allocator bookkeeping, kept
//!   outside `mem_used_total`); the kernel's `mm_stat` has none;
//! - `real_overhead = mem_used_total + metadata - compr_data_size`, and `real_ratio` over
//!   `compr_data_size`: everything the device holds beyond the compressed bytes. Seed 003's
//!   afmalloc "real" column counts metadata and internal fragmentation; for zramd's sides
//!   the internal fragmentation is inside `mem_used_total`, so this is the comparable
//!   figure. Empty for the kernel, whose metadata `mm_stat` does not say.

use std::io::Write as _;
use std::path::Path;

use serde::Serialize;

/// `mm_stat` indexes: the kernel's nine, seed 004's `pages_folded`, zramd's metadata.
const ORIG: usize = 0;
const COMPR: usize = 1;
const USED: usize = 2;
const USED_MAX: usize = 4;
const SAME: usize = 5;
const COMPACTED: usize = 6;
const HUGE: usize = 7;
const FOLDED: usize = 9;
const METADATA: usize = 10;

/// Bytes in seed 003's "MB".
const MB: f64 = 1_048_576.0;

/// One step's figures on one side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// `zramd` or `kernel`.
    pub side: String,
    /// The allocator the side's device stores into.
    pub allocator: String,
    /// The cycle, from 1.
    pub cycle: usize,
    /// The step's place in its cycle, from 0.
    pub step_in_cycle: usize,
    /// How many steps its cycle has.
    pub steps_in_cycle: usize,
    /// `untar`, `fold`, `rm drivers`, ….
    pub step: String,
    /// `orig_data_size`, bytes.
    pub orig_size: u64,
    /// `compr_data_size`, bytes.
    pub compr_size: u64,
    /// `mem_used_total`, bytes.
    pub used_size: u64,
    /// `used_size - compr_size`, bytes.
    pub overhead: i64,
    /// `overhead / compr_size`, percent.
    pub overhead_ratio: f64,
    /// zramd's metadata bytes (none for the kernel).
    pub metadata: Option<u64>,
    /// `used_size + metadata - compr_size`, bytes (where the metadata is known).
    pub real_overhead: Option<i64>,
    /// `real_overhead / compr_size`, percent.
    pub real_ratio: Option<f64>,
    /// Process RSS, bytes (zramd's sides).
    pub rss: Option<u64>,
    /// `mem_used_max`, bytes.
    pub used_max: u64,
    /// `same_pages`.
    pub same_pages: u64,
    /// `pages_compacted`.
    pub pages_compacted: u64,
    /// `huge_pages`.
    pub huge_pages: u64,
    /// `pages_folded` (where the side reports it).
    pub pages_folded: Option<u64>,
}

/// `part / whole` in percent; 0 when `whole` is 0.
fn percent(part: i64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

/// What a side measured after one step, before it becomes a [`Row`].
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The cycle, from 1.
    pub cycle: usize,
    /// The step's name.
    pub step: String,
    /// The `mm_stat` fields.
    pub mm: Vec<u64>,
    /// Process RSS, bytes.
    pub rss: Option<u64>,
}

impl Row {
    /// The row of `sample`, taken on `side` storing into `allocator`; `step_in_cycle` of
    /// `steps_in_cycle` steps.
    pub fn new(
        side: &str,
        allocator: &str,
        sample: &Sample,
        step_in_cycle: usize,
        steps_in_cycle: usize,
    ) -> Self {
        let mm = &sample.mm;
        let at = |i: usize| mm.get(i).copied().unwrap_or(0);
        let (compr, used) = (at(COMPR), at(USED));
        let overhead = used as i64 - compr as i64;
        let metadata = mm.get(METADATA).copied();
        let real_overhead = metadata.map(|m| overhead + m as i64);
        Self {
            side: side.to_owned(),
            allocator: allocator.to_owned(),
            cycle: sample.cycle,
            step_in_cycle,
            steps_in_cycle,
            step: sample.step.clone(),
            orig_size: at(ORIG),
            compr_size: compr,
            used_size: used,
            overhead,
            overhead_ratio: percent(overhead, compr),
            metadata,
            real_overhead,
            real_ratio: real_overhead.map(|r| percent(r, compr)),
            rss: sample.rss,
            used_max: at(USED_MAX),
            same_pages: at(SAME),
            pages_compacted: at(COMPACTED),
            huge_pages: at(HUGE),
            pages_folded: mm.get(FOLDED).copied(),
        }
    }

    /// The rows of one side's samples, in order, with each step placed in its cycle.
    pub fn all(side: &str, allocator: &str, samples: &[Sample]) -> Vec<Self> {
        samples
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let in_cycle = |o: &&Sample| o.cycle == s.cycle;
                let place = samples[..i].iter().filter(in_cycle).count();
                let steps = samples.iter().filter(in_cycle).count();
                Self::new(side, allocator, s, place, steps)
            })
            .collect()
    }

    /// Where the step lies on a plot's x axis, in cycles from 0: cycle `c`'s steps spread
    /// over `[c - 1, c)`.
    pub fn x(&self) -> f64 {
        (self.cycle.max(1) - 1) as f64
            + self.step_in_cycle as f64 / self.steps_in_cycle.max(1) as f64
    }

    /// The series the row belongs to on a plot: `kernel zsmalloc`, `zramd afmalloc`, ….
    pub fn series(&self) -> String {
        format!("{} {}", self.side, self.allocator)
    }
}

fn mb(bytes: f64) -> String {
    format!("{:.2}MB", bytes / MB)
}

/// The header of [`seed_line`]'s table.
pub fn seed_header() -> String {
    format!(
        "{:16} {:>5} {:12} {:>10} {:>10} {:>10} {:>10} {:>14} {:>10} {:>13} {:>10} {:>10}",
        "side",
        "cycle",
        "step",
        "orig_size",
        "compr_size",
        "used_size",
        "overhead",
        "overhead_ratio",
        "metadata",
        "real_overhead",
        "real_ratio",
        "rss"
    )
}

/// The row as seed 003 printed it (MB with two decimals, percentages), then zramd's
/// metadata, the real overhead and its ratio, and the RSS (`-` where not known).
pub fn seed_line(row: &Row) -> String {
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_owned());
    format!(
        "{:16} {:>5} {:12} {:>10} {:>10} {:>10} {:>10} {:>14} {:>10} {:>13} {:>10} {:>10}",
        row.series(),
        row.cycle,
        row.step,
        mb(row.orig_size as f64),
        mb(row.compr_size as f64),
        mb(row.used_size as f64),
        mb(row.overhead as f64),
        format!("{:.2}%", row.overhead_ratio),
        or_dash(row.metadata.map(|m| mb(m as f64))),
        or_dash(row.real_overhead.map(|r| mb(r as f64))),
        or_dash(row.real_ratio.map(|r| format!("{r:.2}%"))),
        or_dash(row.rss.map(|r| mb(r as f64))),
    )
}

/// The CSV columns, in order.
pub const CSV_HEADER: &str = "side,allocator,cycle,step_in_cycle,step,orig_size,compr_size,used_size,overhead,overhead_ratio,metadata,real_overhead,real_ratio,rss,used_max,same_pages,pages_compacted,huge_pages,pages_folded";

/// The rows as CSV: [`CSV_HEADER`], then one line per row; bytes raw, ratios in percent
/// with six decimals, an empty field where a side has no such figure.
pub fn csv(rows: &[Row]) -> String {
    fn opt<T: ToString>(v: Option<T>) -> String {
        v.map(|v| v.to_string()).unwrap_or_default()
    }
    let mut out = format!("{CSV_HEADER}\n");
    for r in rows {
        let fields = [
            r.side.clone(),
            r.allocator.clone(),
            r.cycle.to_string(),
            r.step_in_cycle.to_string(),
            r.step.clone(),
            r.orig_size.to_string(),
            r.compr_size.to_string(),
            r.used_size.to_string(),
            r.overhead.to_string(),
            format!("{:.6}", r.overhead_ratio),
            opt(r.metadata),
            opt(r.real_overhead),
            opt(r.real_ratio.map(|v| format!("{v:.6}"))),
            opt(r.rss),
            r.used_max.to_string(),
            r.same_pages.to_string(),
            r.pages_compacted.to_string(),
            r.huge_pages.to_string(),
            opt(r.pages_folded),
        ];
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// Writes `untar.csv` and `untar.json` (an array of the rows) into `dir`.
pub fn write(dir: &Path, rows: &[Row]) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("untar.csv"), csv(rows))?;
    let mut json = std::fs::File::create(dir.join("untar.json"))?;
    serde_json::to_writer_pretty(&mut json, rows)?;
    writeln!(json)?;
    Ok(())
}
