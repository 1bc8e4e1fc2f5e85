//! Lock and atomic types used by the pool, in one place so that the locking protocol can be
//! model-checked: normal builds use `parking_lot`; `--cfg shuttle` builds use `shuttle`'s
//! instrumented primitives, which explore thread interleavings.

#[cfg(not(shuttle))]
mod imp {
    pub use parking_lot::{Mutex, MutexGuard};
    pub use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
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
}

pub use imp::*;
