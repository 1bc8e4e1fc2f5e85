//! `--image FILE` (config key `image`): a file's contents loaded into a device when it is
//! made, so that an export (a `--read-only` one above all) serves them from the start.
//!
//! The device keeps the size it is given (`--size`, or the default); the file must fit in it
//! and what lies past the file's end reads as zeroes. The file must be a regular file: a
//! missing file, a directory or anything else is refused, as is one larger than the device.

use std::io::{ErrorKind, Read as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use anyhow::{Context as _, bail};

use crate::device::Device;

/// Bytes read and written at a time.
const CHUNK: usize = 1 << 20;

/// Copies the file at `path` to the start of `device` (initialized); returns the bytes
/// loaded. All-zero stretches are skipped: a new device reads as zeroes already.
pub fn load(device: &Device, path: &Path) -> anyhow::Result<u64> {
    let what = || format!("device {}: image {}", device.name(), path.display());
    // Opened without blocking, so that a FIFO (refused below) cannot hold the start up
    // waiting for a writer; a regular file reads the same either way.
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .with_context(what)?;
    let meta = file.metadata().with_context(what)?;
    if !meta.is_file() {
        bail!("{}: not a regular file", what());
    }
    let zram = device.initialized_zram().with_context(what)?;
    let size = zram.disksize();
    if meta.len() > size {
        bail!(
            "{}: the file ({} bytes) is larger than the device ({size} bytes); give a larger \
             --size",
            what(),
            meta.len()
        );
    }
    let mut buf = vec![0u8; CHUNK];
    let mut offset = 0u64;
    loop {
        let n = match file.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).with_context(what),
        };
        if offset + n as u64 > size {
            bail!("{}: the file grew past the device's {size} bytes", what());
        }
        if buf[..n].iter().any(|&b| b != 0) {
            zram.write(offset, &buf[..n])
                .with_context(|| format!("{}: write at byte {offset}", what()))?;
        }
        offset += n as u64;
    }
    Ok(offset)
}
