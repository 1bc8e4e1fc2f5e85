//! Post-processing: choosing the slots that writeback and recompression work on, and the
//! kernel's argument forms for `idle`, `writeback` and `recompress`.
//!
//! Candidates are bucketed by stored length in 64-byte steps and taken largest first, as
//! the kernel's post-processing buckets (`PP_BUCKET_SIZE_RANGE`) take them: the slots that
//! give back the most memory go first, which matters when a limit (`writeback_limit`,
//! `max_pages`) stops the work early. Only indexes are kept; each slot is locked and
//! checked again when its turn comes, since it may have changed since the scan.

use crate::error::{Error, Result};
use crate::slot::{Flags, SlotEntry};
use crate::store::Store;

/// Bytes per candidate bucket.
const BUCKET: usize = 64;

/// Which slots a pass takes (the kernel's writeback and recompression `type=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Every slot holding an object.
    Any,
    /// Idle slots.
    Idle,
    /// Huge slots (stored raw).
    Huge,
    /// Slots both huge and idle.
    HugeIdle,
    /// Slots recompression found incompressible.
    Incompressible,
    /// Beyond the kernel, for policies: slots last accessed at or before this device
    /// time (seconds since it started), idle-marked or not.
    IdleSince(u32),
    /// Huge slots last accessed at or before this device time.
    HugeIdleSince(u32),
}

impl Mode {
    /// Does a resident slot with entry `e` qualify?
    pub(crate) fn admits(self, e: &SlotEntry) -> bool {
        let f = e.flags;
        e.is_resident()
            && match self {
                Mode::Any => true,
                Mode::Idle => f.contains(Flags::IDLE),
                Mode::Huge => f.contains(Flags::HUGE),
                Mode::HugeIdle => f.contains(Flags::HUGE.with(Flags::IDLE)),
                Mode::Incompressible => f.contains(Flags::INCOMPRESSIBLE),
                Mode::IdleSince(t) => e.ac_time <= t,
                Mode::HugeIdleSince(t) => e.ac_time <= t && f.contains(Flags::HUGE),
            }
    }

    fn parse(s: &str, incompressible: bool) -> Result<Self> {
        match s {
            "idle" => Ok(Mode::Idle),
            "huge" => Ok(Mode::Huge),
            "huge_idle" => Ok(Mode::HugeIdle),
            "incompressible" if incompressible => Ok(Mode::Incompressible),
            _ => Err(Error::InvalidArgument(s.to_owned())),
        }
    }
}

/// What `idle` marks: every slot, or those not accessed for an age.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdleRequest {
    /// `all`.
    All,
    /// `<seconds>`: slots last accessed at least this long ago.
    Age(u32),
}

impl std::str::FromStr for IdleRequest {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        if t == "all" {
            return Ok(IdleRequest::All);
        }
        // Any u64, as the kernel's kstrtoull takes it; an age past the device clock's
        // range marks nothing.
        t.parse::<u64>()
            .map(|age| IdleRequest::Age(u32::try_from(age).unwrap_or(u32::MAX)))
            .map_err(|_| Error::InvalidArgument(s.to_owned()))
    }
}

/// A `writeback` request: the legacy single word (`idle`, `huge`, `huge_idle`,
/// `incompressible`), or the 6.16 form of repeatable `type=MODE`, `page_index=N` and
/// `page_indexes=LOW-HIGH` (inclusive) parameters. A `type=` without indexes covers the
/// whole device; indexes are taken in the last `type=` given before them (any slot when
/// none was). Indexes are 4 KiB pages, as the kernel's; with larger units a page names its
/// unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WritebackRequest {
    /// (mode, first page, last page + 1) scans.
    pub(crate) scans: Vec<(Mode, u64, Option<u64>)>,
    /// Pages to write at most (0: no limit; beyond the kernel, for policies' budgets).
    pub max_pages: u64,
}

impl WritebackRequest {
    /// Every slot of `mode`.
    pub fn mode(mode: Mode) -> Self {
        Self {
            scans: vec![(mode, 0, None)],
            max_pages: 0,
        }
    }
}

impl std::str::FromStr for WritebackRequest {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidArgument(s.trim().to_owned());
        let range = || Error::IndexOutOfRange(s.trim().to_owned());
        let words: Vec<&str> = s.split_whitespace().collect();
        if let [word] = words[..]
            && !word.contains('=')
        {
            return Ok(Self::mode(Mode::parse(word, true)?));
        }
        let mut scans = Vec::new();
        let mut mode = Mode::Any;
        let mut typed_alone = None;
        for kv in &words {
            let (k, v) = kv.split_once('=').ok_or_else(bad)?;
            match k {
                "type" => {
                    mode = Mode::parse(v, true)?;
                    typed_alone = Some(mode);
                }
                "page_index" => {
                    let n = page_index(v, kv)?;
                    scans.push((mode, n, Some(n.checked_add(1).ok_or_else(range)?)));
                    typed_alone = None;
                }
                "page_indexes" => {
                    let (lo, hi) = v.split_once('-').ok_or_else(bad)?;
                    let (lo, hi) = (page_index(lo, kv)?, page_index(hi, kv)?);
                    if lo > hi {
                        return Err(range());
                    }
                    scans.push((mode, lo, Some(hi.checked_add(1).ok_or_else(range)?)));
                    typed_alone = None;
                }
                _ => return Err(bad()),
            }
        }
        if let Some(m) = typed_alone
            && scans.is_empty()
        {
            scans.push((m, 0, None));
        }
        if scans.is_empty() {
            return Err(bad());
        }
        Ok(Self {
            scans,
            max_pages: 0,
        })
    }
}

/// A `recompress` request: `type=idle|huge|huge_idle`, `threshold=BYTES`, `max_pages=N`,
/// `algo=NAME` or `priority=N` (which wins); all optional.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecompressRequest {
    /// Which slots (`None`: all).
    pub mode: Option<Mode>,
    /// Only slots whose stream is at least this long, and kept only if the new one is
    /// shorter (0: no threshold).
    pub threshold: usize,
    /// Attempts at most (0: no limit).
    pub max_pages: u64,
    /// The algorithm, by name.
    pub algo: Option<crate::Algorithm>,
    /// The algorithm, by priority.
    pub priority: Option<u8>,
}

impl std::str::FromStr for RecompressRequest {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidArgument(s.trim().to_owned());
        let mut r = RecompressRequest::default();
        for kv in s.split_whitespace() {
            let (k, v) = kv.split_once('=').ok_or_else(bad)?;
            match k {
                "type" => r.mode = Some(Mode::parse(v, false)?),
                "threshold" => {
                    r.threshold = number(v)
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or_else(bad)?;
                }
                "max_pages" => r.max_pages = number(v).ok_or_else(bad)?,
                "algo" => r.algo = Some(v.parse().map_err(|_| bad())?),
                "priority" => {
                    r.priority = Some(
                        v.parse::<u8>()
                            .ok()
                            .filter(|p| (1..=3).contains(p))
                            .ok_or_else(bad)?,
                    );
                }
                _ => return Err(bad()),
            }
        }
        Ok(r)
    }
}

fn number(v: &str) -> Option<u64> {
    v.parse::<u64>().ok()
}

/// A page index as the kernel's `kstrtoul` reads it: digits (a `+` before them allowed);
/// too large for 64 bits is `ERANGE`, anything else not a number `EINVAL`.
fn page_index(v: &str, word: &str) -> Result<u64> {
    v.parse::<u64>().map_err(|e| match e.kind() {
        std::num::IntErrorKind::PosOverflow => Error::IndexOutOfRange(word.to_owned()),
        _ => Error::InvalidArgument(word.to_owned()),
    })
}

/// The slots in `scans` that `admits` takes, largest stream first.
pub(crate) fn select(store: &Store, scans: &[(Mode, u64, Option<u64>)]) -> Result<Vec<usize>> {
    let per_unit = (store.unit_size() / crate::PAGE_SIZE) as u64;
    let slots = store.slots();
    let mut buckets: Vec<Vec<usize>> = vec![Vec::new(); store.unit_size() / BUCKET + 1];
    let mut seen = std::collections::HashSet::new();
    let pages = store.disksize() / crate::PAGE_SIZE as u64;
    for &(mode, lo, hi) in scans {
        let hi = hi.unwrap_or(pages);
        if lo >= pages || hi > pages {
            return Err(Error::IndexOutOfRange(format!(
                "pages {lo}..{hi} beyond the device's {pages} pages"
            )));
        }
        let (first, end) = (
            (lo / per_unit) as usize,
            (hi.div_ceil(per_unit) as usize).min(slots),
        );
        for index in first..end {
            let e = store.lock(index).get();
            if mode.admits(&e) && seen.insert(index) {
                let last = buckets.len() - 1;
                buckets[(e.len / BUCKET).min(last)].push(index);
            }
        }
    }
    Ok(buckets.into_iter().rev().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeback_arguments_parse_as_the_kernels() {
        let w = |s: &str| s.parse::<WritebackRequest>().map(|r| r.scans);
        assert_eq!(w("idle").unwrap(), vec![(Mode::Idle, 0, None)]);
        assert_eq!(w("huge_idle\n").unwrap(), vec![(Mode::HugeIdle, 0, None)]);
        assert_eq!(
            w("incompressible").unwrap(),
            vec![(Mode::Incompressible, 0, None)]
        );
        assert_eq!(w("type=huge").unwrap(), vec![(Mode::Huge, 0, None)]);
        assert_eq!(w("page_index=7").unwrap(), vec![(Mode::Any, 7, Some(8))]);
        assert_eq!(
            w("page_index=42 page_indexes=100-200 type=idle page_indexes=5-5").unwrap(),
            vec![
                (Mode::Any, 42, Some(43)),
                (Mode::Any, 100, Some(201)),
                (Mode::Idle, 5, Some(6))
            ]
        );
        // Malformed words are EINVAL; ranges that cannot be on any device ERANGE, as the
        // kernel's since 6.16.
        let (inval, range) = (libc::EINVAL, libc::ERANGE);
        for (bad, errno) in [
            ("", inval),
            ("cold", inval),
            ("page_index=", inval),
            ("page_index=-1", inval),
            ("page_indexes=5", inval),
            ("page_indexes=x-3", inval),
            ("type=all", inval),
            ("idle huge", inval),
            ("page_index=1 x=2", inval),
            ("page_indexes=9-3", range),
            ("page_index=18446744073709551615", range),
            ("page_index=18446744073709551616", range),
            ("page_indexes=0-18446744073709551615", range),
        ] {
            assert_eq!(w(bad).unwrap_err().errno(), errno, "{bad:?}");
        }
    }

    #[test]
    fn recompress_and_idle_arguments_parse_as_the_kernels() {
        let r: RecompressRequest = "type=huge_idle threshold=1000 max_pages=5 priority=2"
            .parse()
            .unwrap();
        assert_eq!(
            (r.mode, r.threshold, r.max_pages, r.priority),
            (Some(Mode::HugeIdle), 1000, 5, Some(2))
        );
        assert_eq!(
            "".parse::<RecompressRequest>().unwrap(),
            RecompressRequest::default()
        );
        assert_eq!(
            "algo=zstd".parse::<RecompressRequest>().unwrap().algo,
            Some(crate::Algorithm::Zstd)
        );
        for bad in [
            "type=incompressible",
            "priority=0",
            "priority=4",
            "threshold=x",
            "algo=gzip",
            "idle",
        ] {
            assert_eq!(
                bad.parse::<RecompressRequest>().unwrap_err().errno(),
                libc::EINVAL,
                "{bad:?}"
            );
        }
        assert_eq!("all\n".parse::<IdleRequest>().unwrap(), IdleRequest::All);
        assert_eq!(
            "3600".parse::<IdleRequest>().unwrap(),
            IdleRequest::Age(3600)
        );
        for bad in ["", "-1", "soon", "1.5"] {
            assert!(bad.parse::<IdleRequest>().is_err(), "{bad:?}");
        }
    }
}
