//! A byte budget: what read and write buffers in flight may hold. Each connection has one
//! (its requests), and the server has one shared by every connection (all requests). A
//! request takes its bytes from both before its buffer exists and gives them back when its
//! reply is sent or dropped; when a budget is spent, the request waits. One request always
//! proceeds when nothing else holds the budget, so a request of any allowed size gets
//! through. Every holder gives its bytes back within the time to run its request plus the
//! I/O timeout (a reply the client does not take closes the connection), so waiting ends.

use parking_lot::{Condvar, Mutex};

/// Bytes in use, and requests waiting for some.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Use {
    pub bytes: u64,
    pub waiting: usize,
}

#[derive(Debug)]
pub(crate) struct Budget {
    cap: u64,
    used: Mutex<Use>,
    freed: Condvar,
}

impl Budget {
    pub fn new(cap: u64) -> Self {
        Self {
            cap,
            used: Mutex::new(Use::default()),
            freed: Condvar::new(),
        }
    }

    /// Takes `n` bytes, waiting while they do not fit (unless nothing is taken).
    pub fn take(&self, n: u64) {
        let mut used = self.used.lock();
        if used.bytes > 0 && used.bytes.saturating_add(n) > self.cap {
            used.waiting += 1;
            while used.bytes > 0 && used.bytes.saturating_add(n) > self.cap {
                self.freed.wait(&mut used);
            }
            used.waiting -= 1;
        }
        used.bytes += n;
    }

    /// Gives `n` bytes back.
    pub fn give(&self, n: u64) {
        let mut used = self.used.lock();
        used.bytes = used.bytes.saturating_sub(n);
        if used.waiting > 0 {
            self.freed.notify_all();
        }
    }

    pub fn used(&self) -> Use {
        *self.used.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn waits_until_bytes_come_back() {
        let b = Arc::new(Budget::new(100));
        b.take(60);
        // Larger than the budget, but alone: proceeds once the 60 come back.
        let waiter = {
            let b = Arc::clone(&b);
            std::thread::spawn(move || b.take(150))
        };
        while b.used().waiting == 0 {
            std::thread::yield_now();
        }
        assert_eq!(
            b.used(),
            Use {
                bytes: 60,
                waiting: 1
            }
        );
        b.give(60);
        waiter.join().unwrap();
        assert_eq!(
            b.used(),
            Use {
                bytes: 150,
                waiting: 0
            }
        );
        b.give(150);
        assert_eq!(b.used(), Use::default());
    }
}
