//! `shard_thread_exits` counts the threads that allocated in a shard other than their
//! class's home shard and have ended: what such a thread spread no thread fills any more,
//! and a background compactor merges it at once (the zram device's automatic compaction
//! watches for such ends: `watch_shard_thread_exits`). Threads that kept to home shards, or
//! that have not ended, are not counted.
//! (One test in its own binary: the count is the process's, and the test harness's other
//! threads would move it.)

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use zsmalloc::{Pool, pin_malloc_shard, shard_thread_exits, watch_shard_thread_exits};

/// Runs `f` on a thread of its own, allocating in shard `shard` (or as `malloc` picks, for
/// `None`), and joins it; returns what `f` returned.
fn on_thread<T: Send>(shard: Option<usize>, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(move || {
            pin_malloc_shard(shard);
            f()
        })
        .join()
        .expect("thread")
    })
}

#[test]
fn threads_that_wrote_outside_home_shards_are_counted_when_they_end() {
    let pool = Pool::new(8).unwrap();
    let start = shard_thread_exits();
    // A watcher is told of each counted end, on the ending thread, before its join returns.
    let told = Arc::new(AtomicUsize::new(0));
    let watch = {
        let told = Arc::clone(&told);
        watch_shard_thread_exits(move || {
            told.fetch_add(1, Ordering::SeqCst);
        })
    };
    let told = move || told.load(Ordering::SeqCst);

    // One thread alone keeps to the home shards: not counted.
    let alone = on_thread(None, || pool.malloc(100).unwrap());
    assert_eq!(shard_thread_exits(), start, "a home-shard thread counted");
    assert_eq!(told(), 0, "a watcher told of a home-shard thread");
    // Pinned to the home shard (0): not counted either.
    let home = on_thread(Some(0), || pool.malloc(200).unwrap());
    assert_eq!(shard_thread_exits(), start, "a home-shard thread counted");

    // A thread that allocates in shard 5 is counted once it ends (its `join` returned),
    // however many objects it stored.
    let (tx, rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel::<()>();
    let pool_ref = &pool;
    let handles = std::thread::scope(|s| {
        let t = s.spawn(move || {
            pin_malloc_shard(Some(5));
            let hs: Vec<_> = (0..50)
                .map(|i| pool_ref.malloc(64 + i * 40).unwrap())
                .collect();
            tx.send(()).unwrap();
            go_rx.recv().unwrap();
            hs
        });
        rx.recv().unwrap();
        // Stored, still running: not yet counted.
        assert_eq!(shard_thread_exits(), start, "counted before it ended");
        go_tx.send(()).unwrap();
        t.join().expect("thread")
    });
    assert_eq!(
        shard_thread_exits(),
        start + 1,
        "an ended shard thread not counted"
    );
    assert_eq!(told(), 1, "the watcher not told of an ended shard thread");

    // Two more, in shards 1 and 15: counted each.
    let more = [1, 15].map(|shard| on_thread(Some(shard), || pool.malloc(300).unwrap()));
    assert_eq!(shard_thread_exits(), start + 3);
    assert_eq!(told(), 3);

    // A dropped watch is told no more.
    drop(watch);
    let after = on_thread(Some(2), || pool.malloc(400).unwrap());
    assert_eq!(shard_thread_exits(), start + 4);
    assert_eq!(told(), 3, "a dropped watch still told");

    // What they stored stays the caller's.
    for h in handles.into_iter().chain(more).chain([alone, home, after]) {
        pool.free(h).unwrap();
    }
    assert_eq!(pool.total_pages(), 0);
}
