//! Fresh pages faulted in ahead of need, by a thread of the page source's own.
//!
//! A growing pool takes new pages from the arena for every zspage, and faulting them in
//! (`MADV_POPULATE_WRITE`: the kernel's page allocation, zeroing, memory-cgroup charge and
//! LRU insertion, per page) was about a tenth of a writer's time. The kernel's zram pays
//! only the allocation: its pages are neither zeroed nor charged nor on an LRU. So while
//! the pool grows into fresh pages (runs come from the arena's untouched end or the
//! reserve, not from released runs, which are reused first), a background thread claims
//! the next chunk of fresh arena pages, faults it in, and publishes it as the *reserve*: a
//! window of resident pages that `alloc` carves runs from without a fault, on the writer's
//! CPU. The thread runs only on CPUs nothing else wants (`SCHED_IDLE`): where a CPU is
//! free (a single NBD connection, or fewer writers than CPUs) the writers go faster; where
//! every CPU writes, the thread gets little time, the reserve runs dry and the writers
//! fault their pages in themselves, as without it.
//!
//! The reserve is bounded by a quarter of the source's cache limit, at most [`MAX_RESERVE`]
//! pages (256, 1 MiB, by default): the thread is woken when it holds less than half of
//! that, and claims half. Its pages are resident and reported with the cached pages (but
//! for a chunk on its way, up to half the bound); `trim` releases them, and a chunk that
//! was on its way during a `trim` is released when it arrives.

use std::ptr::NonNull;
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, Weak};

use super::free::pieces;
use super::fresh::AHEAD_WINDOW;
use super::{ARENA_PAGES, PAGE_SIZE, PageSource, SourceInner, populate};

/// The most pages a reserve holds, whatever the cache limit: more would not fault pages in
/// sooner, only hold more memory (and a chunk must fit in one arena).
pub(super) const MAX_RESERVE: usize = 256;
const _: () = assert!(MAX_RESERVE / 2 <= ARENA_PAGES);

/// The window of resident fresh pages (in `SourceInner`, under its lock).
#[derive(Debug, Default)]
pub(super) struct Reserve {
    /// The window's first page (an address; meaningless while `pages` is 0).
    pub(super) addr: usize,
    /// Pages in the window.
    pub(super) pages: usize,
    /// The thread has been asked for a chunk, or is faulting it in.
    pub(super) in_flight: bool,
    /// A `trim` came while a chunk was on its way, and wants its memory back too: the
    /// chunk is not claimed, or, claimed already, is released when it arrives.
    recalled: bool,
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
    /// window's pages come back to be released; a recalled chunk comes back itself.
    fn publish(&mut self, addr: usize, pages: usize) -> Option<(usize, usize)> {
        self.in_flight = false;
        if std::mem::take(&mut self.recalled) {
            return Some((addr, pages));
        }
        if self.pages > 0 && self.addr + self.pages * PAGE_SIZE == addr {
            self.pages += pages;
            return None;
        }
        let old = (self.pages > 0).then_some((self.addr, self.pages));
        (self.addr, self.pages) = (addr, pages);
        old
    }

    /// Empties the window into `runs`, in pieces of at most [`super::MAX_RUN_PAGES`], for
    /// a `trim`, and recalls a chunk on its way.
    pub(super) fn drain_into(&mut self, runs: &mut Vec<(usize, usize)>) {
        pieces(self.addr, std::mem::take(&mut self.pages), runs);
        self.recalled |= self.in_flight;
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
            (cache_limit / 4).min(MAX_RESERVE)
        } else {
            0
        };
        Self {
            max,
            thread: OnceLock::new(),
        }
    }

    /// Under the source's lock, after a run was taken there: whether the thread is to be
    /// asked for a chunk ([`Ahead::wake`], after the lock): the pool grows into fresh
    /// pages (`fresh`: the run came from the reserve or the arena's untouched end, not
    /// from a released run, which costs no memory until used), released runs are not
    /// left to reuse (fewer pages of them than a chunk), the reserve is under half its
    /// bound, and no chunk is on its way. (While released runs were left, a reserve left
    /// over from before took the runs and was refilled from fresh address space: the
    /// released runs were never reused, and every fill after a discard grew the arenas by
    /// what it stored.)
    pub(super) fn wanted(&self, inner: &mut SourceInner, fresh: bool) -> bool {
        let wanted = fresh
            && inner.free.pages() < self.chunk()
            && self.max > 1
            && !inner.reserve.in_flight
            && inner.reserve.pages < self.max / 2
            && !matches!(self.thread.get(), Some(None));
        inner.reserve.in_flight |= wanted;
        wanted
    }

    /// Pages the thread faults in at a time: half the reserve's bound.
    fn chunk(&self) -> usize {
        self.max / 2
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
    idle_priority();
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
        // The pool and its runs hold the other strong references: once the source is
        // dropped (here, if this one was the last), `stop` ends the loop.
        let Some(source) = source.upgrade() else {
            return;
        };
        source.fault_ahead();
    }
}

/// Runs the calling thread only on CPUs nothing else wants (`SCHED_IDLE`): faulting pages
/// in ahead helps writers only where a CPU is free; where every CPU writes, the writers
/// fault their pages in themselves, as without the thread, and it does not take their
/// time. (Best effort: where the policy is refused the thread runs at normal priority.)
fn idle_priority() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `sched_setscheduler` reads `param` during the call; pid 0 is the calling
    // thread.
    let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &raw const param) };
}

impl PageSource {
    /// Claims the next chunk of fresh arena pages, faults it in outside the lock and
    /// publishes it as the reserve.
    fn fault_ahead(&self) {
        let chunk = self.ahead.chunk();
        let claimed = {
            let mut inner = self.inner.lock();
            let reuse = inner.free.pages() >= chunk;
            let claimed = if std::mem::take(&mut inner.reserve.recalled) || reuse {
                None
            } else {
                inner.claim_fresh(chunk, AHEAD_WINDOW).ok()
            };
            inner.reserve.in_flight = claimed.is_some();
            claimed
        };
        let Some(addr) = claimed else {
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
            self.give_back(&runs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: usize = 1 << 30;

    #[test]
    fn a_chunk_extends_a_window_it_follows_and_replaces_one_it_does_not() {
        let mut r = Reserve::default();
        assert_eq!(r.publish(A, 8), None);
        assert_eq!(r.take(3), Some(A));
        // Follows the window (A + 3 pages, 5 left): extends it.
        assert_eq!(r.publish(A + 8 * PAGE_SIZE, 8), None);
        assert_eq!((r.addr, r.pages), (A + 3 * PAGE_SIZE, 13));
        // Elsewhere (fresh pages were taken from the arena meanwhile): replaces it, and the
        // old window comes back to be released.
        let b = A + 100 * PAGE_SIZE;
        assert_eq!(r.publish(b, 8), Some((A + 3 * PAGE_SIZE, 13)));
        assert_eq!((r.addr, r.pages), (b, 8));
    }

    #[test]
    fn a_chunk_claimed_before_a_trim_comes_back() {
        let mut r = Reserve::default();
        assert_eq!(r.publish(A, 8), None);
        // A trim with no chunk on its way recalls none.
        let mut runs = Vec::new();
        r.drain_into(&mut runs);
        assert_eq!(runs, [(A, 8)]);
        assert_eq!(r.pages, 0);
        assert!(!r.recalled);
        // A trim while one is on its way: it is released, not published.
        r.in_flight = true;
        r.drain_into(&mut Vec::new());
        let b = A + 8 * PAGE_SIZE;
        assert_eq!(r.publish(b, 8), Some((b, 8)));
        assert_eq!(r.pages, 0);
        assert!(!r.in_flight);
        // The next one is published.
        assert_eq!(r.publish(b, 8), None);
        assert_eq!(r.pages, 8);
    }

    #[test]
    fn a_window_too_short_for_a_run_goes_to_the_shared_cache() {
        let mut inner = SourceInner::default();
        assert_eq!(inner.reserve.publish(A, 3), None);
        assert_eq!(inner.take_reserved(4, 100), None);
        assert_eq!((inner.reserve.pages, inner.cache.pages), (0, 3));
        assert_eq!(inner.cache.take(3), Some(A));
        // Where the cache is full, the window stays.
        assert_eq!(inner.reserve.publish(A, 3), None);
        assert_eq!(inner.take_reserved(4, 2), None);
        assert_eq!((inner.reserve.pages, inner.cache.pages), (3, 0));
    }

    #[test]
    fn the_reserve_is_bounded_whatever_the_cache_limit() {
        assert_eq!(Ahead::new(true, true, 1024).max, 256);
        assert_eq!(Ahead::new(true, true, 1 << 40).max, MAX_RESERVE);
        assert_eq!(Ahead::new(true, true, 400).max, 100);
        assert_eq!(Ahead::new(false, true, 1024).max, 0);
        assert_eq!(Ahead::new(true, false, 1024).max, 0);
    }
}
