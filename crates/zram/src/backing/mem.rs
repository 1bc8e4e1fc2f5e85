//! [`MemBacking`]: a [`Backing`] in memory, for tests of what writes back: failures can be
//! switched on, reads can be held as a slow file's would be, and it checks the contract
//! strictly.
//!
//! # Representation
//!
//! `objects` maps each live object's offset to its bytes. Offsets come from `next`, which
//! only grows (by each object's length), so an offset is never reused and a stale one is
//! caught. Reading with the wrong length is `InvalidInput`; freeing what is not held panics
//! (both are the caller's bugs, which a test double should show).

use std::collections::HashMap;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use parking_lot::{Condvar, Mutex};

use super::{Backing, BackingStats, check_objects, os_error};

/// Longest a read waits while reads are held ([`MemBacking::hold_reads`]): a test that
/// forgets to let them go fails instead of hanging.
pub const MAX_READ_HOLD: std::time::Duration = std::time::Duration::from_secs(60);

/// The objects and the next offset.
#[derive(Debug, Default)]
struct Objects {
    objects: HashMap<u64, Box<[u8]>>,
    next: u64,
    live_bytes: u64,
}

/// A [`Backing`] in memory with failures to inject (see the module's doc).
#[derive(Debug, Default)]
pub struct MemBacking {
    state: Mutex<Objects>,
    /// Refuse appends beyond this many live bytes with `ENOSPC`.
    limit: Option<u64>,
    fail_appends: AtomicBool,
    fail_reads: AtomicBool,
    /// While true, reads wait ([`MemBacking::hold_reads`]).
    held: Mutex<bool>,
    released: Condvar,
    bytes_written: AtomicU64,
    bytes_read: AtomicU64,
    reads: AtomicU64,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
}

impl MemBacking {
    /// An empty store without a limit.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that refuses, with `ENOSPC`, an append that would take its live bytes
    /// past `limit`.
    pub fn with_limit(limit: u64) -> Self {
        Self {
            limit: Some(limit),
            ..Self::default()
        }
    }

    /// While on, every append fails with `EIO` (and stores nothing).
    pub fn fail_appends(&self, on: bool) {
        self.fail_appends.store(on, Relaxed);
    }

    /// While on, every read fails with `EIO`.
    pub fn fail_reads(&self, on: bool) {
        self.fail_reads.store(on, Relaxed);
    }

    /// While on, every read waits until it is switched off (or [`MAX_READ_HOLD`] has passed), as
    /// a read of a slow file would.
    pub fn hold_reads(&self, on: bool) {
        *self.held.lock() = on;
        if !on {
            self.released.notify_all();
        }
    }

    /// The number of objects held.
    pub fn len(&self) -> usize {
        self.state.lock().objects.len()
    }

    /// Does it hold no object?
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Backing for MemBacking {
    fn append(&self, objects: &[&[u8]]) -> io::Result<Vec<u64>> {
        let mut state = self.state.lock();
        let total: u64 = objects.iter().map(|o| o.len() as u64).sum();
        let refused = if let Err(e) = check_objects(objects) {
            Some(e)
        } else if self.fail_appends.load(Relaxed) {
            Some(os_error(libc::EIO))
        } else if self.limit.is_some_and(|l| state.live_bytes + total > l) {
            Some(os_error(libc::ENOSPC))
        } else {
            None
        };
        if let Some(e) = refused {
            self.write_errors.fetch_add(1, Relaxed);
            return Err(e);
        }
        let offsets = objects
            .iter()
            .map(|o| {
                let offset = state.next;
                state.next += o.len() as u64;
                state.objects.insert(offset, Box::from(*o));
                offset
            })
            .collect();
        state.live_bytes += total;
        self.bytes_written.fetch_add(total, Relaxed);
        Ok(offsets)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.reads.fetch_add(1, Relaxed);
        {
            let mut held = self.held.lock();
            self.released
                .wait_while_for(&mut held, |held| *held, MAX_READ_HOLD);
        }
        let result = if self.fail_reads.load(Relaxed) {
            Err(os_error(libc::EIO))
        } else {
            match self.state.lock().objects.get(&offset) {
                Some(bytes) if bytes.len() == out.len() => {
                    out.copy_from_slice(bytes);
                    self.bytes_read.fetch_add(out.len() as u64, Relaxed);
                    Ok(())
                }
                held => Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "read of {} bytes at {offset}, where the store holds {:?} bytes",
                        out.len(),
                        held.map(|b| b.len())
                    ),
                )),
            }
        };
        if result.is_err() {
            self.read_errors.fetch_add(1, Relaxed);
        }
        result
    }

    fn free(&self, offset: u64, len: usize) {
        let mut state = self.state.lock();
        match state.objects.remove(&offset) {
            Some(bytes) if bytes.len() == len => state.live_bytes -= len as u64,
            held => panic!(
                "free of {len} bytes at {offset}, where the store holds {:?} bytes",
                held.map(|b| b.len())
            ),
        }
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn stats(&self) -> BackingStats {
        let live_bytes = self.state.lock().live_bytes;
        BackingStats {
            live_bytes,
            file_bytes: live_bytes,
            bytes_written: self.bytes_written.load(Relaxed),
            bytes_read: self.bytes_read.load(Relaxed),
            reads: self.reads.load(Relaxed),
            cache_hits: 0,
            read_errors: self.read_errors.load(Relaxed),
            write_errors: self.write_errors.load(Relaxed),
            segments_punched: 0,
            pages_punched: 0,
            moved_bytes: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stores_reads_frees_and_fails_on_demand() {
        let m = MemBacking::new();
        let offsets = m.append(&[b"abc", b"de"]).unwrap();
        assert_eq!(offsets, [0, 3]);
        let mut out = [0u8; 2];
        m.read(3, &mut out).unwrap();
        assert_eq!(&out, b"de");
        assert!(m.read(0, &mut out).is_err(), "wrong length");
        m.fail_reads(true);
        assert_eq!(
            m.read(3, &mut out).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        m.fail_reads(false);
        m.fail_appends(true);
        assert_eq!(
            m.append(&[b"x"]).unwrap_err().raw_os_error(),
            Some(libc::EIO)
        );
        m.fail_appends(false);
        m.free(0, 3);
        assert_eq!(m.append(&[b"fgh"]).unwrap(), [5], "offsets are not reused");
        let s = m.stats();
        assert_eq!((s.live_bytes, s.bytes_written, s.bytes_read), (5, 8, 2));
        assert_eq!((s.reads, s.read_errors, s.write_errors), (3, 2, 1));
        assert!(m.append(&[b""]).is_err(), "empty objects are refused");
    }

    #[test]
    fn a_limit_refuses_whole_appends() {
        let m = MemBacking::with_limit(10);
        m.append(&[&[1; 6]]).unwrap();
        let e = m.append(&[&[2; 2], &[3; 3]]).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert_eq!(m.len(), 1);
        m.append(&[&[2; 4]]).unwrap();
        assert_eq!(m.stats().live_bytes, 10);
    }

    #[test]
    #[should_panic(expected = "free of 3 bytes at 1")]
    fn freeing_what_is_not_there_is_a_bug() {
        let m = MemBacking::new();
        m.append(&[b"abc"]).unwrap();
        m.free(1, 3);
    }
}
