//! Pool statistics and the kernel's text formats for them.

use std::fmt::Write as _;

/// One row of the kernel's `/sys/kernel/debug/zsmalloc/<pool>/classes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassStats {
    /// Class index (the largest nominal index the class serves).
    pub index: usize,
    /// Object size in bytes.
    pub size: usize,
    /// Zspages more than 3/4 but not completely in use.
    pub almost_full: usize,
    /// Zspages in use up to 3/4, but not empty.
    pub almost_empty: usize,
    /// Object slots in the class's zspages.
    pub obj_allocated: usize,
    /// Objects in use.
    pub obj_used: usize,
    /// Pages the class's zspages hold.
    pub pages_used: usize,
    /// Pages per zspage.
    pub pages_per_zspage: usize,
    /// Pages compaction could free.
    pub freeable: usize,
}

/// Pool-wide counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Pages held by zspages.
    pub pages_allocated: usize,
    /// Pages freed by compaction since the pool was made.
    pub pages_compacted: u64,
    /// Objects in use.
    pub obj_used: usize,
    /// Object slots in all zspages.
    pub obj_allocated: usize,
    /// Bytes of bookkeeping outside the zspages.
    pub metadata_bytes: usize,
    /// Pages of freed zspages kept resident for immediate reuse.
    pub cached_pages: usize,
    /// Pages given back to the OS so far.
    pub pages_released: u64,
}

/// Formats rows exactly as the kernel's `zs_stats_size_show` (header, one line per distinct
/// class, a blank line and the `Total` line).
pub fn format_class_table(rows: &[ClassStats]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        " {:>5} {:>5} {:>11} {:>12} {:>13} {:>10} {:>10} {:>16} {:>8}",
        "class",
        "size",
        "almost_full",
        "almost_empty",
        "obj_allocated",
        "obj_used",
        "pages_used",
        "pages_per_zspage",
        "freeable"
    );
    let mut total = ClassStats::default();
    for r in rows {
        let _ = writeln!(
            out,
            " {:>5} {:>5} {:>11} {:>12} {:>13} {:>10} {:>10} {:>16} {:>8}",
            r.index,
            r.size,
            r.almost_full,
            r.almost_empty,
            r.obj_allocated,
            r.obj_used,
            r.pages_used,
            r.pages_per_zspage,
            r.freeable
        );
        total.almost_full += r.almost_full;
        total.almost_empty += r.almost_empty;
        total.obj_allocated += r.obj_allocated;
        total.obj_used += r.obj_used;
        total.pages_used += r.pages_used;
        total.freeable += r.freeable;
    }
    out.push('\n');
    let _ = writeln!(
        out,
        " {:>5} {:>5} {:>11} {:>12} {:>13} {:>10} {:>10} {:>16} {:>8}",
        "Total",
        "",
        total.almost_full,
        total.almost_empty,
        total.obj_allocated,
        total.obj_used,
        total.pages_used,
        "",
        total.freeable
    );
    out
}
