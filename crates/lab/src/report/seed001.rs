//! Seed 001 (one pool lock instead of the pool's migrate lock and per-class locks, measured
//! with fs_mark and a kernel build on zram): NOT YET WIRED. Issue 17's locking modes and
//! the fs_mark/build bench (`bench::locking`, `run(opts) -> LockingReport` with
//! `LockingReport::{markdown, csv}`) land separately; wiring them in is this function:
//! run it, push its markdown as a [`Table`](super::section::Table) with a verdict line, and
//! write its CSV with [`Section::write_csv`].

use super::section::{Ctx, Section};

/// Seed 001's section: a placeholder that says so, with no figures.
pub fn run(_ctx: &Ctx) -> anyhow::Result<Section> {
    let mut section = Section::new(
        "001",
        "one pool lock (fs_mark, kernel build): not yet wired",
    );
    section.notes.push(
        "**Not yet wired.** The seed's fs_mark (`fs_mark -d DIR -s 100000 -n 2500 -t 32 -k`, \
         files/s: Average, Median, Stddev) and kernel build (real, user, sys) per locking mode \
         come with the locking bench of issue 17; this report has no figures for them yet."
            .into(),
    );
    section.json = serde_json::json!({ "status": "not yet wired" });
    Ok(section)
}
