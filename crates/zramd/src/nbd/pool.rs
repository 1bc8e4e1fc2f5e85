//! A connection's spare I/O buffers: write payload pieces and read replies up to one piece
//! come from here and go back after use, so a steady stream of requests neither allocates
//! nor zeroes a buffer per request (a fresh buffer must be zeroed before a read can fill it,
//! and malloc may hand large ones back to the OS in between, to be faulted in again).
//!
//! The pool keeps at most `keep` buffers of `size` bytes; more are allocated while needed
//! and freed after use. Nothing is cleared between uses: every user fills the part it sends
//! or stores (a write piece with the bytes read from the socket, a read reply with the
//! device's data) and uses that part alone, so bytes of an earlier request never go out.

use parking_lot::Mutex;

/// Spare buffers of one size.
#[derive(Debug)]
pub(crate) struct BufPool {
    size: usize,
    keep: usize,
    free: Mutex<Vec<Box<[u8]>>>,
}

impl BufPool {
    /// A pool of buffers of `size` bytes that keeps at most `keep` of them spare.
    pub fn new(size: usize, keep: usize) -> Self {
        Self {
            size,
            keep,
            free: Mutex::new(Vec::with_capacity(keep)),
        }
    }

    /// Bytes of every buffer.
    pub fn size(&self) -> usize {
        self.size
    }

    /// A spare buffer, or a new one (zeroed) when none is left.
    pub fn get(&self) -> Box<[u8]> {
        self.free
            .lock()
            .pop()
            .unwrap_or_else(|| vec![0u8; self.size].into_boxed_slice())
    }

    /// Gives a buffer back: kept when there is room, freed otherwise.
    pub fn put(&self, buf: Box<[u8]>) {
        if buf.len() != self.size {
            return;
        }
        let mut free = self.free.lock();
        if free.len() < self.keep {
            free.push(buf);
        }
    }

    /// Buffers kept spare now.
    #[cfg(test)]
    fn spare(&self) -> usize {
        self.free.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_at_most_keep_buffers_of_its_size() {
        let pool = BufPool::new(64, 2);
        let bufs: Vec<_> = (0..4).map(|_| pool.get()).collect();
        assert!(bufs.iter().all(|b| b.len() == 64));
        for b in bufs {
            pool.put(b);
        }
        assert_eq!(pool.spare(), 2);
        pool.put(vec![0; 32].into_boxed_slice());
        let _a = pool.get();
        let _b = pool.get();
        assert_eq!(pool.spare(), 0);
        pool.put(vec![0; 32].into_boxed_slice());
        assert_eq!(pool.spare(), 0, "a buffer of another size is not kept");
    }

    #[test]
    fn reuses_buffers() {
        let pool = BufPool::new(16, 1);
        let mut b = pool.get();
        b[0] = 7;
        let at = b.as_ptr();
        pool.put(b);
        let again = pool.get();
        assert_eq!(again.as_ptr(), at);
        assert_eq!(again[0], 7, "not cleared: users fill what they use");
    }
}
