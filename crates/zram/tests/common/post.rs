//! Shared by the post-processing tests: their device's settings, and a backing store that
//! stalls its first append.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

use zram::backing::{Backing, BackingStats, MemBacking};
use zram::{Algorithm, AlgorithmParams, PAGE_SIZE, RecompAlgorithm, ZramConfig};

/// A device of `pages` pages in lz4, recompressing with zstd (level 9) at priority 1,
/// without automatic compaction, writing back in batches of `batch`.
pub fn config(pages: usize, batch: u32) -> ZramConfig {
    ZramConfig {
        disksize: (pages * PAGE_SIZE) as u64,
        algorithm: Algorithm::Lz4,
        recomp_algorithm: vec![RecompAlgorithm {
            priority: 1,
            algorithm: Algorithm::Zstd,
            params: AlgorithmParams {
                level: Some(9),
                dictionary: None,
            },
        }],
        auto_compact: None,
        writeback_batch_size: batch,
        ..ZramConfig::default()
    }
}

/// A backing store whose first append waits at a barrier twice, so a test can act while
/// it is in flight: the test's first `gate.wait()` meets the append as it starts, its
/// second lets the append go on.

#[derive(Debug)]
pub struct Stalling {
    pub inner: MemBacking,
    armed: AtomicBool,
    pub gate: Barrier,
}

impl Stalling {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            inner: MemBacking::new(),
            armed: AtomicBool::new(true),
            gate: Barrier::new(2),
        })
    }
}

impl Backing for Stalling {
    fn append(&self, objects: &[&[u8]]) -> std::io::Result<Vec<u64>> {
        if self.armed.swap(false, Ordering::SeqCst) {
            self.gate.wait();
            self.gate.wait();
        }
        self.inner.append(objects)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        self.inner.read(offset, out)
    }
    fn free(&self, offset: u64, len: usize) {
        self.inner.free(offset, len);
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
    fn stats(&self) -> BackingStats {
        self.inner.stats()
    }
}
