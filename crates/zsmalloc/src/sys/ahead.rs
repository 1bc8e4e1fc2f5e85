//! Fresh pages faulted in ahead of need, by a thread of the page source's own.
//!
//! A growing pool takes new pages from the arena for every zspage, and faulting them in
//! (`MADV_POPULATE_WRITE`: the kernel's page allocation, zeroing, memory-cgroup charge and
//! LRU insertion, per page) was about a tenth of a writer's time. The kernel's zram pays
//! only the allocation: its pages are neither zeroed nor charged nor on an LRU. So while
//! the pool grows (no released run is left to reuse), a background thread claims the next
//! chunk of fresh arena pages, faults it in, and publishes it as the *reserve*: a window of
//! resident pages that `alloc` carves runs from without a fault, on the writer's CPU. When
//! the writers keep every CPU busy this moves the work rather than saving it; when a CPU is
//! free (a single NBD connection, or fewer writers than CPUs) the writers go faster.
//!
//! The reserve is bounded by a quarter of the source's cache limit (256 pages, 1 MiB, by
//! default): the thread is woken when it holds less than half of that, and claims half.
//! Its pages are resident and reported with the cached pages; `trim` releases them.

use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, Weak};

use super::free::pieces;
use super::{PAGE_SIZE, PageSource, SourceInner, dont_need_runs, populate};

/// The window of resident fresh pages (in `SourceInner`, under its lock).
#[derive(Debug, Default)]
pub(super) struct Reserve {
    /// The window's first page (an address; meaningless while `pages` is 0).
    pub(super) addr: usize,
    /// Pages in the window.
    pub(super) pages: usize,
    /// The thread has been asked for a chunk, or is faulting it in.
    pub(super) in_flight: bool,
}

impl Reserve {
    /// A run of `pages` from the front of the window.
    fn take(&mut self, pages: usize) -> Option<usize> {
        if pages > self.pages {
            return None;
        }
        let addr = self.addr;
        self.addr += pages * PAGE_SIZE;
        self.pages -= pages;
        Some(addr)
    }

    /// Publishes a chunk faulted in: it extends the window where it follows it (no fresh
    /// run was taken from the arena in between), else becomes the window, and the old
    /// window's pages come back to be released.
    fn publish(&mut self, addr: usize, pages: usize) -> Option<(usize, usize)> {
        self.in_flight = false;
        if self.pages > 0 && self.addr + self.pages * PAGE_SIZE == addr {
            self.pages += pages;
            return None;
        }
        let old = (self.pages > 0).then_some((self.addr, self.pages));
        (self.addr, self.pages) = (addr, pages);
        old
    }

    /// Empties the window into `runs`, in pieces of at most [`super::MAX_RUN_PAGES`].
    pub(super) fn drain_into(&mut self, runs: &mut Vec<(usize, usize)>) {
        pieces(self.addr, std::mem::take(&mut self.pages), runs);
    }
}

impl SourceInner {
    /// A run of `pages` from the reserve. When the window is too short, its pages go to
    /// the shared cache (resident runs for reuse, under `shared_limit`) where they fit,
    /// so that the next chunk can extend a window that starts afresh.
    pub(super) fn take_reserved(&mut self, pages: usize, shared_limit: usize) -> Option<usize> {
        let taken = self.reserve.take(pages);
        if taken.is_none()
            && self.reserve.pages > 0
            && self
                .cache
                .put(self.reserve.addr, self.reserve.pages, shared_limit)
        {
            self.reserve.pages = 0;
        }
        taken
    }
}

/// A source's thread that faults pages in ahead, and its bound.
#[derive(Debug)]
pub(super) struct Ahead {
    /// Most pages kept in the reserve (0: none, and no thread).
    pub(super) max: usize,
    /// The thread's signal, once it is started (`None`: it could not be).
    thread: OnceLock<Option<Arc<Signal>>>,
}

#[derive(Debug, Default)]
struct Signal {
    state: Mutex<State>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct State {
    wanted: bool,
    stop: bool,
}

impl Signal {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Ahead {
    /// For a source that faults runs in (`populate`) and keeps at most `cache_limit` pages
    /// cached; `enabled` false keeps no reserve.
    pub(super) fn new(enabled: bool, populate: bool, cache_limit: usize) -> Self {
        // Shuttle's models run the pool's own threads only.
        let max = if enabled && populate && !cfg!(shuttle) {
            cache_limit / 4
        } else {
            0
        };
        Self {
            max,
            thread: OnceLock::new(),
        }
    }

    /// Under the source's lock, after a run was taken there: whether the thread is to be
    /// asked for a chunk ([`Ahead::wake`], after the lock): the reserve is under half its
    /// bound, no chunk is on its way, and the pool grows into fresh pages (no released run
    /// is left to reuse: those cost no memory until used, and come first).
    pub(super) fn wanted(&self, inner: &mut SourceInner) -> bool {
        let wanted = self.max > 1
            && !inner.reserve.in_flight
            && inner.reserve.pages < self.max / 2
            && inner.free.is_empty()
            && !matches!(self.thread.get(), Some(None));
        inner.reserve.in_flight |= wanted;
        wanted
    }

    /// Asks the thread (started on first use) for a chunk.
    pub(super) fn wake(&self, source: &Arc<PageSource>) {
        let Some(signal) = self.thread.get_or_init(|| start(source)) else {
            source.inner.lock().reserve.in_flight = false;
            return;
        };
        signal.state().wanted = true;
        signal.cv.notify_one();
    }

    /// Ends the thread (the source is being dropped).
    pub(super) fn stop(&self) {
        if let Some(Some(signal)) = self.thread.get() {
            signal.state().stop = true;
            signal.cv.notify_one();
        }
    }
}

fn start(source: &Arc<PageSource>) -> Option<Arc<Signal>> {
    let signal = Arc::new(Signal::default());
    let theirs = Arc::clone(&signal);
    let source = Arc::downgrade(source);
    std::thread::Builder::new()
        .name("zsmalloc-ahead".into())
        .spawn(move || run(&source, &theirs))
        .ok()?;
    Some(signal)
}

fn run(source: &Weak<PageSource>, signal: &Signal) {
    loop {
        {
            let mut s = signal.state();
            while !s.wanted && !s.stop {
                s = signal.cv.wait(s).unwrap_or_else(PoisonError::into_inner);
            }
            if s.stop {
                return;
            }
            s.wanted = false;
        }
        // The source holds the only strong references but this one: once it is dropped
        // (here, if this was the last), `stop` ends the loop.
        let Some(source) = source.upgrade() else {
            return;
        };
        source.fault_ahead();
    }
}

impl PageSource {
    /// Claims the next chunk of fresh arena pages, faults it in outside the lock and
    /// publishes it as the reserve.
    fn fault_ahead(&self) {
        let chunk = self.ahead.max / 2;
        let claimed = {
            let mut inner = self.inner.lock();
            let claimed = inner.claim_fresh(chunk);
            if claimed.is_err() {
                inner.reserve.in_flight = false;
            }
            claimed
        };
        let Ok(addr) = claimed else {
            return;
        };
        let pages = chunk;
        if let Some(ptr) = NonNull::new(addr as *mut u8) {
            populate(ptr, pages * PAGE_SIZE);
        }
        let old = self.inner.lock().reserve.publish(addr, pages);
        if let Some((addr, pages)) = old {
            let mut runs = Vec::new();
            pieces(addr, pages, &mut runs);
            dont_need_runs(&runs);
            let mut inner = self.inner.lock();
            for (addr, pages) in runs {
                inner.free_run(addr, pages);
                inner.pages_released += pages as u64;
            }
        }
    }
}
