//! The served regions of this process and the decisions of the interposed calls: which
//! mappings a region serves, and what `munmap`, `madvise`, `mremap` and a fixed `mmap` do
//! to a region's pages. The calls themselves, and the kernel's own versions, are in `sys`;
//! this module only decides, so it has no `unsafe` code.
//!
//! Locking: the registry's mutex is held only to look up, add or remove entries and to
//! discard pages. A region is made and dropped outside it, since making one starts threads
//! and dropping one joins them, and a thread's start and end go through `mmap` and
//! `munmap` (Rust's signal stacks), which come back here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use uswap::sys::PAGE_SIZE;
use uswap::{Region, RegionStats};

use crate::config::Settings;
use crate::spans;
use uswap::ProgramFigures as Report;

/// One served mapping.
#[derive(Debug)]
struct Served {
    /// Its first byte.
    addr: usize,
    /// Its length (whole pages); one guard page follows.
    len: usize,
    /// Offsets the program has unmapped (inaccessible now), merged.
    gone: Vec<(usize, usize)>,
    region: Region,
}

impl Served {
    /// The addresses the region owns: its pages and its guard page.
    fn span(&self) -> (usize, usize) {
        (self.addr, self.addr + self.len + PAGE_SIZE)
    }
}

/// The shim's state in this process.
#[derive(Debug)]
pub struct Shim {
    settings: Settings,
    regions: Mutex<Vec<Served>>,
    /// Last figures of the regions already unmapped.
    dropped: Mutex<Vec<RegionStats>>,
    served: AtomicU64,
    passed: AtomicU64,
    /// Set once making a region failed because userfaultfd is unavailable: no more tries.
    unavailable: OnceLock<String>,
    warned: AtomicBool,
}

static SHIM: OnceLock<Shim> = OnceLock::new();

/// Turns the shim on with `settings` (once; later calls change nothing).
pub fn init(settings: Settings) -> &'static Shim {
    SHIM.get_or_init(|| Shim::new(settings))
}

/// The shim, if it is on.
pub fn active() -> Option<&'static Shim> {
    SHIM.get()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn page_end(addr: usize, len: usize) -> usize {
    addr.saturating_add(len)
        .saturating_add(PAGE_SIZE - 1)
        .min(usize::MAX - PAGE_SIZE + 1)
        & !(PAGE_SIZE - 1)
}

/// What `munmap` and `madvise` leave to the kernel, and what they still have to do to
/// region pages.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Ranges outside every region: the kernel's call applies to them.
    pub real: Vec<(usize, usize)>,
    /// Region pages to make inaccessible (`mprotect(PROT_NONE)`) after the discard, as
    /// `munmap` of part of a region leaves them.
    pub hide: Vec<(usize, usize)>,
}

impl Shim {
    /// A shim with no regions yet.
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            regions: Mutex::new(Vec::new()),
            dropped: Mutex::new(Vec::new()),
            served: AtomicU64::new(0),
            passed: AtomicU64::new(0),
            unavailable: OnceLock::new(),
            warned: AtomicBool::new(false),
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Should a region serve `mmap(addr, len, prot, flags, fd, _)`? Only a fresh private
    /// anonymous read-write mapping of at least the threshold, placed by the kernel.
    pub fn wants(&self, addr_null: bool, len: usize, prot: i32, flags: i32, fd: i32) -> bool {
        // The mapping type (the low bits: MAP_SHARED, MAP_PRIVATE, MAP_SHARED_VALIDATE)
        // must be MAP_PRIVATE.
        const MAP_TYPE: i32 = 0x0f;
        let refused = libc::MAP_FIXED
            | libc::MAP_HUGETLB
            | libc::MAP_GROWSDOWN
            | libc::MAP_STACK
            | libc::MAP_FIXED_NOREPLACE;
        addr_null
            && fd == -1
            && prot == libc::PROT_READ | libc::PROT_WRITE
            && flags & MAP_TYPE == libc::MAP_PRIVATE
            && flags & libc::MAP_ANONYMOUS != 0
            && flags & refused == 0
            && len >= self.settings.threshold
            && self.unavailable.get().is_none()
    }

    /// Counts one `mmap` passed to the kernel.
    pub fn pass(&self) {
        self.passed.fetch_add(1, Relaxed);
    }

    /// Serves a mapping of `len` bytes with a new region and returns its address; `None`
    /// when no region could be made (the caller passes the call to the kernel, counted).
    pub fn serve(&self, len: usize) -> Option<*mut u8> {
        match Region::new(len, self.settings.region()) {
            Ok(mut region) => {
                let ptr = region.as_mut_ptr();
                let served = Served {
                    addr: region.addr(),
                    len: region.len(),
                    gone: Vec::new(),
                    region,
                };
                lock(&self.regions).push(served);
                self.served.fetch_add(1, Relaxed);
                Some(ptr)
            }
            Err(e) => {
                if let uswap::Error::Unavailable(why) = &e {
                    let _ = self.unavailable.set(why.clone());
                }
                if !self.warned.swap(true, Relaxed) {
                    eprintln!(
                        "zramd run: cannot serve a {len}-byte mapping with a uswap region \
                         ({e}); passing it to the kernel as an ordinary mapping{}",
                        if self.unavailable.get().is_some() {
                            ", and every later one"
                        } else {
                            ""
                        }
                    );
                }
                self.pass();
                None
            }
        }
    }

    /// Does `addr..addr+len` touch a region (its pages or its guard page)?
    pub fn overlaps(&self, addr: usize, len: usize) -> bool {
        let end = page_end(addr, len);
        lock(&self.regions).iter().any(|s| {
            let (a, b) = s.span();
            addr < b && a < end
        })
    }

    /// `munmap(addr, len)`: a region wholly unmapped is dropped (its memory unmapped by
    /// uswap); pages of a region unmapped alone are discarded and left inaccessible until
    /// the rest goes (the region's mapping cannot be split: uswap unmaps it whole; retired,
    /// its threads never read those pages again, so hiding them cannot crash them); a
    /// region's guard page is left alone. The rest is the kernel's.
    pub fn unmap(&self, addr: usize, len: usize) -> Plan {
        let end = page_end(addr, len);
        let mut plan = Plan::default();
        let mut gone = Vec::new();
        {
            let mut regions = lock(&self.regions);
            let taken: Vec<_> = regions.iter().map(Served::span).collect();
            plan.real = spans::gaps(addr, end, &taken);
            if plan.real == [(addr, end)] {
                return plan;
            }
            let mut i = 0;
            while i < regions.len() {
                let s = &mut regions[i];
                let (from, to) = (addr.max(s.addr), end.min(s.addr + s.len));
                if from < to {
                    let _ = s.region.retire(from - s.addr, to - from);
                    spans::add(&mut s.gone, from - s.addr, to - s.addr);
                    if spans::covers(&s.gone, s.len) {
                        gone.push(regions.swap_remove(i));
                        continue;
                    }
                    plan.hide.push((from, to));
                }
                i += 1;
            }
        }
        self.retire(gone);
        plan
    }

    /// After [`Shim::unmap`] made `hide` inaccessible: retires those pages again, in case
    /// the program touched them in between (a fault on them is a SIGSEGV from now on).
    pub fn hidden(&self, hide: &[(usize, usize)]) {
        let regions = lock(&self.regions);
        for &(from, to) in hide {
            for s in regions
                .iter()
                .filter(|s| s.addr <= from && to <= s.addr + s.len)
            {
                let _ = s.region.retire(from - s.addr, to - from);
            }
        }
    }

    /// `madvise(addr, len, advice)` with an advice after which anonymous memory reads as
    /// zeroes (`MADV_DONTNEED`, `MADV_FREE`, `MADV_REMOVE`): region pages are discarded,
    /// the rest is the kernel's. Other advice on region pages is accepted and not applied:
    /// the region manages its pages (huge pages and fork stay off); elsewhere it is the
    /// kernel's.
    pub fn advise(&self, addr: usize, len: usize, discards: bool) -> Plan {
        let end = page_end(addr, len);
        let regions = lock(&self.regions);
        let taken: Vec<_> = regions.iter().map(Served::span).collect();
        let real = spans::gaps(addr, end, &taken);
        if discards && real != [(addr, end)] {
            for s in regions.iter() {
                let (from, to) = (addr.max(s.addr), end.min(s.addr + s.len));
                if from < to {
                    let _ = s.region.retire(from - s.addr, to - from);
                }
            }
        }
        Plan {
            real,
            hide: Vec::new(),
        }
    }

    /// Keeps the last figures of regions the program unmapped, then drops them (outside
    /// the registry's lock: dropping joins the region's threads).
    fn retire(&self, gone: Vec<Served>) {
        for s in gone {
            let stats = s.region.stats();
            lock(&self.dropped).push(stats);
            drop(s);
        }
    }

    /// The figures now.
    pub fn report(&self, pid: u32) -> Report {
        let mut uswap = lock(&self.dropped).clone();
        uswap.extend(lock(&self.regions).iter().map(|s| s.region.stats()));
        Report {
            pid,
            uswap,
            served: self.served.load(Relaxed),
            passed_through: self.passed.load(Relaxed),
            unavailable: self.unavailable.get().cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shim() -> Shim {
        let vars = |k: &str| (k == crate::config::ENV_BUDGET).then(|| "1M".to_owned());
        Shim::new(Settings::from_vars(vars).unwrap().unwrap())
    }

    #[test]
    fn only_large_fresh_private_anonymous_read_write_mappings_are_wanted() {
        let s = shim();
        let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let big = 64 << 20;
        assert!(s.wants(true, big, rw, anon, -1));
        assert!(s.wants(true, big, rw, anon | libc::MAP_NORESERVE, -1));
        assert!(!s.wants(true, big - 1, rw, anon, -1));
        assert!(!s.wants(false, big, rw, anon, -1));
        assert!(!s.wants(true, big, libc::PROT_READ, anon, -1));
        assert!(!s.wants(true, big, rw, anon, 3));
        assert!(!s.wants(true, big, rw, libc::MAP_PRIVATE, -1));
        for f in [
            libc::MAP_FIXED,
            libc::MAP_HUGETLB,
            libc::MAP_GROWSDOWN,
            libc::MAP_STACK,
        ] {
            assert!(!s.wants(true, big, rw, anon | f, -1), "{f:#x}");
        }
        for t in [libc::MAP_SHARED, libc::MAP_SHARED_VALIDATE] {
            assert!(
                !s.wants(true, big, rw, t | libc::MAP_ANONYMOUS, -1),
                "{t:#x}"
            );
        }
    }

    #[test]
    fn calls_away_from_regions_are_the_kernels() {
        let s = shim();
        let plan = s.unmap(0x10000, 0x1001);
        assert_eq!(plan.real, vec![(0x10000, 0x12000)]);
        assert!(plan.hide.is_empty());
        assert_eq!(
            s.advise(0x10000, 0x1000, true).real,
            vec![(0x10000, 0x11000)]
        );
        assert!(!s.overlaps(0x10000, 0x1000));
        let r = s.report(1);
        assert_eq!((r.served, r.passed_through, r.uswap.len()), (0, 0, 0));
    }
}
