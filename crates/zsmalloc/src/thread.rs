//! Threads as the pool tells them apart: each thread's number, which picks its shard of a
//! sharded class (`shard.rs`), the count of threads gone that allocated in a shard other
//! than a class's home, and the tests' hook that pins a thread to a shard.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A small number naming the calling thread, handed out in order of first use: a sharded
/// class's shard for this thread is `thread_number() % shards`, afmalloc's home heap is
/// `thread_number() % heaps`, and the zram device counts in cell `thread_number() % cells`.
/// (Keyed by thread rather than by CPU so that one thread keeps to one shard even when the
/// scheduler moves it: a single writer then packs its objects exactly as the kernel's pool
/// would.)
#[inline]
pub fn thread_number() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static NUMBER: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    NUMBER.with(|n| *n)
}

/// Threads that allocated in a shard other than a class's home and have since ended.
static SHARD_EXITS: AtomicUsize = AtomicUsize::new(0);

/// Marks, for its thread, that it allocated in a shard other than a class's home; counts
/// the thread in [`SHARD_EXITS`] when it ends.
struct ShardUser(Cell<bool>);

impl Drop for ShardUser {
    fn drop(&mut self) {
        if self.0.get() {
            SHARD_EXITS.fetch_add(1, Ordering::Release);
            // Called outside the list's lock, so that a watcher may drop its watch.
            let watchers: Vec<Watcher> = watchers().iter().map(|(_, w)| Arc::clone(w)).collect();
            for w in watchers {
                w();
            }
        }
    }
}

/// What a [`watch_shard_thread_exits`] caller asked to run.
type Watcher = Arc<dyn Fn() + Send + Sync>;

/// The watchers, by the number of their [`ExitWatch`]. (A plain `std` lock: it is taken
/// while a thread's locals are torn down, and only when a watch is made or dropped or a
/// counted thread ends.)
static WATCHERS: std::sync::Mutex<Vec<(u64, Watcher)>> = std::sync::Mutex::new(Vec::new());

fn watchers() -> std::sync::MutexGuard<'static, Vec<(u64, Watcher)>> {
    // A watcher runs outside the lock: nothing can poison it but a failed allocation.
    WATCHERS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs `watcher` on every thread that [`shard_thread_exits`] counts, as it ends, right
/// after the count moved (so a background compactor can look at once instead of at its
/// next poll), until the returned watch is dropped. `watcher` runs while the ending
/// thread's locals are torn down: it must be short and must not use thread-locals of its
/// own. (An ending thread that took it before the watch was dropped may still run it
/// after the drop returned.)
#[must_use = "the watcher runs until the watch is dropped"]
pub fn watch_shard_thread_exits(watcher: impl Fn() + Send + Sync + 'static) -> ExitWatch {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    watchers().push((id, Arc::new(watcher)));
    ExitWatch(id)
}

/// Keeps a [`watch_shard_thread_exits`] watcher registered; dropping it removes it.
#[derive(Debug)]
pub struct ExitWatch(u64);

impl Drop for ExitWatch {
    fn drop(&mut self) {
        let mut all = watchers();
        let gone = all
            .iter()
            .position(|(id, _)| *id == self.0)
            .map(|i| all.swap_remove(i));
        // Dropped after the lock: what the watcher holds may end a counted thread.
        drop(all);
        drop(gone);
    }
}

thread_local! {
    static SHARD_USER: ShardUser = const { ShardUser(Cell::new(false)) };
}

/// Shard `shard` of a sharded class is the calling thread's to allocate in: returns it,
/// first marking the thread as one whose end [`shard_thread_exits`] counts, unless it is
/// the home shard (0): merging moves objects into that one, never out of it.
#[inline]
pub(crate) fn own_shard(shard: usize) -> usize {
    if shard != 0 {
        // Fails only while the thread's locals are being torn down; it is ending then.
        let _ = SHARD_USER.try_with(|u| u.0.set(true));
    }
    shard
}

/// How many threads, in this process, have ended after allocating in a shard of a sharded
/// class other than its home shard (in any pool). What such a thread spread stays in
/// partly used zspages that no thread fills any more until a merge (`Pool::compact`): a
/// change of this count tells a background compactor that a writer has stopped for good,
/// without waiting for the pool to stay still. (The count moves when the thread's locals
/// are destroyed, after its closure returned: before an explicit `join` of it returns, but
/// perhaps after the end of a `std::thread::scope` that joined it implicitly.)
pub fn shard_thread_exits() -> usize {
    SHARD_EXITS.load(Ordering::Acquire)
}

thread_local! {
    /// Tests: the shard (modulo the shards per class) this thread's allocations use.
    static PINNED: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// The shard [`pin_malloc_shard`] pinned the calling thread's allocations to, if any.
#[inline]
pub(crate) fn pinned() -> Option<usize> {
    PINNED.with(std::cell::Cell::get)
}

/// Test hook: pins the calling thread's allocations (`malloc`, and `malloc_dedup` when it
/// stores) to shard `shard % shards` of every class, marking the classes it allocates in
/// sharded, as contention would; `None` goes back to the normal choice. It lets tests put
/// objects in chosen shards without racing threads for it. (A thread-local: under
/// `--cfg shuttle` every model thread shares it.)
#[doc(hidden)]
pub fn pin_malloc_shard(shard: Option<usize>) {
    PINNED.with(|p| p.set(shard));
}
