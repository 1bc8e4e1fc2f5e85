//! The shim's settings, read once from the environment `zramd run` prepares.

use std::path::PathBuf;

use uswap::FailPoint;
use zram::{Algorithm, Size};

/// Resident budget of each served mapping, bytes (required: without it the shim is off).
pub const ENV_BUDGET: &str = "ZRAMD_USWAP_BUDGET";
/// Compression algorithm of each mapping's zram device (default: zram's).
pub const ENV_ALGORITHM: &str = "ZRAMD_USWAP_ALGORITHM";
/// Smallest mapping served, bytes (default [`DEFAULT_THRESHOLD`]).
pub const ENV_THRESHOLD: &str = "ZRAMD_USWAP_THRESHOLD";
/// `true`/`false`: seed 002's `vma_ra_enabled` (default true).
pub const ENV_VMA_RA_ENABLED: &str = "ZRAMD_USWAP_VMA_RA_ENABLED";
/// `vma_ra_max_order`, 0..=9 (default 3).
pub const ENV_VMA_RA_MAX_ORDER: &str = "ZRAMD_USWAP_VMA_RA_MAX_ORDER";
/// The control socket's path (none: no socket).
pub const ENV_CONTROL: &str = "ZRAMD_USWAP_CONTROL";
/// A descriptor, inherited from `zramd run`, the exit figures are written to (none: none).
pub const ENV_STATS_FD: &str = "ZRAMD_USWAP_STATS_FD";
/// `copy`: restoring an evicted page fails (tests of what a failing region does).
pub const ENV_FAIL: &str = "ZRAMD_USWAP_FAIL";

/// Mappings this large or larger are served by default: 64 MiB.
pub const DEFAULT_THRESHOLD: usize = 64 << 20;

/// What the shim does, from the environment.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// Resident budget per served mapping, bytes.
    pub budget: usize,
    /// The devices' compression algorithm.
    pub algorithm: Algorithm,
    /// Smallest mapping served, bytes (at least one page).
    pub threshold: usize,
    /// The control socket's path.
    pub control: Option<PathBuf>,
    /// Where the exit figures go.
    pub stats_fd: Option<i32>,
    /// A failure to inject.
    pub fail: FailPoint,
    /// Readahead settings of every region.
    pub readahead: uswap::ReadaheadConfig,
}

impl Settings {
    /// The settings from variables looked up with `var`; `Ok(None)` when the budget is not
    /// set (the shim then passes everything through), `Err` with the reason when a value is
    /// malformed (the shim then passes everything through too, and says why once).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, String> {
        let Some(budget) = var(ENV_BUDGET) else {
            return Ok(None);
        };
        let size = |name: &str, text: &str| {
            text.parse::<Size>()
                .map_err(|e| format!("{name}={text:?}: {e}"))
                .and_then(|s| {
                    usize::try_from(s.bytes()).map_err(|_| format!("{name}={text:?}: too large"))
                })
        };
        let budget = size(ENV_BUDGET, &budget)?;
        let threshold = match var(ENV_THRESHOLD) {
            Some(t) => size(ENV_THRESHOLD, &t)?.max(uswap::sys::PAGE_SIZE),
            None => DEFAULT_THRESHOLD,
        };
        let algorithm = match var(ENV_ALGORITHM) {
            Some(a) => a
                .parse()
                .map_err(|e| format!("{ENV_ALGORITHM}={a:?}: {e}"))?,
            None => zram::ZramConfig::default().algorithm,
        };
        let stats_fd = match var(ENV_STATS_FD) {
            Some(fd) => Some(
                fd.parse::<i32>()
                    .ok()
                    .filter(|&fd| fd >= 0)
                    .ok_or_else(|| format!("{ENV_STATS_FD}={fd:?}: not a descriptor"))?,
            ),
            None => None,
        };
        let enabled = match var(ENV_VMA_RA_ENABLED).as_deref() {
            None | Some("true" | "1") => true,
            Some("false" | "0") => false,
            Some(v) => return Err(format!("{ENV_VMA_RA_ENABLED}={v:?}: true or false")),
        };
        let max_order = match var(ENV_VMA_RA_MAX_ORDER) {
            None => uswap::readahead::DEFAULT_MAX_ORDER,
            Some(v) => v
                .parse::<u32>()
                .ok()
                .filter(|&o| o <= uswap::readahead::MAX_ORDER_CEILING)
                .ok_or_else(|| format!("{ENV_VMA_RA_MAX_ORDER}={v:?}: 0 to 9"))?,
        };
        let fail = match var(ENV_FAIL).as_deref() {
            None | Some("") => FailPoint::None,
            Some("copy") => FailPoint::Copy,
            Some(f) => return Err(format!("{ENV_FAIL}={f:?}: only `copy` is known")),
        };
        Ok(Some(Self {
            budget,
            algorithm,
            threshold,
            control: var(ENV_CONTROL)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            stats_fd,
            fail,
            readahead: uswap::ReadaheadConfig::new(enabled, max_order),
        }))
    }

    /// The configuration of a region serving one mapping.
    pub fn region(&self) -> uswap::RegionConfig {
        uswap::RegionConfig {
            resident_budget: self.budget,
            device: zram::ZramConfig {
                algorithm: self.algorithm,
                ..Default::default()
            },
            fail: self.fail,
            readahead: self.readahead,
            // A program's heap is touched by system calls (`read(2)` into a buffer) and by
            // `malloc` itself: only handler threads can serve those faults.
            faults: uswap::FaultMode::Handlers,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let list: Vec<(String, String)> = list
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |k| list.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    }

    #[test]
    fn off_without_a_budget() {
        assert_eq!(Settings::from_vars(vars(&[])), Ok(None));
    }

    #[test]
    fn reads_every_variable() {
        let s = Settings::from_vars(vars(&[
            (ENV_BUDGET, "16M"),
            (ENV_THRESHOLD, "1M"),
            (ENV_ALGORITHM, "zstd"),
            (ENV_CONTROL, "/x/y.sock"),
            (ENV_STATS_FD, "7"),
            (ENV_FAIL, "copy"),
            (ENV_VMA_RA_ENABLED, "false"),
            (ENV_VMA_RA_MAX_ORDER, "5"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.budget, 16 << 20);
        assert_eq!(s.threshold, 1 << 20);
        assert_eq!(s.algorithm, Algorithm::Zstd);
        assert_eq!(s.control, Some(PathBuf::from("/x/y.sock")));
        assert_eq!(s.stats_fd, Some(7));
        assert_eq!(s.fail, FailPoint::Copy);
        assert_eq!(s.region().resident_budget, 16 << 20);
        assert_eq!(s.region().readahead, uswap::ReadaheadConfig::new(false, 5));
    }

    #[test]
    fn malformed_values_are_errors() {
        for bad in [
            vec![(ENV_BUDGET, "lots")],
            vec![(ENV_BUDGET, "1M"), (ENV_THRESHOLD, "1Q")],
            vec![(ENV_BUDGET, "1M"), (ENV_ALGORITHM, "gzip9")],
            vec![(ENV_BUDGET, "1M"), (ENV_VMA_RA_ENABLED, "maybe")],
            vec![(ENV_BUDGET, "1M"), (ENV_VMA_RA_MAX_ORDER, "10")],
            vec![(ENV_BUDGET, "1M"), (ENV_STATS_FD, "-1")],
            vec![(ENV_BUDGET, "1M"), (ENV_FAIL, "panic")],
        ] {
            assert!(Settings::from_vars(vars(&bad)).is_err(), "{bad:?}");
        }
    }
}
