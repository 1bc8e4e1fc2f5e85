//! Where a workload's faults read pages back from, and how pages get there.

use std::path::Path;

use anyhow::Context as _;
use serde::Serialize;
use zram::{IdleRequest, Mode, WritebackRequest, ZramConfig};

/// Where the pages a fault reads back come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The device's compressed pool.
    Compressed,
    /// The device's backing file: every page the device holds is written back (`idle
    /// all`, `writeback idle`) before each timed round, so that faults read the file (pages
    /// evicted in the same round excepted), as the seed's swap-ins read its disk.
    WrittenBack,
}

impl Source {
    /// The source of a run with `backing` (a backing file) or without.
    pub fn of(backing: Option<&Path>) -> Self {
        match backing {
            Some(_) => Self::WrittenBack,
            None => Self::Compressed,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Compressed => "compressed",
            Self::WrittenBack => "written back",
        }
    }
}

/// `config` with `backing` as its backing file, if any, and the device's read-back cache of
/// neighbouring written-back pages on only with `readback`: without it each page is read on
/// its own, so that what a fault costs, and what a region's readahead saves, is the
/// region's alone.
pub fn device(mut config: ZramConfig, backing: Option<&Path>, readback: bool) -> ZramConfig {
    if let Some(file) = backing {
        config.backing_dev = Some(file.to_path_buf());
        config.readback_readahead = readback;
    }
    config
}

/// Writes every page `device` holds in memory to its backing file (`idle all`, then
/// `writeback idle`); returns how many went.
pub fn write_back_all(device: &zram::Zram) -> anyhow::Result<u64> {
    device.mark_idle(IdleRequest::All);
    let report = device
        .writeback(&WritebackRequest::mode(Mode::Idle))
        .context("writeback")?;
    Ok(report.pages)
}
