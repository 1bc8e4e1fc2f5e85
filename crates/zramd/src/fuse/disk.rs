//! The `disk` file's I/O, with a block device's rules at its end: a read from the end on
//! reads 0 bytes (end of file), a read or write across the end does the part before it (a
//! short count), a write from the end on is `ENOSPC`. Each request is counted in the
//! export's stats. `Err` carries an errno.

use std::time::Instant;

use zram::Zram;

use crate::export::{Export, Op};

/// Reads up to `size` bytes at `offset` into `buf` (replacing what it held). The caller
/// keeps `buf` from request to request, so a read allocates nothing once `buf` has grown to
/// the largest request (the swap path relies on it: docs/swap.md).
pub fn read(e: &Export, dev: &Zram, offset: u64, size: u32, buf: &mut Vec<u8>) -> Result<(), i32> {
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
/// always there); other modes are `EOPNOTSUPP`.
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
    let start = Instant::now();
    let r = dev.write_zeroes(offset, length);
    e.stats.record(op, length, start.elapsed(), r.is_ok());
    r.map_err(|err| err.errno())
}
