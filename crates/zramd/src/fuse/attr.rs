//! Attribute files' I/O, as sysfs does it: a read shows the attribute's text from the
//! offset on, the text made by the read at offset 0 of that open file and kept until it is
//! closed (as sysfs's seq_file keeps it), so a text longer than one read comes out whole
//! and self-consistent however it is read. `block_state`, a line per stored slot (40 MB
//! for a million), is made a piece at a time as it is read instead, as the kernel's debugfs
//! file is: an open file holds one piece, not the whole text, and a read costs what it
//! returns (a read that jumps ahead makes and drops what it skips). A write stores at most
//! a page (a longer one is short) and ignores the offset, so `echo 1 >> compact` works. A file with no read side opened for reading after a
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

/// Bytes of `block_state` made at a time.
const PIECE: usize = 64 << 10;

/// The texts open attribute files show, by file handle.
#[derive(Debug, Default)]
pub struct Texts {
    open: Mutex<HashMap<u64, Shown>>,
}

/// What an open attribute file shows.
#[derive(Debug)]
enum Shown {
    /// The whole text, made by the first read or a read at offset 0.
    Whole(Arc<Vec<u8>>),
    /// `block_state`, made as it is read.
    Piecewise(Arc<Mutex<Cursor>>),
}

/// Where a reader of `block_state` is: `pending` holds the text's bytes from `at` on that
/// are made and not yet read; `slot` is the slot to go on from.
#[derive(Debug, Default)]
struct Cursor {
    at: u64,
    slot: usize,
    pending: Vec<u8>,
    ended: bool,
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
        if ATTRS[a].name == "block_state" {
            return Ok(self.read_block_state(device, fh, offset, size as usize));
        }
        self.read_with(fh, offset, size, || sysfs::read(device, ATTRS[a].name))
    }

    /// Up to `size` bytes of `block_state` from `offset` on, for open file `fh`, made from
    /// where its last read ended (from the start for a read at 0 or behind it).
    fn read_block_state(&self, device: &Device, fh: u64, offset: u64, size: usize) -> Vec<u8> {
        let Some(zram) = device.zram() else {
            return Vec::new();
        };
        let cursor = {
            let mut open = self.open.lock();
            match open.get(&fh) {
                Some(Shown::Piecewise(c)) => Arc::clone(c),
                _ => {
                    let c = Arc::new(Mutex::new(Cursor::default()));
                    open.insert(fh, Shown::Piecewise(Arc::clone(&c)));
                    c
                }
            }
        };
        let mut c = cursor.lock();
        if offset == 0 || offset < c.at {
            *c = Cursor::default();
        }
        let end = offset.saturating_add(size as u64);
        let mut piece = String::new();
        loop {
            let skip = usize::try_from(offset - c.at)
                .unwrap_or(usize::MAX)
                .min(c.pending.len());
            c.pending.drain(..skip);
            c.at += skip as u64;
            if c.ended || c.at + c.pending.len() as u64 >= end {
                break;
            }
            piece.clear();
            c.slot = zram.format_block_state_from(c.slot, PIECE, &mut piece);
            c.ended = piece.len() < PIECE;
            c.pending.extend_from_slice(piece.as_bytes());
        }
        if c.at < offset {
            return Vec::new();
        }
        let n = size.min(c.pending.len());
        c.at += n as u64;
        c.pending.drain(..n).collect()
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
        let kept = match (offset, self.open.lock().get(&fh)) {
            (1.., Some(Shown::Whole(text))) => Some(Arc::clone(text)),
            _ => None,
        };
        let text = match kept {
            Some(text) => text,
            None => {
                let text = Arc::new(make()?.into_bytes());
                self.open.lock().insert(fh, Shown::Whole(Arc::clone(&text)));
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

    /// Bytes of text the open files hold.
    #[cfg(test)]
    fn held_bytes(&self) -> usize {
        self.open
            .lock()
            .values()
            .map(|shown| match shown {
                Shown::Whole(text) => text.len(),
                Shown::Piecewise(c) => c.lock().pending.capacity(),
            })
            .sum()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `block_state` of 65,536 stored slots (2.6 MB of text) read by 20 open files a byte
    /// each holds a piece per file, not the text; read in any size it is the whole text,
    /// and a first read at an offset or a read behind the last one gives the text's bytes
    /// there.
    #[test]
    fn block_state_is_made_a_piece_at_a_time() {
        let device = Device::new("zram0", zram::ZramConfig::default());
        device.init(256 << 20).unwrap();
        let zram = device.zram().unwrap();
        for page in 0..65_536u64 {
            zram.write(page * 4096, &[(page % 251) as u8; 4096])
                .unwrap();
        }
        let whole = zram.format_block_state().into_bytes();
        assert!(whole.len() > 2_000_000, "{} bytes", whole.len());
        let a = ATTRS.iter().position(|a| a.name == "block_state").unwrap();
        let texts = Texts::default();
        for fh in 0..20 {
            assert_eq!(texts.read(&device, a, fh, 0, 1).unwrap(), &whole[..1]);
        }
        let held = texts.held_bytes();
        assert!(held < 20 * 2 * PIECE, "20 files hold {held} bytes");
        for size in [1000, 4096, 131_072] {
            let mut read = Vec::new();
            loop {
                let got = texts.read(&device, a, 99, read.len() as u64, size).unwrap();
                if got.is_empty() {
                    break;
                }
                read.extend(got);
            }
            assert!(read == whole, "read {size} bytes at a time");
        }
        let at = |offset: usize| texts.read(&device, a, 100, offset as u64, 500).unwrap();
        assert_eq!(
            at(1_000_000),
            &whole[1_000_000..1_000_500],
            "a first read far in"
        );
        assert_eq!(at(10), &whole[10..510], "a read behind the last one");
        assert!(at(whole.len()).is_empty() && at(whole.len() + 7).is_empty());
    }
}
