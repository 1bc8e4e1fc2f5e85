//! Threads as the pool tells them apart: each thread's number, which picks its shard of a
//! sharded class (`shard.rs`), and the tests' hook that pins a thread to a shard.

use std::sync::atomic::Ordering;

/// A small number naming the calling thread, handed out in order of first use: a sharded
/// class's shard for this thread is `thread_number() % shards`, afmalloc's home heap is
/// `thread_number() % heaps`, and the zram device counts in cell `thread_number() % cells`.
/// (Keyed by thread rather than by CPU so that one thread keeps to one shard even when the
/// scheduler moves it: a single writer then packs its objects exactly as the kernel's pool
/// would.)
#[inline]
pub fn thread_number() -> usize {
    use std::sync::atomic::AtomicUsize;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local!(static NUMBER: usize = NEXT.fetch_add(1, Ordering::Relaxed));
    NUMBER.with(|n| *n)
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
