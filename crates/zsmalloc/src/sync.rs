//! Lock and atomic types used by the pool, in one place so that the locking protocol can be
//! model-checked: normal builds use `parking_lot`; `--cfg shuttle` builds use `shuttle`'s
//! instrumented primitives, which explore thread interleavings.

#[cfg(not(shuttle))]
mod imp {
    pub use parking_lot::{Mutex, RwLock};
    pub use std::sync::atomic::{AtomicU64, AtomicUsize};
}

#[cfg(shuttle)]
mod imp {
    pub use shuttle::sync::atomic::{AtomicU64, AtomicUsize};
    pub use shuttle::sync::{MutexGuard, RwLockReadGuard, RwLockWriteGuard};

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
    }

    /// `shuttle`'s rwlock with `parking_lot`'s infallible `read()`/`write()`.
    #[derive(Debug, Default)]
    pub struct RwLock<T>(shuttle::sync::RwLock<T>);

    impl<T> RwLock<T> {
        pub fn new(value: T) -> Self {
            Self(shuttle::sync::RwLock::new(value))
        }
        pub fn read(&self) -> RwLockReadGuard<'_, T> {
            self.0.read().unwrap_or_else(|e| e.into_inner())
        }
        pub fn write(&self) -> RwLockWriteGuard<'_, T> {
            self.0.write().unwrap_or_else(|e| e.into_inner())
        }
    }
}

pub use imp::*;
