//! Automatic compaction (beyond the kernel, which compacts only when told or under reclaim):
//! a background thread compacts the pool when the pages it could free pass a threshold.
//! Frees nudge it; otherwise it looks every `interval`, or every [`GROWING_GAP`] while the
//! pool has grown within the last `interval`, so that it sees a write burst end about an
//! interval after its last growth, or at once when a thread that wrote into a shard of the
//! pool's classes has ended ([`zsmalloc::shard_thread_exits`]: the ending thread nudges it).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use zsmalloc::Backend;

/// When to compact.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoCompact {
    /// Compact when at least this many pages are freeable (whole zspages, as the kernel
    /// counts them; once the pool stops growing, or what shortening partly used zspages
    /// would give back where that is more)…
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
    /// Would this policy compact `pool` now? `quiet`: the pool has not grown since the last
    /// look. Only then does what shortening partly used zspages would free count: a pool
    /// still filling has a partly used zspage per class that the next writes fill anyway.
    pub fn due(&self, pool: &dyn Backend, quiet: bool) -> bool {
        let pages = if quiet {
            pool.compactable_pages()
        } else {
            pool.freeable_pages()
        };
        pages >= self.min_pages && pages * 1000 >= pool.total_pages() * self.per_mille
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
    /// Nudges the thread whenever a thread that wrote into a class shard ends.
    _exits: zsmalloc::ExitWatch,
}

impl Compactor {
    /// Starts the thread.
    pub fn start(pool: Arc<dyn Backend>, policy: AutoCompact) -> Self {
        let signal = Arc::new((Mutex::new(Signal::default()), Condvar::new()));
        let theirs = Arc::clone(&signal);
        let thread = std::thread::Builder::new()
            .name("zram-compact".into())
            .spawn(move || run(&*pool, policy, &theirs))
            .ok();
        Self {
            _exits: watch_exits(&signal),
            signal,
            thread,
        }
    }

    /// Asks the thread to look now (or, if it looked less than [`MIN_GAP`] ago, then).
    /// Cheap when it is already asked: no wake-up per free.
    pub fn nudge(&self) {
        nudge(&self.signal);
    }
}

fn nudge(signal: &(Mutex<Signal>, Condvar)) {
    let (m, cv) = signal;
    let mut s = m.lock();
    if !s.nudged {
        s.nudged = true;
        cv.notify_one();
    }
}

/// Nudges through `signal` each time a thread that wrote into a class shard ends: what it
/// spread merges at once, not at the thread's next poll (up to [`GROWING_GAP`] later; a
/// read-back of the burst on many cores takes about that long).
fn watch_exits(signal: &Arc<(Mutex<Signal>, Condvar)>) -> zsmalloc::ExitWatch {
    let signal = Arc::clone(signal);
    zsmalloc::watch_shard_thread_exits(move || nudge(&signal))
}

/// The time between two looks while the pool grows (see `run`).
pub const GROWING_GAP: Duration = Duration::from_millis(50);

/// The least time between two looks, however many frees nudge: a device freeing slots at
/// a high rate (a uswap region frees one per fault) wakes the thread at most this often.
pub const MIN_GAP: Duration = Duration::from_millis(10);

fn run(pool: &dyn Backend, policy: AutoCompact, signal: &(Mutex<Signal>, Condvar)) {
    let (m, cv) = signal;
    let mut last_total = pool.total_pages();
    let mut looked = std::time::Instant::now();
    // A new device is written first: looked at as a growing pool until it stands still.
    let mut wait = policy.interval.min(GROWING_GAP);
    let mut grew = looked;
    let mut exits = zsmalloc::shard_thread_exits();
    loop {
        {
            let mut s = m.lock();
            // Nudges wait for the gap; only stopping cuts it short.
            let gap_end = looked + MIN_GAP.min(policy.interval);
            while !s.stop && std::time::Instant::now() < gap_end {
                cv.wait_until(&mut s, gap_end);
            }
            if !s.nudged && !s.stop {
                cv.wait_for(&mut s, wait);
            }
            if s.stop {
                return;
            }
            s.nudged = false;
        }
        looked = std::time::Instant::now();
        let total = pool.total_pages();
        if total > last_total {
            grew = looked;
        }
        // Quiet: no growth for an interval (as when looks were an interval apart). A pool
        // that grew is looked at more often, so that the end of a write burst is seen (and
        // what the burst spread over shards merged: zsmalloc's `merge.rs`) within about an
        // interval, not two.
        let quiet = looked.duration_since(grew) >= policy.interval;
        last_total = total;
        wait = if quiet {
            policy.interval
        } else {
            policy.interval.min(GROWING_GAP)
        };
        // A thread gone that wrote into a shard other than its class's home left partly
        // used zspages nobody fills any more (and nudged this look): it counts as quiet, so
        // that they merge now (threads still writing spread anew, up to a zspage per class
        // each).
        let now_exits = zsmalloc::shard_thread_exits();
        let ended = now_exits != exits;
        exits = now_exits;
        if policy.due(pool, quiet || ended) {
            pool.compact();
            last_total = pool.total_pages();
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

#[cfg(test)]
mod tests {
    use super::*;
    use zsmalloc::{Pool, PoolConfig};

    #[test]
    fn shortening_counts_only_once_the_pool_is_quiet() {
        let pool = Pool::with_config(PoolConfig {
            shards: 1,
            ..PoolConfig::default()
        })
        .unwrap();
        // Three objects of a class with long zspages: one partly used zspage, nothing the
        // kernel's compaction could free, several pages shortening could.
        let class = *pool
            .classes()
            .classes()
            .iter()
            .find(|c| c.pages_per_zspage >= 4 && c.size >= 400)
            .unwrap();
        let handles: Vec<_> = (0..3)
            .map(|_| pool.malloc(class.capacity()).unwrap())
            .collect();
        assert_eq!(pool.freeable_pages(), 0);
        assert!(pool.shortenable_pages() >= 2);
        assert_eq!(pool.compactable_pages(), pool.shortenable_pages());
        let policy = AutoCompact {
            min_pages: 1,
            per_mille: 1,
            interval: Duration::from_millis(250),
        };
        assert!(
            !policy.due(&pool, false),
            "a growing pool is left to fill its zspage"
        );
        assert!(policy.due(&pool, true));
        assert!(pool.compact() >= 2);
        assert!(!policy.due(&pool, true));
        for h in handles {
            pool.free(h).unwrap();
        }
        assert_eq!(pool.total_pages(), 0);
    }

    #[test]
    fn an_ended_shard_writer_nudges() {
        let pool = Pool::new(8).unwrap();
        let signal = Arc::new((Mutex::new(Signal::default()), Condvar::new()));
        let watch = watch_exits(&signal);
        let nudged = || std::mem::take(&mut signal.0.lock().nudged);
        // (Other tests' threads may end meanwhile and nudge too: only a nudge is checked,
        // never its absence.) A thread that wrote into shard 3 nudges before its join
        // returns.
        let h = std::thread::scope(|s| {
            s.spawn(|| {
                zsmalloc::pin_malloc_shard(Some(3));
                pool.malloc(500).unwrap()
            })
            .join()
            .unwrap()
        });
        assert!(nudged(), "an ended shard writer did not nudge");
        drop(watch);
        pool.free(h).unwrap();
    }
}
