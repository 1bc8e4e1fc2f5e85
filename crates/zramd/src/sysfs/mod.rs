//! The kernel zram's attribute files (`/sys/block/zramN/*`) over a [`Device`]: the same
//! names, modes, formats and errors, so that zram users' scripts keep working against the
//! FUSE control tree. Beyond the kernel's: `unit_size`, the bytes compressed as one stream,
//! set like `comp_algorithm` while the device is uninitialized; `block_state`, the kernel's
//! debugfs file, in the device's directory; `policy` and `policy_stat`, the automatic
//! post-processing policy; `fold` (seed 004's trigger), `dedup` and `fold_stat`.
//!
//! Each attribute reads what is written as the kernel's `store` function does: the bytes as
//! a C string; sizes by `memparse`, numbers by `kstrtou16`/`kstrtoul` (`parse`), names
//! with one trailing newline dropped. `algorithm_params` checks its words and the device's
//! state before it touches a dictionary file, and reads that file within bounds (`dict`).
//!
//! - `params`: `recomp_algorithm` and `algorithm_params`, settings of the primary and the
//!   secondary algorithms (`EBUSY` once initialized);
//! - `post`: idle tracking, writeback (`backing_dev`, `writeback`, `writeback_limit`,
//!   `writeback_limit_enable`, `writeback_batch_size`, `bd_stat`), `recompress`,
//!   `block_state`, `policy` (words over the policy; `run` runs a round now) and
//!   `policy_stat` (`rounds recompressed recompress_saved_bytes written_back_pages
//!   written_back_bytes errors day_pages`, then the last round in words), and ours,
//!   `backing_compact` (moves written-back objects out of the backing file's sparse
//!   segments, so that their space comes back);
//! - `fold`: seed 004's `fold` trigger, our `dedup` setting (inline deduplication, `EBUSY`
//!   once initialized) and `fold_stat` (`folds objects_folded pages_folded dedup_pages
//!   dedup_bytes shared_objects index_bytes`).

mod dict;
mod exercise;
mod fold;
mod params;
mod parse;
mod post;

pub use dict::{MAX_DICT_BYTES, read_dictionary};
pub use exercise::{Step, exercise_attributes};
pub use fold::format_fold_stat;
pub use parse::{kstrtoull, kstrtoull_any_base, memparse};

use zram::Algorithm;
use zram::stats::{IoStat, MmStat, format_debug_stat};

use crate::device::{Device, DeviceError};

/// One attribute file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attr {
    /// File name.
    pub name: &'static str,
    /// Permission bits, as the kernel's.
    pub mode: u16,
}

impl Attr {
    /// Can it be read?
    pub fn readable(&self) -> bool {
        self.mode & 0o444 != 0
    }
    /// Can it be written?
    pub fn writable(&self) -> bool {
        self.mode & 0o222 != 0
    }
}

impl Attr {
    const fn new(name: &'static str, mode: u16) -> Self {
        Self { name, mode }
    }
}

/// The attributes, in the order a directory listing shows them: the kernel's (with seed
/// 004's `fold`), then ours (`unit_size`, `block_state` from the kernel's debugfs, `policy`,
/// `policy_stat`, `dedup`, `fold_stat`, `allocator`, `backing_compact`).
pub const ATTRS: [Attr; 29] = [
    Attr::new("disksize", 0o644),
    Attr::new("initstate", 0o444),
    Attr::new("reset", 0o200),
    Attr::new("comp_algorithm", 0o644),
    Attr::new("algorithm_params", 0o200),
    Attr::new("mem_limit", 0o200),
    Attr::new("mem_used_max", 0o200),
    Attr::new("compact", 0o200),
    Attr::new("mm_stat", 0o444),
    Attr::new("io_stat", 0o444),
    Attr::new("debug_stat", 0o444),
    Attr::new("unit_size", 0o644),
    Attr::new("backing_dev", 0o644),
    Attr::new("idle", 0o200),
    Attr::new("writeback", 0o200),
    Attr::new("writeback_limit_enable", 0o644),
    Attr::new("writeback_limit", 0o644),
    Attr::new("writeback_batch_size", 0o644),
    Attr::new("bd_stat", 0o444),
    Attr::new("recomp_algorithm", 0o644),
    Attr::new("recompress", 0o200),
    Attr::new("fold", 0o200),
    Attr::new("block_state", 0o444),
    Attr::new("policy", 0o644),
    Attr::new("policy_stat", 0o444),
    Attr::new("dedup", 0o644),
    Attr::new("fold_stat", 0o444),
    Attr::new("allocator", 0o644),
    Attr::new("backing_compact", 0o200),
];

/// The attribute with this name.
pub fn attr(name: &str) -> Option<Attr> {
    ATTRS.into_iter().find(|a| a.name == name)
}

/// Reads an attribute. `Err` carries an errno.
pub fn read(dev: &Device, name: &str) -> Result<String, i32> {
    let a = attr(name).ok_or(libc::ENOENT)?;
    if !a.readable() {
        return Err(libc::EACCES);
    }
    let zram = dev.zram();
    Ok(match name {
        "disksize" => format!("{}\n", zram.as_ref().map_or(0, |z| z.disksize())),
        "initstate" => format!("{}\n", u8::from(zram.is_some())),
        "comp_algorithm" => algorithm_list(dev.settings().algorithm),
        "mm_stat" => zram.map_or_else(|| MmStat::default().format(), |z| z.mm_stat().format()),
        "io_stat" => zram.map_or_else(|| IoStat::default().format(), |z| z.io_stat().format()),
        "debug_stat" => format_debug_stat(),
        "unit_size" => format!("{}\n", dev.settings().unit_size.bytes()),
        "allocator" => allocator_list(dev.settings().pool.allocator),
        "recomp_algorithm" => params::recomp_algorithm_list(dev),
        "dedup" | "fold_stat" => return fold::read(dev, name),
        _ => return post::read(dev, name),
    })
}

/// The algorithms as `comp_algorithm` lists them, the chosen one in brackets (the kernel's
/// `zcomp_available_show`).
fn algorithm_list(current: Algorithm) -> String {
    let mut s = String::new();
    for alg in Algorithm::ALL {
        if alg == current {
            s.push_str(&format!("[{alg}] "));
        } else {
            s.push_str(&format!("{alg} "));
        }
    }
    s.push('\n');
    s
}

/// The allocators as `allocator` lists them, the chosen one in brackets (as
/// `comp_algorithm`).
fn allocator_list(current: zram::Allocator) -> String {
    let names: Vec<String> = zram::Allocator::ALL
        .iter()
        .map(|&a| match a == current {
            true => format!("[{a}]"),
            false => a.to_string(),
        })
        .collect();
    format!("{}\n", names.join(" "))
}

/// Writes an attribute. `Err` carries an errno. The value is what the kernel's `store`
/// function would see: the bytes written, as a C string (up to the first NUL).
pub fn write(dev: &Device, name: &str, value: &[u8]) -> Result<(), i32> {
    let a = attr(name).ok_or(libc::ENOENT)?;
    if !a.writable() {
        return Err(libc::EACCES);
    }
    let value = value.split(|&b| b == 0).next().unwrap_or_default();
    store(dev, name, value).map_err(|e| e.errno())
}

/// A value that does not parse for `attr`, shown as text.
fn invalid(attr: &'static str, value: &[u8]) -> DeviceError {
    DeviceError::invalid(attr, String::from_utf8_lossy(value))
}

/// The algorithm of exactly this name (the kernel compares names byte for byte).
/// An algorithm name as `comp_algorithm` and `recomp_algorithm algo=` store it: 128 bytes
/// or more (the kernel's `CRYPTO_MAX_ALG_NAME`, counted before its one newline is dropped)
/// is `E2BIG`, then an unknown name `EINVAL`.
fn stored_algorithm(attr: &'static str, raw: &[u8]) -> Result<Algorithm, DeviceError> {
    if raw.len() >= 128 {
        return Err(DeviceError::TooLong {
            attr,
            len: raw.len(),
        });
    }
    algorithm(raw.strip_suffix(b"\n").unwrap_or(raw))
}

fn algorithm(name: &[u8]) -> Result<Algorithm, DeviceError> {
    Algorithm::ALL
        .into_iter()
        .find(|a| a.name().as_bytes() == name)
        .ok_or_else(|| zram::Error::UnknownAlgorithm(String::from_utf8_lossy(name).into()).into())
}

/// A size as `mem_limit` reads it: `memparse`, and no number at all is `EINVAL`.
fn size_value(attr: &'static str, value: &[u8]) -> Result<u64, DeviceError> {
    match memparse(value) {
        (_, 0) => Err(invalid(attr, value)),
        (bytes, _) => Ok(bytes),
    }
}

/// Each attribute parses its value as the kernel's `store` function does.
fn store(dev: &Device, name: &str, value: &[u8]) -> Result<(), DeviceError> {
    match name {
        "disksize" => {
            // The kernel: `memparse(buf, NULL)`, and 0 (no number, or 0) is EINVAL.
            let size = match memparse(value).0 {
                0 => return Err(invalid("disksize", value)),
                n => zram::size::page_align(n).ok_or_else(|| invalid("disksize", value))?,
            };
            dev.init(size)
        }
        "reset" => match kstrtoull(value, u64::from(u16::MAX)) {
            Ok(0) => Err(invalid("reset", value)),
            Ok(_) => dev.reset(),
            Err(libc::ERANGE) => Err(DeviceError::Range {
                attr: "reset",
                value: String::from_utf8_lossy(value).into_owned(),
            }),
            Err(_) => Err(invalid("reset", value)),
        },
        "comp_algorithm" => {
            // The kernel drops one trailing newline and looks the rest up.
            // Another algorithm starts from its own defaults: a level or dictionary given
            // for the old one would mean something else, or nothing, to it.
            let alg = stored_algorithm("comp_algorithm", value)?;
            dev.update_settings(|s| {
                if s.algorithm != alg {
                    s.params = Default::default();
                }
                s.algorithm = alg;
                Ok(())
            })
        }
        "algorithm_params" => params::store_algorithm_params(dev, value),
        "recomp_algorithm" => params::store_recomp_algorithm(dev, value),
        "mem_limit" => {
            dev.set_mem_limit(size_value("mem_limit", value)?);
            Ok(())
        }
        "unit_size" => {
            let bytes = size_value("unit_size", value)?;
            zram::config::check_unit_size(bytes)?;
            dev.update_settings(|s| {
                s.unit_size = zram::Size(bytes);
                Ok(())
            })
        }
        // Before `disksize`, like `comp_algorithm`; `dedup` needs zsmalloc.
        "allocator" => {
            let text = String::from_utf8_lossy(value.strip_suffix(b"\n").unwrap_or(value));
            let a = text
                .parse::<zram::Allocator>()
                .map_err(|_| invalid("allocator", value))?;
            dev.update_settings(|s| {
                let mut next = s.clone();
                next.pool.allocator = a;
                next.check_allocator()?;
                *s = next;
                Ok(())
            })
        }
        "mem_used_max" => match kstrtoull(value, u64::MAX) {
            Ok(0) => {
                if let Some(z) = dev.zram() {
                    z.reset_mem_used_max();
                }
                Ok(())
            }
            _ => Err(invalid("mem_used_max", value)),
        },
        // The kernel's compact_store reads nothing of what was written.
        "compact" => dev.initialized_zram().map(|z| {
            z.compact();
        }),
        "fold" | "dedup" => fold::store(dev, name, value),
        _ => post::store(dev, name, value),
    }
}

#[cfg(test)]
mod tests;
