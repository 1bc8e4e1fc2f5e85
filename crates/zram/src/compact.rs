//! Automatic compaction (beyond the kernel, which compacts only when told or under reclaim):
//! a background thread compacts the pool when the pages it could free pass a threshold.
//! Frees nudge it; otherwise it looks every `interval`.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use zsmalloc::Pool;

/// When to compact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoCompact {
    /// Compact when at least this many pages are freeable (whole zspages, as the kernel
    /// counts them, plus what shortening partly used zspages would give back)…
    pub min_pages: usize,
    /// …and they are at least this many thousandths of the pool's pages.
    pub per_mille: usize,
    /// How often to look without a nudge.
    pub interval: Duration,
}

impl Default for AutoCompact {
    fn default() -> Self {
        Self {
            min_pages: 16,
            per_mille: 1,
            interval: Duration::from_millis(250),
        }
    }
}

impl AutoCompact {
    /// Would this policy compact `pool` now?
    pub fn due(&self, pool: &Pool) -> bool {
        let freeable = pool.freeable_pages() + pool.shortenable_pages();
        freeable >= self.min_pages && freeable * 1000 >= pool.total_pages() * self.per_mille
    }
}

#[derive(Debug, Default)]
struct Signal {
    stop: bool,
    nudged: bool,
}

/// The background compaction thread of one device.
#[derive(Debug)]
pub struct Compactor {
    signal: Arc<(Mutex<Signal>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Compactor {
    /// Starts the thread.
    pub fn start(pool: Arc<Pool>, policy: AutoCompact) -> Self {
        let signal = Arc::new((Mutex::new(Signal::default()), Condvar::new()));
        let theirs = Arc::clone(&signal);
        let thread = std::thread::Builder::new()
            .name("zram-compact".into())
            .spawn(move || run(&pool, policy, &theirs))
            .ok();
        Self { signal, thread }
    }

    /// Asks the thread to look now.
    pub fn nudge(&self) {
        let (m, cv) = &*self.signal;
        m.lock().nudged = true;
        cv.notify_one();
    }
}

fn run(pool: &Pool, policy: AutoCompact, signal: &(Mutex<Signal>, Condvar)) {
    let (m, cv) = signal;
    loop {
        {
            let mut s = m.lock();
            if !s.nudged && !s.stop {
                cv.wait_for(&mut s, policy.interval);
            }
            if s.stop {
                return;
            }
            s.nudged = false;
        }
        if policy.due(pool) {
            pool.compact();
        }
    }
}

impl Drop for Compactor {
    fn drop(&mut self) {
        let (m, cv) = &*self.signal;
        m.lock().stop = true;
        cv.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
