//! Lock and atomic types used by the pool, in one place so that the locking protocol can be
//! model-checked: normal builds use `parking_lot`; `--cfg shuttle` builds use `shuttle`'s
//! instrumented primitives, which explore thread interleavings.

#[cfg(not(shuttle))]
mod imp {
    pub use parking_lot::{Mutex, MutexGuard};
    pub use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

    /// How long [`spin`] tries before the caller sleeps on the lock.
    const SPIN_FOR: std::time::Duration = std::time::Duration::from_micros(25);
    /// Tries between two looks at the clock.
    const SPIN_TRIES: usize = 32;

    /// Calls `try_take` until it gives something or [`SPIN_FOR`] has passed.
    #[inline]
    pub fn spin<T>(mut try_take: impl FnMut() -> Option<T>) -> Option<T> {
        if let Some(taken) = try_take() {
            return Some(taken);
        }
        let start = std::time::Instant::now();
        loop {
            for _ in 0..SPIN_TRIES {
                std::hint::spin_loop();
                if let Some(taken) = try_take() {
                    return Some(taken);
                }
            }
            if start.elapsed() >= SPIN_FOR {
                return None;
            }
        }
    }
}

#[cfg(shuttle)]
mod imp {
    pub use shuttle::sync::MutexGuard;
    pub use shuttle::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

    /// `shuttle`'s mutex with `parking_lot`'s infallible `lock()`.
    #[derive(Debug, Default)]
    pub struct Mutex<T>(shuttle::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub fn new(value: T) -> Self {
            Self(shuttle::sync::Mutex::new(value))
        }
        pub fn lock(&self) -> MutexGuard<'_, T> {
            self.0.lock().unwrap_or_else(|e| e.into_inner())
        }
        pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
            match self.0.try_lock() {
                Ok(g) => Some(g),
                Err(std::sync::TryLockError::Poisoned(e)) => Some(e.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => None,
            }
        }
    }

    /// No spinning under `shuttle`: its scheduler explores who gets the lock, and time
    /// would make its runs differ.
    pub fn spin<T>(_try_take: impl FnMut() -> Option<T>) -> Option<T> {
        None
    }
}

pub use imp::*;
