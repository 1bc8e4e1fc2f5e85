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
//!   written_back_bytes errors day_pages`, then the last round in words);
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
pub use parse::{kstrtoull, memparse};

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
/// `policy_stat`, `dedup`, `fold_stat`, `allocator`).
pub const ATTRS: [Attr; 28] = [
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
mod tests {
    use super::*;
    use zram::ZramConfig;

    /// A level is checked against the algorithm it is for when it is written, a dictionary
    /// for an algorithm that takes none (lzo) is refused before its file is opened, and a
    /// new `comp_algorithm` starts from its own defaults.
    #[test]
    fn algorithm_params_fit_their_algorithm() {
        let d = Device::new("zram0", ZramConfig::default());
        let level = |d: &Device| d.settings().params.level;
        for bad in [&b"algo=lz4 level=0\n"[..], b"algo=lz4 level=65538\n"] {
            assert_eq!(write(&d, "algorithm_params", bad), Err(libc::EINVAL));
        }
        write(&d, "algorithm_params", b"algo=lz4 level=8\n").unwrap();
        assert_eq!(level(&d), Some(8));
        write(&d, "comp_algorithm", b"lz4\n").unwrap();
        assert_eq!(level(&d), Some(8), "the same algorithm keeps its level");
        write(&d, "comp_algorithm", b"lz4hc\n").unwrap();
        assert_eq!(level(&d), None, "lz4's acceleration is no lz4hc level");
        assert_eq!(
            write(&d, "algorithm_params", b"level=13\n"),
            Err(libc::EINVAL)
        );
        write(&d, "algorithm_params", b"level=12\n").unwrap();
        write(&d, "comp_algorithm", b"lzo\n").unwrap();
        assert_eq!(
            write(&d, "algorithm_params", b"level=1\n"),
            Err(libc::EINVAL)
        );
        assert_eq!(
            write(&d, "algorithm_params", b"dict=/nonexistent/dict\n"),
            Err(libc::EINVAL),
            "lzo takes no dictionary: refused before the file is looked for (ENOENT)"
        );
        write(&d, "comp_algorithm", b"zstd\n").unwrap();
        write(&d, "algorithm_params", b"level=-5\n").unwrap();
        write(&d, "disksize", b"1M\n").unwrap();
        assert_eq!(d.zram().unwrap().params().level, Some(-5));
    }

    #[test]
    fn attributes_behave_as_the_kernels() {
        let d = Device::new("zram0", ZramConfig::default());
        assert_eq!(read(&d, "initstate").unwrap(), "0\n");
        assert_eq!(read(&d, "disksize").unwrap(), "0\n");
        assert_eq!(
            read(&d, "comp_algorithm").unwrap(),
            "lzo-rle lzo [lz4] lz4hc zstd \n"
        );
        assert_eq!(read(&d, "reset"), Err(libc::EACCES));
        assert_eq!(write(&d, "mm_stat", b"1"), Err(libc::EACCES));
        assert_eq!(
            write(&d, "compact", b"1\n"),
            Err(libc::EINVAL),
            "compact needs an initialized device"
        );
        assert_eq!(write(&d, "comp_algorithm", b"deflate\n"), Err(libc::EINVAL));
        let long = [b'z'; 127];
        assert_eq!(write(&d, "comp_algorithm", &long), Err(libc::EINVAL));
        assert_eq!(write(&d, "comp_algorithm", &[b'z'; 128]), Err(libc::E2BIG));
        assert_eq!(
            write(&d, "comp_algorithm", &[&long[..], b"\n"].concat()),
            Err(libc::E2BIG)
        );
        let algo = format!("algo={} priority=1", "z".repeat(200));
        assert_eq!(
            write(&d, "recomp_algorithm", algo.as_bytes()),
            Err(libc::E2BIG)
        );
        write(&d, "comp_algorithm", b"zstd\n").unwrap();
        write(&d, "algorithm_params", b"algo=zstd level=5\n").unwrap();
        assert_eq!(
            write(&d, "algorithm_params", b"colour=blue\n"),
            Err(libc::EINVAL)
        );
        assert_eq!(write(&d, "disksize", b"0\n"), Err(libc::EINVAL));
        assert_eq!(write(&d, "disksize", b"lots\n"), Err(libc::EINVAL));
        write(&d, "disksize", b"1M\n").unwrap();
        assert_eq!(read(&d, "initstate").unwrap(), "1\n");
        assert_eq!(read(&d, "disksize").unwrap(), "1048576\n");
        assert_eq!(write(&d, "disksize", b"2M\n"), Err(libc::EBUSY));
        assert_eq!(write(&d, "comp_algorithm", b"lz4\n"), Err(libc::EBUSY));
        assert_eq!(d.zram().unwrap().params().level, Some(5));
        write(&d, "mem_limit", b"512K\n").unwrap();
        assert_eq!(write(&d, "mem_limit", b"x\n"), Err(libc::EINVAL));
        assert_eq!(write(&d, "mem_used_max", b"5\n"), Err(libc::EINVAL));
        write(&d, "mem_used_max", b"0\n").unwrap();
        write(&d, "compact", b"1\n").unwrap();
        let mm: Vec<u64> = read(&d, "mm_stat")
            .unwrap()
            .split_whitespace()
            .map(|f| f.parse().unwrap())
            .collect();
        assert_eq!(mm[3], 512 * 1024, "mem_limit shows in mm_stat");
        assert_eq!(
            read(&d, "io_stat").unwrap(),
            "       0        0 0        0\n"
        );
        assert_eq!(write(&d, "reset", b"0\n"), Err(libc::EINVAL));
        assert_eq!(write(&d, "reset", b"yes\n"), Err(libc::EINVAL));
        let opened = d.open().unwrap();
        assert_eq!(write(&d, "reset", b"1\n"), Err(libc::EBUSY));
        drop(opened);
        write(&d, "reset", b"1\n").unwrap();
        assert_eq!(read(&d, "initstate").unwrap(), "0\n");
        assert_eq!(read(&d, "nonsense"), Err(libc::ENOENT));
    }

    #[test]
    fn unit_size_is_set_while_uninitialized() {
        let d = Device::new("zram0", ZramConfig::default());
        assert_eq!(read(&d, "unit_size").unwrap(), "4096\n");
        for bad in ["3K", "2K", "256K", "0", "lots", ""] {
            assert_eq!(
                write(&d, "unit_size", bad.as_bytes()),
                Err(libc::EINVAL),
                "{bad}"
            );
        }
        write(&d, "unit_size", b"32K\n").unwrap();
        assert_eq!(read(&d, "unit_size").unwrap(), "32768\n");
        // A unit larger than the disk: the disksize write is refused.
        assert_eq!(write(&d, "disksize", b"16K\n"), Err(libc::EINVAL));
        assert_eq!(read(&d, "initstate").unwrap(), "0\n");
        write(&d, "disksize", b"1M\n").unwrap();
        assert_eq!(d.zram().unwrap().unit_size(), 32 * 1024);
        assert_eq!(write(&d, "unit_size", b"64K\n"), Err(libc::EBUSY));
        assert_eq!(write(&d, "unit_size", b"5K\n"), Err(libc::EINVAL));
        assert_eq!(read(&d, "unit_size").unwrap(), "32768\n");
        // Data goes through the units.
        let opened = d.open().unwrap();
        opened.write(40_000, &[3u8; 5000]).unwrap();
        let mut back = [0u8; 5002];
        opened.read(39_999, &mut back).unwrap();
        assert_eq!((back[0], back[1], back[5000], back[5001]), (0, 3, 3, 0));
        drop(opened);
        write(&d, "reset", b"1\n").unwrap();
        write(&d, "unit_size", b"4K\n").unwrap();
        assert_eq!(read(&d, "unit_size").unwrap(), "4096\n");
    }

    /// The sizes and the errnos are the kernel's: each case was written to
    /// `/sys/block/zramN/{mem_limit,disksize}` of a hot-added kernel 6.18 device and read
    /// back from its `mm_stat` and `disksize`.
    #[test]
    fn sizes_parse_as_the_kernels_memparse() {
        let d = Device::new("zram0", ZramConfig::default());
        let limit = |d: &Device| d.zram().unwrap().mm_stat().mem_limit;
        for (bad, errno) in [
            (" 1M", libc::EINVAL),
            ("lots", libc::EINVAL),
            ("0", libc::EINVAL),
        ] {
            assert_eq!(write(&d, "disksize", bad.as_bytes()), Err(errno), "{bad:?}");
        }
        assert_eq!(
            write(&d, "disksize", b"16E"),
            Err(libc::EINVAL),
            "wraps to 0"
        );
        // The kernel's memparse stops at the `.` of `1.5G` (1 byte, one page) and ignores
        // what follows a suffix: the command line's `1.5G` and refused `1GB` do not apply here.
        for (text, size) in [
            ("0x100000", 1 << 20),
            ("010000", 4096),
            ("1Mxyz", 1 << 20),
            ("1.5G", 4096),
            ("1GiB", 1 << 30),
            ("1GB", 1 << 30),
        ] {
            write(&d, "disksize", text.as_bytes()).unwrap();
            assert_eq!(
                read(&d, "disksize").unwrap(),
                format!("{size}\n"),
                "{text:?}"
            );
            write(&d, "reset", b"1").unwrap();
        }
        write(&d, "disksize", b"1M").unwrap();
        // mm_stat shows the limit in whole pages, as the kernel's does.
        for (text, shown) in [
            ("0x10M", 16 << 20),
            ("010", 4096),
            ("1Kxyz", 4096),
            ("16E", 0),
            ("plenty", 0),
        ] {
            write(&d, "mem_limit", text.as_bytes()).unwrap();
            assert_eq!(limit(&d), shown, "{text:?}");
        }
        for bad in [" 1M", "-1", "lots", ""] {
            assert_eq!(
                write(&d, "mem_limit", bad.as_bytes()),
                Err(libc::EINVAL),
                "{bad:?}"
            );
        }
        write(&d, "unit_size", b"1M").unwrap_err();
        write(&d, "reset", b"1").unwrap();
        write(&d, "unit_size", b"0x2000 and more").unwrap();
        assert_eq!(read(&d, "unit_size").unwrap(), "8192\n");
    }

    /// `reset` and `mem_used_max` read numbers as the kernel's `kstrtou16`/`kstrtoul`;
    /// `comp_algorithm` drops one newline; `compact` reads nothing. The errnos are the
    /// kernel 6.18's, from the same writes to a hot-added device.
    #[test]
    fn numbers_parse_as_the_kernels_kstrto() {
        let d = Device::new("zram0", ZramConfig::default());
        for (text, want) in [
            ("70000", Err(libc::ERANGE)),
            ("65536", Err(libc::ERANGE)),
            ("99999999999999999999", Err(libc::ERANGE)),
            ("70000x", Err(libc::EINVAL)),
            (" 1", Err(libc::EINVAL)),
            ("1 ", Err(libc::EINVAL)),
            ("1\n\n", Err(libc::EINVAL)),
            ("0x1", Err(libc::EINVAL)),
            ("yes", Err(libc::EINVAL)),
            ("0", Err(libc::EINVAL)),
            ("", Err(libc::EINVAL)),
            ("65535\n", Ok(())),
            ("+1", Ok(())),
            ("1\0garbage", Ok(())),
        ] {
            assert_eq!(write(&d, "reset", text.as_bytes()), want, "reset {text:?}");
        }
        assert_eq!(kstrtoull(b"18446744073709551615\n", u64::MAX), Ok(u64::MAX));
        assert_eq!(
            kstrtoull(b"18446744073709551616", u64::MAX),
            Err(libc::ERANGE)
        );
        assert_eq!(write(&d, "comp_algorithm", b"zstd "), Err(libc::EINVAL));
        assert_eq!(write(&d, "comp_algorithm", b"zstd\n\n"), Err(libc::EINVAL));
        write(&d, "comp_algorithm", b"zstd\n").unwrap();
        write(&d, "disksize", b"1M").unwrap();
        write(&d, "compact", b"anything at all").unwrap();
        for bad in ["5", "0 ", "-0", "x"] {
            assert_eq!(write(&d, "mem_used_max", bad.as_bytes()), Err(libc::EINVAL));
        }
        write(&d, "mem_used_max", b"+0\n").unwrap();
    }

    /// Runs `write(dev, "algorithm_params", value)` on a thread and gives its answer; if it
    /// has none after a minute (it is stuck), `unstick` runs and the test fails.
    fn params_write(
        dev: &std::sync::Arc<Device>,
        value: &str,
        unstick: impl FnOnce(),
    ) -> Result<(), i32> {
        let (tx, rx) = std::sync::mpsc::channel();
        let (d, v) = (std::sync::Arc::clone(dev), value.to_owned());
        std::thread::spawn(move || tx.send(write(&d, "algorithm_params", v.as_bytes())));
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(r) => r,
            Err(_) => {
                unstick();
                panic!("algorithm_params {value:?} is stuck");
            }
        }
    }

    #[test]
    fn dictionaries_are_regular_files_of_bounded_size() {
        use std::os::unix::fs::OpenOptionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let path = |name: &str| dir.path().join(name).display().to_string();
        let fifo = path("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        // Opening the FIFO's writing end lets a reader stuck in its open go on.
        let unstick = || {
            let _ = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo);
        };
        std::fs::write(path("empty"), b"").unwrap();
        std::fs::write(path("big"), vec![7u8; MAX_DICT_BYTES as usize + 1]).unwrap();
        std::fs::write(path("max"), vec![7u8; MAX_DICT_BYTES as usize]).unwrap();
        let words: Vec<u8> = b"zram keeps pages compressed. ".repeat(3000);
        std::fs::write(path("dict"), &words).unwrap();

        let d = std::sync::Arc::new(Device::new("zram0", ZramConfig::default()));
        write(&d, "comp_algorithm", b"zstd").unwrap();
        // Not a regular file: EINVAL, as the kernel's (which blocks on a FIFO first), and
        // at once: nothing waits for a FIFO's writer, nothing reads /dev/zero for ever.
        for (what, dict) in [
            ("a FIFO", fifo.clone()),
            ("/dev/zero", "/dev/zero".into()),
            ("a directory", dir.path().display().to_string()),
            ("a missing file", path("missing")),
            ("an empty file", path("empty")),
            ("a file over the limit", path("big")),
        ] {
            let value = format!("algo=zstd dict={dict}");
            assert_eq!(
                params_write(&d, &value, unstick),
                Err(libc::EINVAL),
                "{what}"
            );
        }
        assert!(d.settings().params.dictionary.is_none(), "nothing was kept");
        params_write(&d, &format!("algo=zstd dict={}", path("max")), unstick).unwrap();
        assert_eq!(
            d.settings().params.dictionary.map(|b| b.len()),
            Some(MAX_DICT_BYTES as usize)
        );
        params_write(
            &d,
            &format!("algo=zstd level=9 dict={}", path("dict")),
            unstick,
        )
        .unwrap();
        write(&d, "disksize", b"1M").unwrap();
        let dict = d.zram().unwrap().params().dictionary.clone();
        assert_eq!(dict.map(|b| b.len()), Some(words.len()));
        // Initialized: EBUSY before the file is touched (a FIFO would block, a missing file
        // would be EINVAL).
        for dict in [fifo.as_str(), "/dev/zero", &path("missing"), &path("dict")] {
            let value = format!("algo=zstd dict={dict}");
            assert_eq!(
                params_write(&d, &value, unstick),
                Err(libc::EBUSY),
                "{dict}"
            );
        }
        // The words are still checked first.
        assert_eq!(params_write(&d, "colour=blue", unstick), Err(libc::EINVAL));
    }
}
