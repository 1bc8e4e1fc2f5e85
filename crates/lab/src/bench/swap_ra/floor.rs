//! The floor under a compressed-tier fault on this machine: a bare userfaultfd round trip
//! (the program touches a missing page, a handler thread reads the fault, installs a ready
//! page with `UFFDIO_COPY` and wakes the program with `UFFDIO_WAKE`) with no device, page
//! table or eviction, for each way a handler can wait for faults. What a region's fault
//! costs beyond the matching row is the region's own work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rand::SeedableRng;
use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use serde::Serialize;
use uswap::histogram::{Histogram, Summary};
use uswap::sys::{self, Fault, Mapping, PAGE_SIZE, Uffd};

/// How the bare handler waits for faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Wait {
    /// Spins on the descriptor (non-blocking reads), on any CPU.
    Spin,
    /// Sleeps in `poll` until a fault is pending, on any CPU.
    Poll,
    /// Sleeps in `poll`, pinned to the CPU the program thread is pinned to: no wake-up
    /// crosses CPUs.
    PollSameCpu,
}

impl Wait {
    pub fn name(self) -> &'static str {
        match self {
            Self::Spin => "bare uffd: handler spins",
            Self::Poll => "bare uffd: handler polls",
            Self::PollSameCpu => "bare uffd: handler polls, same CPU",
        }
    }
}

/// One way's figures.
#[derive(Debug, Clone, Serialize)]
pub struct FloorRun {
    pub wait: Wait,
    pub faults: u64,
    /// Program-observed latency of each touch (every one a missing fault).
    pub latency: Summary,
    /// The handler's `UFFDIO_COPY` alone, made without waking the program.
    pub copy: Summary,
    /// The handler's `UFFDIO_WAKE` of the program after the copy.
    pub wake: Summary,
}

/// Runs `rounds` random passes over `pages` missing pages with the handler waiting `wait`.
pub fn run(pages: usize, rounds: usize, wait: Wait) -> anyhow::Result<FloorRun> {
    let uffd = Uffd::new().context("userfaultfd")?;
    let mut map = Mapping::new(pages).context("mapping")?;
    uffd.register(&map, 0, map.len(), false)
        .context("registering the mapping")?;
    let src = vec![0x5au8; PAGE_SIZE];
    let latency = Histogram::new();
    let copy = Histogram::new();
    let wake = Histogram::new();
    let stop = AtomicBool::new(false);
    let cpu = (wait == Wait::PollSameCpu).then(sys::current_cpu);
    let mut order: Vec<usize> = (0..pages).collect();
    let mut rng = SmallRng::seed_from_u64(0xf100);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let handler = scope.spawn(|| serve(&uffd, &src, wait, cpu, &stop, [&copy, &wake]));
        // Stops the handler also when a touch fails.
        struct Stop<'a>(&'a AtomicBool);
        impl Drop for Stop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Release);
            }
        }
        let guard = Stop(&stop);
        if let Some(cpu) = cpu {
            sys::pin_thread(cpu).context("pinning the program thread")?;
        }
        for r in 0..=rounds {
            map.madvise_dontneed(0, pages * PAGE_SIZE)?;
            order.shuffle(&mut rng);
            if r == 1 {
                latency.reset();
                copy.reset();
                wake.reset();
            }
            for &p in &order {
                let t = Instant::now();
                map.write(p * PAGE_SIZE + 8, &(r as u64).to_le_bytes())?;
                latency.record(t.elapsed());
            }
        }
        drop(guard);
        handler
            .join()
            .map_err(|_| anyhow::anyhow!("the bare handler panicked"))??;
        Ok(())
    })?;
    let latency = latency.snapshot().summary();
    Ok(FloorRun {
        wait,
        faults: latency.samples,
        latency,
        copy: copy.snapshot().summary(),
        wake: wake.snapshot().summary(),
    })
}

fn serve(
    uffd: &Uffd,
    src: &[u8],
    wait: Wait,
    cpu: Option<usize>,
    stop: &AtomicBool,
    [copy, wake]: [&Histogram; 2],
) -> anyhow::Result<()> {
    if let Some(cpu) = cpu {
        sys::pin_thread(cpu).context("pinning the handler")?;
    }
    let timeout = (wait != Wait::Spin).then_some(Duration::from_millis(20));
    let mut faults: Vec<Fault> = Vec::with_capacity(16);
    while !stop.load(Ordering::Acquire) {
        faults.clear();
        uffd.read_faults(timeout, 16, &mut faults)?;
        for f in &faults {
            let addr = usize::try_from(f.address)? & !(PAGE_SIZE - 1);
            // Filled without waking, then woken: the two costs apart.
            let t = Instant::now();
            uffd.copy(addr, src, false)?;
            copy.record(t.elapsed());
            let t = Instant::now();
            uffd.wake(addr, PAGE_SIZE)?;
            wake.record(t.elapsed());
        }
        if wait == Wait::Spin {
            std::hint::spin_loop();
        }
    }
    Ok(())
}
