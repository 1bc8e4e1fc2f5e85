//! The fault latency of a tier: random access with readahead off, every page evicted before
//! each round so that every access is a major fault, served from the compressed pool or,
//! after `writeback idle`, from the backing file through zram.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use serde::Serialize;
use uswap::ReadaheadConfig;
use uswap::histogram::Summary;

use super::source::{self, write_back_all};
use super::workload::{Counts, PAGE, Settings, Touches, pattern, region};

/// Where the faulted pages are served from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// The compressed pool, with the budget in force: every fault makes the evictor store
    /// a page meanwhile, as swapping does.
    Compressed,
    /// The compressed pool with room for every page: nothing is evicted while faults are
    /// served, so the figure is the fault service alone.
    CompressedAlone,
    /// The backing file, through zram.
    WrittenBack,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Self::Compressed => "compressed",
            Self::CompressedAlone => "compressed, no eviction",
            Self::WrittenBack => "written back",
        }
    }
}

/// One tier's figures.
#[derive(Debug, Clone, Serialize)]
pub struct TierRun {
    pub tier: Tier,
    /// Where the faults were served.
    pub faults: uswap::FaultMode,
    pub pages: usize,
    pub rounds: usize,
    /// The backing file (written-back tier).
    pub backing_dev: Option<PathBuf>,
    /// Program-observed latency of each access (one word written), all major faults.
    pub latency: Summary,
    /// Of those, the accesses that took at least 2 us.
    pub waited: u64,
    pub counts: Counts,
    /// The handler's own time per fault.
    pub fault_latency: Summary,
    /// Pages written to the backing file before the timed rounds, in all.
    pub written_back_pages: u64,
    /// Pages read back from the backing file during the timed rounds (`bd_stat`).
    pub bd_reads: u64,
}

impl TierRun {
    /// The row's name: the tier and where its faults were served.
    pub fn label(&self) -> String {
        format!("{}, {}", self.tier.name(), self.faults.name())
    }
}

/// Runs one tier: one thread, no CPU work (the figure is the fault alone).
pub fn run(s: &Settings, tier: Tier, backing: Option<&Path>) -> anyhow::Result<TierRun> {
    let backing = match tier {
        Tier::WrittenBack => Some(backing.context("the written-back tier needs a file")?),
        Tier::Compressed | Tier::CompressedAlone => None,
    };
    // Every fault reads its own page: the figure is one read from the file.
    let device = source::device(s.device(), backing, false);
    let alone;
    let s = if tier == Tier::CompressedAlone {
        alone = Settings {
            budget: s.size,
            ..s.clone()
        };
        &alone
    } else {
        s
    };
    let mut region = region(s, 1, ReadaheadConfig::new(false, s.max_order), device)?;
    let pages = region.len() / PAGE;
    for p in 0..pages {
        region.write(p * PAGE, &pattern(p as u64))?;
    }
    let hist = Touches::default();
    let mut rng = SmallRng::seed_from_u64(0x7135);
    let mut order: Vec<usize> = (0..pages).collect();
    let mut counts = Counts::default();
    let mut written_back_pages = 0;
    let mut bd_reads = 0;
    for r in 1..=s.rounds {
        evict_all(&region)?;
        if tier == Tier::WrittenBack {
            written_back_pages += write_back_all(region.device())?;
        }
        let before = region.stats();
        let bd_before = region.device().bd_stat().bd_reads;
        if r == 1 {
            region.reset_latency();
        }
        order.shuffle(&mut rng);
        for &p in &order {
            let t = Instant::now();
            region.write(p * PAGE + 8, &(r as u64).to_le_bytes())?;
            hist.record(t.elapsed());
        }
        let after = region.stats();
        counts += Counts::between(&before, &after);
        bd_reads += region.device().bd_stat().bd_reads - bd_before;
    }
    let after = region.stats();
    if let Some(f) = &after.failed {
        anyhow::bail!("the region failed: {f}");
    }
    Ok(TierRun {
        tier,
        faults: s.faults,
        pages,
        rounds: s.rounds,
        backing_dev: backing.map(Path::to_path_buf),
        latency: hist.hist.snapshot().summary(),
        waited: hist.waited(),
        counts,
        fault_latency: after.fault_latency,
        written_back_pages,
        bd_reads,
    })
}

/// Evicts every resident page (`evict_oldest` waits for pages the evictor has on their way).
fn evict_all(region: &uswap::Region) -> anyhow::Result<()> {
    region.evict_oldest(region.len() / PAGE)?;
    let resident = region.stats().resident_pages;
    anyhow::ensure!(
        resident == 0,
        "{resident} pages stayed resident after evicting every page"
    );
    Ok(())
}
