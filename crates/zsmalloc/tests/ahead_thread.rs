//! The thread a growing pool's page source starts to fault fresh pages in ahead ends with
//! the pool. (One test in its own binary: it counts the process's threads by name.)

use std::time::{Duration, Instant};

use zsmalloc::{Pool, PoolConfig};

/// The scheduling policies (`/proc`'s `sched`) of this process's threads named as the page
/// source names its thread.
fn ahead_policies() -> Vec<Option<u32>> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|t| {
            let task = t.ok()?.path();
            let name = std::fs::read_to_string(task.join("comm")).ok()?;
            (name.trim_end() == "zsmalloc-ahead").then(|| {
                let sched = std::fs::read_to_string(task.join("sched")).ok()?;
                let line = sched.lines().find(|l| l.starts_with("policy"))?;
                line.rsplit(':').next()?.trim().parse().ok()
            })
        })
        .collect()
}

fn ahead_threads() -> usize {
    ahead_policies().len()
}

/// Waits (20 s at most) until `ahead_threads()` is `n`; returns what it last was.
fn wait_for(n: usize) -> usize {
    let start = Instant::now();
    loop {
        let now = ahead_threads();
        if now == n || start.elapsed() > Duration::from_secs(20) {
            return now;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_thread_that_faults_pages_in_ahead_ends_with_its_pool() {
    assert_eq!(ahead_threads(), 0);
    let pool = Pool::with_config(PoolConfig::default()).unwrap();
    // Growth: the page source asks its thread (started then) for fresh pages.
    let handles: Vec<_> = (0..2000).map(|_| pool.malloc(1000).unwrap()).collect();
    assert_eq!(wait_for(1), 1, "no thread faulting pages in ahead");
    // It runs only where a CPU is free (`SCHED_IDLE`, 5), where the kernel shows it. It
    // sets that itself once started (and named): a look just before read 0 (CI, once).
    let start = Instant::now();
    let idle = Some(libc::SCHED_IDLE as u32);
    let mut policies = ahead_policies();
    while policies.first().is_some_and(|p| p.is_some() && *p != idle)
        && start.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(1));
        policies = ahead_policies();
    }
    match policies[0] {
        Some(policy) => assert_eq!(policy, libc::SCHED_IDLE as u32, "{policies:?}"),
        None => println!("SKIPPED the thread's policy: /proc shows no sched policy"),
    }
    assert!(
        pool.cached_pages() <= 256,
        "{} pages cached",
        pool.cached_pages()
    );
    for h in handles {
        pool.free(h).unwrap();
    }
    drop(pool);
    assert_eq!(wait_for(0), 0, "the thread outlived its pool");
    // With the setting off, no thread at all.
    let pool = Pool::with_config(PoolConfig {
        fault_ahead: false,
        ..PoolConfig::default()
    })
    .unwrap();
    let handles: Vec<_> = (0..2000).map(|_| pool.malloc(1000).unwrap()).collect();
    assert_eq!(ahead_threads(), 0);
    assert_eq!(pool.cached_pages(), 0);
    drop(handles);
}
