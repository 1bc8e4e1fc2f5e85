//! The post-processing attributes: the kernel's idle tracking, writeback and recompression
//! files, our `block_state` (the kernel's debugfs file, here in the device's directory) and
//! our `policy` and `policy_stat`.
//!
//! Each answers as the kernel's does: `idle`, `writeback` and `recompress` are `EINVAL` on
//! an uninitialized device and on malformed text; `writeback` checks, as the kernel's, the
//! device, then that a backing device is set (`ENODEV`), then its words; the rest of the
//! errnos are the library's (`EAGAIN` while another writeback or recompression runs, `EIO`
//! with `writeback_limit` spent, the file's own errno). `backing_dev` is a setting: a path
//! (absolute: the daemon cannot know the writer's directory) taken while uninitialized
//! (`EBUSY` after), opened when `disksize` is written, which fails with the open's errno;
//! `none` forgets it (beyond the kernel, which forgets it only at `reset`).
//!
//! `backing_compact` (ours, write-only) moves written-back objects out of the backing file's
//! sparse segments (`zram::clean`): `EINVAL` uninitialized, `ENODEV` without a backing file,
//! `EAGAIN` while writeback or recompression runs; what was written does not matter, as for
//! `compact`.
//!
//! `policy` reads as its `key=value` words (`zram::Policy`) and takes words over the
//! current policy; the word `run` runs one round now (`EINVAL` while uninitialized).
//! `policy_stat` is one line of numbers, `rounds recompressed recompress_saved_bytes
//! written_back_pages written_back_bytes errors day_pages`, then the last round in words.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use zram::stats::BdStat;
use zram::{IdleRequest, PolicyStats, RecompressRequest, WritebackRequest};

use super::{invalid, kstrtoull};
use crate::device::{Device, DeviceError};

/// Reads one of the post-processing attributes.
pub(super) fn read(dev: &Device, name: &str) -> Result<String, i32> {
    let zram = dev.zram();
    Ok(match name {
        "backing_dev" => match dev.settings().backing_dev {
            Some(path) => format!("{}\n", path.display()),
            None => "none\n".into(),
        },
        "writeback_limit_enable" => {
            let on = zram.as_ref().is_some_and(|z| z.writeback_limit_enabled());
            format!("{}\n", u8::from(on))
        }
        "writeback_limit" => format!("{}\n", zram.as_ref().map_or(0, |z| z.writeback_limit())),
        "writeback_batch_size" => format!(
            "{}\n",
            zram.as_ref().map_or_else(
                || dev.settings().writeback_batch_size as usize,
                |z| z.writeback_batch_size()
            )
        ),
        "bd_stat" => zram.map_or_else(|| BdStat::default().format(), |z| z.bd_stat().format()),
        "block_state" => zram.map_or_else(String::new, |z| z.format_block_state()),
        "policy" => format!("{}\n", dev.policy()),
        "policy_stat" => format_policy_stat(&zram.map(|z| z.policy_stats()).unwrap_or_default()),
        _ => return Err(libc::EACCES),
    })
}

/// `policy_stat`: the figures on one line, the last round's words on the next.
pub fn format_policy_stat(s: &PolicyStats) -> String {
    let last = if s.last_round.is_empty() {
        "no round yet"
    } else {
        &s.last_round
    };
    format!(
        "{:8} {:8} {:8} {:8} {:8} {:8} {:8}\n{last}\n",
        s.rounds,
        s.recompressed,
        s.recompress_saved_bytes,
        s.written_back_pages,
        s.written_back_bytes,
        s.errors,
        s.day_pages
    )
}

/// The value as text (`EINVAL` when it is not UTF-8).
fn text<'a>(attr: &'static str, value: &'a [u8]) -> Result<&'a str, DeviceError> {
    std::str::from_utf8(value).map_err(|_| invalid(attr, value))
}

/// A number as the kernel's `kstrtoull`/`kstrtouint` reads it; anything wrong is `EINVAL`.
fn number(attr: &'static str, value: &[u8], max: u64) -> Result<u64, DeviceError> {
    kstrtoull(value, max).map_err(|_| invalid(attr, value))
}

/// Stores one of the post-processing attributes.
pub(super) fn store(dev: &Device, name: &str, value: &[u8]) -> Result<(), DeviceError> {
    match name {
        "backing_dev" => store_backing_dev(dev, value),
        "idle" => {
            // The kernel's: `all` (with one newline at most), else an age as
            // `kstrtoull(buf, 0, ...)` reads it (`0x10` is 16 s, `010` 8 s); anything else,
            // blanks around it included, is EINVAL.
            let req = match value {
                b"all" | b"all\n" => IdleRequest::All,
                _ => match super::kstrtoull_any_base(value) {
                    Ok(age) => IdleRequest::Age(u32::try_from(age).unwrap_or(u32::MAX)),
                    Err(_) => return Err(super::invalid("idle", value)),
                },
            };
            dev.initialized_zram()?.mark_idle(req);
            Ok(())
        }
        "writeback" => {
            let zram = dev.initialized_zram()?;
            if zram.backing_dev().is_none() {
                return Err(zram::Error::NoBackingDev.into());
            }
            let req: WritebackRequest = text("writeback", value)?.parse()?;
            zram.writeback(&req)?;
            Ok(())
        }
        // Ours, read as `compact` is: what was written does not matter.
        "backing_compact" => {
            dev.initialized_zram()?.clean_backing()?;
            Ok(())
        }
        "recompress" => {
            let req: RecompressRequest = text("recompress", value)?.parse()?;
            dev.initialized_zram()?.recompress(&req)?;
            Ok(())
        }
        "writeback_limit_enable" => {
            let on = number("writeback_limit_enable", value, u64::MAX)? != 0;
            dev.initialized_zram()?.set_writeback_limit_enable(on);
            Ok(())
        }
        "writeback_limit" => {
            let pages = number("writeback_limit", value, u64::MAX)?;
            dev.initialized_zram()?.set_writeback_limit(pages);
            Ok(())
        }
        "writeback_batch_size" => match number("writeback_batch_size", value, u32::MAX.into())? {
            0 => Err(invalid("writeback_batch_size", value)),
            n => {
                dev.set_writeback_batch_size(n as u32);
                Ok(())
            }
        },
        "policy" => dev.update_policy(text("policy", value)?).map(drop),
        _ => Err(DeviceError::invalid("attribute", name)),
    }
}

/// `backing_dev`: a path (one trailing newline dropped, as the kernel drops it), or `none`.
fn store_backing_dev(dev: &Device, value: &[u8]) -> Result<(), DeviceError> {
    let name = value.strip_suffix(b"\n").unwrap_or(value);
    dev.update_settings(|s| {
        s.backing_dev = match name {
            b"none" => None,
            _ => {
                let path = Path::new(OsStr::from_bytes(name));
                if !path.is_absolute() {
                    return Err(invalid("backing_dev", value));
                }
                Some(path.to_owned())
            }
        };
        Ok(())
    })
}
