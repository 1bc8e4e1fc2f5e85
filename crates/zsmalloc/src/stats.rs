//! Statistics: what the pool reports about itself (the kernel's `zs_stats_size_show`,
//! `zs_can_compact`, and our freeable/shortenable/compactable counts and metadata bytes),
//! and the kernel's text format for the class table (6.3 and later: zspages counted per
//! ten-percent fullness bucket).
//!
//! Every figure is read under each class-shard lock in turn, so it is exact for each shard
//! and a sum of moments for the pool.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use crate::class::ClassGeometry;
use crate::pool::Pool;
use crate::shard::ShardInner;
use crate::zspage::ZsPage;

/// One row of the kernel's `/sys/kernel/debug/zsmalloc/<pool>/classes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ClassStats {
    /// Class index (the largest nominal index the class serves).
    pub index: usize,
    /// Object size in bytes.
    pub size: usize,
    /// Zspages more than 3/4 but not completely in use (the classic column of kernels before
    /// 6.3; the table prints [`inuse`](Self::inuse) instead).
    pub almost_full: usize,
    /// Zspages in use up to 3/4, but not empty (classic, as `almost_full`).
    pub almost_empty: usize,
    /// Zspages per fullness bucket of kernels 6.3 and later, in the order of
    /// [`INUSE_BUCKETS`]: a partly used zspage with `inuse` of `objs` objects counts in bucket
    /// `100 * inuse / objs / 10` (0 is `10%`, 9 is `99%`), a full one in bucket 10 (`100%`).
    pub inuse: [usize; INUSE_BUCKETS.len()],
    /// Objects the class's zspages hold (used or free).
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
    /// Pages freed by folding since the pool was made (seed 004's `pages_folded`).
    pub pages_folded: u64,
    /// Objects in use (an object several handles name counts once).
    pub obj_used: usize,
    /// Objects all zspages hold (used or free).
    pub obj_allocated: usize,
    /// Bytes of bookkeeping outside the zspages.
    pub metadata_bytes: usize,
    /// Pages of freed zspages kept resident for immediate reuse.
    pub cached_pages: usize,
    /// Pages given back to the OS so far.
    pub pages_released: u64,
}

/// The fullness buckets' column names in the class table of kernels 6.3 and later.
pub const INUSE_BUCKETS: [&str; 11] = [
    "10%", "20%", "30%", "40%", "50%", "60%", "70%", "80%", "90%", "99%", "100%",
];

/// One line of the class table: the first two columns, the buckets, then the rest.
fn table_line(
    out: &mut String,
    first: [&dyn std::fmt::Display; 2],
    buckets: &[String],
    rest: [&dyn std::fmt::Display; 5],
) {
    let _ = write!(out, " {:>5} {:>5} ", first[0], first[1]);
    for b in buckets {
        let _ = write!(out, "{b:>9} ");
    }
    let _ = writeln!(
        out,
        "{:>13} {:>10} {:>10} {:>16} {:>8}",
        rest[0], rest[1], rest[2], rest[3], rest[4]
    );
}

/// Formats rows exactly as the `zs_stats_size_show` of kernels 6.3 and later (header with the
/// ten-percent fullness buckets, one line per distinct class, a blank line and the `Total`
/// line), whatever the pool's geometry.
pub fn format_class_table(rows: &[ClassStats]) -> String {
    let mut out = String::new();
    table_line(
        &mut out,
        [&"class", &"size"],
        &INUSE_BUCKETS.map(str::to_owned),
        [
            &"obj_allocated",
            &"obj_used",
            &"pages_used",
            &"pages_per_zspage",
            &"freeable",
        ],
    );
    let mut total = ClassStats::default();
    for r in rows {
        table_line(
            &mut out,
            [&r.index, &r.size],
            &r.inuse.map(|n| n.to_string()),
            [
                &r.obj_allocated,
                &r.obj_used,
                &r.pages_used,
                &r.pages_per_zspage,
                &r.freeable,
            ],
        );
        for (t, n) in total.inuse.iter_mut().zip(r.inuse) {
            *t += n;
        }
        total.obj_allocated += r.obj_allocated;
        total.obj_used += r.obj_used;
        total.pages_used += r.pages_used;
        total.freeable += r.freeable;
    }
    out.push('\n');
    table_line(
        &mut out,
        [&"Total", &""],
        &total.inuse.map(|n| n.to_string()),
        [
            &total.obj_allocated,
            &total.obj_used,
            &total.pages_used,
            &"",
            &total.freeable,
        ],
    );
    out
}

impl Pool {
    /// Pool-wide counters.
    pub fn stats(&self) -> PoolStats {
        let class_stats = self.class_stats();
        PoolStats {
            pages_allocated: self.total_pages(),
            pages_compacted: self.pages_compacted.load(Ordering::Relaxed),
            pages_folded: self.pages_folded(),
            obj_used: class_stats.iter().map(|c| c.obj_used).sum(),
            obj_allocated: class_stats.iter().map(|c| c.obj_allocated).sum(),
            metadata_bytes: self.metadata_bytes(),
            cached_pages: self.source.cached_pages(),
            pages_released: self.source.pages_released(),
        }
    }

    /// One row per distinct class, as the kernel's `classes` debugfs file.
    pub fn class_stats(&self) -> Vec<ClassStats> {
        self.shards
            .by_class()
            .map(|shards| {
                let g = shards[0].geom;
                let mut row = ClassStats {
                    index: g.index,
                    size: g.size,
                    pages_per_zspage: g.pages_per_zspage,
                    ..ClassStats::default()
                };
                for shard in shards.iter().filter(|s| s.inner.is_made()) {
                    let inner = shard.inner.lock_for_upkeep();
                    for meta in inner.zspages.iter().flatten() {
                        let inuse = meta.inuse as usize;
                        let objs = meta.objs as usize;
                        if inuse == 0 {
                            continue;
                        }
                        // The kernel's get_fullness_group (6.3+), less its empty group.
                        let bucket = if inuse == objs {
                            INUSE_BUCKETS.len() - 1
                        } else {
                            100 * inuse / objs / 10
                        };
                        row.inuse[bucket] += 1;
                        if inuse == objs {
                            continue;
                        }
                        // The classic 3/4 threshold the kernel printed these columns with.
                        if inuse <= 3 * objs / 4 {
                            row.almost_empty += 1;
                        } else {
                            row.almost_full += 1;
                        }
                    }
                    row.obj_allocated += inner.capacity;
                    row.obj_used += inner.obj_used();
                    row.pages_used += inner.pages;
                    row.freeable += freeable(&g, &inner);
                }
                row
            })
            .collect()
    }

    /// Bytes of bookkeeping held outside the zspages: zspage metas, fullness lists, handle
    /// tables, shared objects' reference counts and content indexes (see
    /// [`ShareStats::index_bytes`](crate::ShareStats::index_bytes)) and class-shard
    /// structures.
    pub fn metadata_bytes(&self) -> usize {
        let per_shard: usize = self
            .shards
            .iter_made()
            .map(|shard| {
                let inner = shard.inner.lock_for_upkeep();
                std::mem::size_of::<ShardInner>()
                    + inner.zspages.capacity() * std::mem::size_of::<Option<ZsPage>>()
                    + inner.free_ids.capacity() * 4
                    + inner.groups.iter().map(|g| g.capacity() * 4).sum::<usize>()
                    + inner.handles.metadata_bytes()
                    + inner.sharing.metadata_bytes()
            })
            .sum();
        per_shard + self.shards.struct_bytes()
    }

    /// Class shards whose state has been made: those a thread has stored in (or changed)
    /// since the pool was made, out of `shards` per size class. The others hold no memory
    /// beyond their lock.
    pub fn shards_made(&self) -> usize {
        self.shards.made()
    }

    /// Pages compaction could free right now, over all classes.
    pub fn freeable_pages(&self) -> usize {
        self.shards
            .iter_made()
            .map(|shard| freeable(&shard.geom, &shard.inner.lock_for_upkeep()))
            .sum()
    }

    /// Pages that shortening partly used zspages (see `compact`) could give back right now.
    pub fn shortenable_pages(&self) -> usize {
        self.shards
            .iter_made()
            .map(|shard| shortenable(&shard.geom, &shard.inner.lock_for_upkeep()))
            .sum()
    }

    /// Pages `compact` could give back right now, about: per class shard, the larger of
    /// what the kernel's compaction frees and what shortening would (both count the same
    /// free room, so their sum would count it twice); plus what merging the shards of each
    /// class would (`merge.rs`, counted after shortening).
    pub fn compactable_pages(&self) -> usize {
        let per_shard: usize = self
            .shards
            .iter_made()
            .map(|shard| {
                let inner = shard.inner.lock_for_upkeep();
                freeable(&shard.geom, &inner).max(shortenable(&shard.geom, &inner))
            })
            .sum();
        per_shard + self.mergeable_pages()
    }
}

/// Pages compaction could free in one class shard (the kernel's `zs_can_compact`): its
/// free object room in whole full-length zspages.
fn freeable(geom: &ClassGeometry, inner: &ShardInner) -> usize {
    (inner.capacity - inner.obj_used()) / geom.objs_per_zspage * geom.pages_per_zspage
}

/// Pages shortening the partly used zspages of one class shard could free.
fn shortenable(geom: &ClassGeometry, inner: &ShardInner) -> usize {
    inner
        .zspages
        .iter()
        .flatten()
        .map(|m| m.shortenable(geom.size))
        .sum()
}
