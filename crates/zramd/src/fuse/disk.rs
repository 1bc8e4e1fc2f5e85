//! The `disk` file's I/O, with a block device's rules at its end: a read from the end on
//! reads 0 bytes (end of file), a read or write across the end does the part before it (a
//! short count), a write from the end on is `ENOSPC`. Each request is counted in the
//! export's stats. `Err` carries an errno.

use std::time::Instant;

use zram::Zram;

use crate::export::{Export, Op};

thread_local! {
    /// The disk reads' buffer of this thread (a FUSE session thread), kept from request to
    /// request: a read allocates nothing once it has grown to the largest request (the swap
    /// path relies on it: docs/swap.md).
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Reads up to `size` bytes at `offset` into this thread's read buffer and hands the bytes
/// (or the errno) to `f`.
pub fn read_with<R>(
    e: &Export,
    dev: &Zram,
    offset: u64,
    size: u32,
    f: impl FnOnce(Result<&[u8], i32>) -> R,
) -> R {
    READ_BUF.with_borrow_mut(|buf| {
        let r = read(e, dev, offset, size, buf);
        f(r.map(|()| buf.as_slice()))
    })
}

/// Reads up to `size` bytes at `offset` into `buf` (replacing what it held).
fn read(e: &Export, dev: &Zram, offset: u64, size: u32, buf: &mut Vec<u8>) -> Result<(), i32> {
    buf.clear();
    let end = offset.saturating_add(u64::from(size)).min(dev.disksize());
    if offset >= end {
        return Ok(());
    }
    buf.resize((end - offset) as usize, 0);
    let start = Instant::now();
    let r = dev.read(offset, buf);
    e.stats
        .record(Op::Read, buf.len() as u64, start.elapsed(), r.is_ok());
    r.map_err(|err| err.errno())
}

/// Writes what fits of `data` at `offset`; returns the bytes written.
pub fn write(e: &Export, dev: &Zram, offset: u64, data: &[u8]) -> Result<u32, i32> {
    if e.read_only {
        return Err(libc::EROFS);
    }
    let room = dev.disksize().saturating_sub(offset);
    if room == 0 {
        return Err(libc::ENOSPC);
    }
    let data = &data[..data.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
    let start = Instant::now();
    let r = dev.write(offset, data);
    e.stats
        .record(Op::Write, data.len() as u64, start.elapsed(), r.is_ok());
    r.map(|()| u32::try_from(data.len()).unwrap_or(u32::MAX))
        .map_err(|err| err.errno())
}

/// `fallocate`: punch-hole frees the whole pages of the range and zeroes its partial edges,
/// zero-range is write-zeroes, plain allocation inside the disk succeeds (every byte is
/// always there); other modes are `EOPNOTSUPP`. With `FALLOC_FL_KEEP_SIZE` (always there
/// with punch-hole) a range past the end is cut at the end, as a block device's and a
/// regular file's are; without it, one that would grow the disk is `EFBIG`.
pub fn fallocate(e: &Export, dev: &Zram, offset: u64, length: u64, mode: i32) -> Result<(), i32> {
    if e.read_only {
        return Err(libc::EROFS);
    }
    let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
    let op = if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 && keep {
        Op::Trim
    } else if mode & libc::FALLOC_FL_ZERO_RANGE != 0 {
        Op::WriteZeroes
    } else if mode & !libc::FALLOC_FL_KEEP_SIZE == 0 {
        return match offset.checked_add(length) {
            Some(end) if end <= dev.disksize() => Ok(()),
            _ => Err(libc::EFBIG),
        };
    } else {
        return Err(libc::EOPNOTSUPP);
    };
    let size = dev.disksize();
    let length = match offset.checked_add(length) {
        Some(end) if end <= size => length,
        _ if keep => size.saturating_sub(offset),
        _ => return Err(libc::EFBIG),
    };
    if length == 0 {
        return Ok(());
    }
    let start = Instant::now();
    let r = dev.write_zeroes(offset, length);
    e.stats.record(op, length, start.elapsed(), r.is_ok());
    r.map_err(|err| err.errno())
}

/// Asks the kernel for asynchronous direct I/O (`FUSE_ASYNC_DIO`) where it offers it: a
/// loop device with `--direct-io=on` over `disk` then keeps several requests in flight to
/// the session's threads instead of waiting for each in turn (fs_mark on ext4 over it: about
/// 1.6 times the files/s, docs/benchmarks.md). Without it, or without the loop device's
/// direct I/O, every request of the loop device waits for the one before.
///
/// Also asks for `O_TRUNC` to come with the open (`FUSE_ATOMIC_O_TRUNC`) rather than as a
/// truncation to 0 before it: `disk` then ignores it, as a block device does, so `cp image
/// DIR/zram0/disk` and `cat image > DIR/zram0/disk` work as on `/dev/zram0`. (Without it, the
/// truncation is refused with `EPERM`: a disk cannot change size.)
pub fn kernel_config(config: &mut fuser::KernelConfig) {
    if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_ASYNC_DIO) {
        tracing::info!("the kernel's FUSE lacks {missing:?}: direct I/O on `disk` is synchronous");
    }
    if let Err(missing) = config.add_capabilities(fuser::InitFlags::FUSE_ATOMIC_O_TRUNC) {
        tracing::info!("the kernel's FUSE lacks {missing:?}: opening `disk` with O_TRUNC is EPERM");
    }
}
