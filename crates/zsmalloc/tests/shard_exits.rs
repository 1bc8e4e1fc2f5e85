//! `shard_thread_exits` counts the threads that allocated in a shard other than their
//! class's home shard and have ended: what such a thread spread no thread fills any more,
//! and a background compactor merges it at its next look (the zram device's automatic
//! compaction). Threads that kept to home shards, or that have not ended, are not counted.
//! (One test in its own binary: the count is the process's, and the test harness's other
//! threads would move it.)

use zsmalloc::{Pool, pin_malloc_shard, shard_thread_exits};

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

    // One thread alone keeps to the home shards: not counted.
    let alone = on_thread(None, || pool.malloc(100).unwrap());
    assert_eq!(shard_thread_exits(), start, "a home-shard thread counted");
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

    // Two more, in shards 1 and 15: counted each.
    let more = [1, 15].map(|shard| on_thread(Some(shard), || pool.malloc(300).unwrap()));
    assert_eq!(shard_thread_exits(), start + 3);

    // What they stored stays the caller's.
    for h in handles.into_iter().chain(more).chain([alone, home]) {
        pool.free(h).unwrap();
    }
    assert_eq!(pool.total_pages(), 0);
}
