//! The locking modes (`PoolConfig::locking`) take the locks they say: with `pool`, a thread
//! holding one class's object (`with_object` runs under the lock) keeps another thread's
//! `malloc` in another class waiting; with `class` and `sharded`, it does not.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use zsmalloc::{Locking, Pool, PoolConfig};

/// Generous: only a guard against a hang, never a measure.
const HANG_GUARD: Duration = Duration::from_secs(60);

fn pool(locking: Locking) -> Arc<Pool> {
    Arc::new(
        Pool::with_config(PoolConfig {
            locking,
            populate: false,
            ..PoolConfig::default()
        })
        .unwrap(),
    )
}

/// Under the lock of a 100-byte object's class, another thread mallocs 3000 bytes: returns
/// whether that malloc finished while the lock was held (waiting up to `wait` for it).
fn other_class_malloc_under_lock(locking: Locking, wait: Duration) -> bool {
    let pool = pool(locking);
    let h = pool.malloc(100).unwrap();
    pool.write(h, b"held").unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (finished, other) = pool
        .with_object(h, 4, |bytes| {
            assert_eq!(bytes, b"held");
            let other = {
                let (pool, done) = (Arc::clone(&pool), Arc::clone(&done));
                std::thread::spawn(move || {
                    let h = pool.malloc(3000).unwrap();
                    done.store(true, Ordering::SeqCst);
                    let _ = tx.send(());
                    h
                })
            };
            (rx.recv_timeout(wait).is_ok(), other)
        })
        .unwrap();
    let other = other.join().unwrap();
    assert!(done.load(Ordering::SeqCst));
    pool.free(other).unwrap();
    pool.free(h).unwrap();
    pool.check_invariants().unwrap();
    assert_eq!(pool.total_pages(), 0);
    finished
}

#[test]
fn pool_locking_is_one_lock_for_every_class() {
    // The malloc cannot finish before the lock is let go, however long we wait.
    assert!(!other_class_malloc_under_lock(
        Locking::Pool,
        Duration::from_millis(300)
    ));
}

#[test]
fn class_and_sharded_locking_lock_one_class() {
    for locking in [Locking::Class, Locking::Sharded] {
        assert!(
            other_class_malloc_under_lock(locking, HANG_GUARD),
            "{locking}: a malloc in another class waited for the held class's lock"
        );
    }
}

#[test]
fn locking_names_round_trip() {
    for locking in Locking::ALL {
        assert_eq!(locking.name().parse::<Locking>().unwrap(), locking);
    }
    assert!("global".parse::<Locking>().is_err());
    assert_eq!(Locking::default(), Locking::Sharded);
}
