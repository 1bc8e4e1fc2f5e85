//! Attribute files' I/O, as sysfs does it: a read shows the attribute's text from the
//! offset on, the text made by the read at offset 0 of that open file and kept until it is
//! closed (as sysfs's seq_file keeps it), so a text longer than one read (`block_state`)
//! comes out whole and self-consistent however it is read; a write stores at most a page (a longer one is short) and ignores the offset,
//! so `echo 1 >> compact` works. A file with no read side opened for reading after a
//! `chmod` (or no write side, for writing) answers `EIO`, as kernfs does.
//!
//! Each write runs on a thread of its own, so that a slow store (a dictionary read from a
//! slow file system, a compaction, a reset freeing gigabytes) holds none of the FUSE
//! session's threads: they go on serving every other request meanwhile. At most
//! [`MAX_WRITES`] run at once; more are refused with `EBUSY` until one ends.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use fuser::{Errno, ReplyWrite};
use parking_lot::Mutex;

use crate::device::Device;
use crate::sysfs::{self, ATTRS};

/// The most bytes one write stores, as sysfs: a page.
pub const WRITE_MAX: usize = 4096;
/// Attribute writes running at once, at most.
pub const MAX_WRITES: usize = 64;

/// The texts open attribute files show, by file handle.
#[derive(Debug, Default)]
pub struct Texts {
    open: Mutex<HashMap<u64, Arc<Vec<u8>>>>,
}

impl Texts {
    /// Up to `size` bytes of attribute `a`'s text from `offset` on, for open file `fh`: a
    /// read at offset 0, or the first read, makes the text; later ones read the same text.
    pub fn read(
        &self,
        device: &Device,
        a: usize,
        fh: u64,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, i32> {
        if !ATTRS[a].readable() {
            return Err(libc::EIO);
        }
        self.read_with(fh, offset, size, || sysfs::read(device, ATTRS[a].name))
    }

    /// Up to `size` bytes from `offset` on of the text `make` makes for open file `fh`: it
    /// is made by a read at offset 0, or the first read, and kept for the later ones (so
    /// `hot_add`, whose reading makes a device, makes one per file opened and read whole).
    pub fn read_with(
        &self,
        fh: u64,
        offset: u64,
        size: u32,
        make: impl FnOnce() -> Result<String, i32>,
    ) -> Result<Vec<u8>, i32> {
        let kept = match offset {
            0 => None,
            _ => self.open.lock().get(&fh).cloned(),
        };
        let text = match kept {
            Some(text) => text,
            None => {
                let text = Arc::new(make()?.into_bytes());
                self.open.lock().insert(fh, Arc::clone(&text));
                text
            }
        };
        let from = usize::try_from(offset)
            .unwrap_or(usize::MAX)
            .min(text.len());
        let to = from.saturating_add(size as usize).min(text.len());
        Ok(text[from..to].to_vec())
    }

    /// File `fh` is closed: its text goes.
    pub fn release(&self, fh: u64) {
        self.open.lock().remove(&fh);
    }
}

/// The attribute writes running now.
#[derive(Debug, Default)]
pub struct Writers {
    running: Arc<AtomicUsize>,
}

impl Writers {
    /// Stores `data` (its first page) into attribute `a` on a thread of its own; `reply`
    /// is answered there.
    pub fn write(&self, device: &Arc<Device>, a: usize, data: &[u8], reply: ReplyWrite) {
        let name = ATTRS[a].name;
        if !ATTRS[a].writable() {
            return reply.error(Errno::from_i32(libc::EIO));
        }
        let device = Arc::clone(device);
        self.spawn(name, data, reply, move |data| {
            sysfs::write(&device, name, data)
        });
    }

    /// Runs `store` over `data` (its first page) on a thread of its own and answers `reply`
    /// there: the bytes stored, or the errno `store` returns.
    pub fn spawn(
        &self,
        name: &'static str,
        data: &[u8],
        reply: ReplyWrite,
        store: impl FnOnce(&[u8]) -> Result<(), i32> + Send + 'static,
    ) {
        if self.running.fetch_add(1, Ordering::AcqRel) >= MAX_WRITES {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return reply.error(Errno::from_i32(libc::EBUSY));
        }
        let data = data[..data.len().min(WRITE_MAX)].to_vec();
        let running = Arc::clone(&self.running);
        let spawned = std::thread::Builder::new()
            .name("zramd-attr".into())
            .spawn(move || {
                match store(&data) {
                    Ok(()) => reply.written(data.len() as u32),
                    Err(code) => reply.error(Errno::from_i32(code)),
                }
                running.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(err) = spawned {
            // The reply went with the closure: fuser answers a dropped reply with EIO.
            tracing::warn!("cannot start a thread for a write to {name}: {err}");
            self.running.fetch_sub(1, Ordering::AcqRel);
        }
    }
}
