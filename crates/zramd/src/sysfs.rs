//! The kernel zram's attribute files (`/sys/block/zramN/*`) over a [`Device`]: the same
//! names, modes, formats and errors, so that zram users' scripts keep working against the
//! FUSE control tree. One file is ours, after the kernel's: `unit_size`, the bytes
//! compressed as one stream, set like `comp_algorithm` while the device is uninitialized.

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

/// The attributes, in the order a directory listing shows them.
pub const ATTRS: [Attr; 12] = [
    Attr {
        name: "disksize",
        mode: 0o644,
    },
    Attr {
        name: "initstate",
        mode: 0o444,
    },
    Attr {
        name: "reset",
        mode: 0o200,
    },
    Attr {
        name: "comp_algorithm",
        mode: 0o644,
    },
    Attr {
        name: "algorithm_params",
        mode: 0o200,
    },
    Attr {
        name: "mem_limit",
        mode: 0o200,
    },
    Attr {
        name: "mem_used_max",
        mode: 0o200,
    },
    Attr {
        name: "compact",
        mode: 0o200,
    },
    Attr {
        name: "mm_stat",
        mode: 0o444,
    },
    Attr {
        name: "io_stat",
        mode: 0o444,
    },
    Attr {
        name: "debug_stat",
        mode: 0o444,
    },
    Attr {
        name: "unit_size",
        mode: 0o644,
    },
];

/// The attribute with this name.
pub fn attr(name: &str) -> Option<Attr> {
    ATTRS.into_iter().find(|a| a.name == name)
}

/// The kernel's `memparse` with its "no digits" check.
fn memparse(attr: &'static str, value: &str) -> Result<u64, DeviceError> {
    zram::size::parse_size(value).map_err(|_| DeviceError::invalid(attr, value))
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
        "comp_algorithm" => {
            let current = dev.settings().algorithm;
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
        "mm_stat" => zram.map_or_else(|| MmStat::default().format(), |z| z.mm_stat().format()),
        "io_stat" => zram.map_or_else(|| IoStat::default().format(), |z| z.io_stat().format()),
        "debug_stat" => format_debug_stat(),
        "unit_size" => format!("{}\n", dev.settings().unit_size.bytes()),
        _ => return Err(libc::EACCES),
    })
}

/// Writes an attribute. `Err` carries an errno.
pub fn write(dev: &Device, name: &str, value: &[u8]) -> Result<(), i32> {
    let a = attr(name).ok_or(libc::ENOENT)?;
    if !a.writable() {
        return Err(libc::EACCES);
    }
    let text = std::str::from_utf8(value).map_err(|_| libc::EINVAL)?;
    let value = text.trim_end_matches(['\n', '\0']).trim();
    store(dev, name, value).map_err(|e| e.errno())
}

fn store(dev: &Device, name: &str, value: &str) -> Result<(), DeviceError> {
    match name {
        "disksize" => {
            let size = memparse("disksize", value)?;
            let size = zram::size::page_align(size)
                .ok_or_else(|| DeviceError::invalid("disksize", value))?;
            dev.init(size)
        }
        "reset" => match value.parse::<u16>() {
            Ok(0) | Err(_) => Err(DeviceError::invalid("reset", value)),
            Ok(_) => dev.reset(),
        },
        "comp_algorithm" => {
            let alg: Algorithm = value.parse()?;
            dev.update_settings(|s| {
                s.algorithm = alg;
                Ok(())
            })
        }
        "algorithm_params" => {
            let mut level = None;
            let mut dict = None;
            let bad = |what: &str| DeviceError::invalid("algorithm_params", what);
            for kv in value.split_whitespace() {
                let (k, v) = kv.split_once('=').ok_or_else(|| bad(kv))?;
                match k {
                    "priority" if v == "0" => {}
                    "algo" => {
                        let alg: Algorithm = v.parse()?;
                        if alg != dev.settings().algorithm {
                            return Err(bad(kv));
                        }
                    }
                    "level" => level = Some(v.parse::<i32>().map_err(|_| bad(kv))?),
                    "dict" => {
                        let bytes = std::fs::read(v).map_err(|_| bad(kv))?;
                        dict = Some(std::sync::Arc::new(bytes));
                    }
                    _ => return Err(bad(kv)),
                }
            }
            dev.update_settings(|s| {
                s.params.level = level;
                s.params.dictionary = dict;
                Ok(())
            })
        }
        "mem_limit" => {
            dev.set_mem_limit(memparse("mem_limit", value)?);
            Ok(())
        }
        "unit_size" => {
            let bytes = memparse("unit_size", value)?;
            zram::config::check_unit_size(bytes)?;
            dev.update_settings(|s| {
                s.unit_size = zram::Size(bytes);
                Ok(())
            })
        }
        "mem_used_max" => match value.parse::<u64>() {
            Ok(0) => {
                if let Some(z) = dev.zram() {
                    z.reset_mem_used_max();
                }
                Ok(())
            }
            _ => Err(DeviceError::invalid("mem_used_max", value)),
        },
        "compact" => match dev.zram() {
            Some(z) => {
                z.compact();
                Ok(())
            }
            None => Err(DeviceError::NotInitialized),
        },
        _ => Err(DeviceError::invalid("attribute", name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zram::ZramConfig;

    #[test]
    fn attributes_behave_as_the_kernels() {
        let d = Device::new("zram0", ZramConfig::default());
        assert_eq!(read(&d, "initstate").unwrap(), "0\n");
        assert_eq!(read(&d, "disksize").unwrap(), "0\n");
        assert_eq!(
            read(&d, "comp_algorithm").unwrap(),
            "lzo-rle lzo [lz4] zstd \n"
        );
        assert_eq!(read(&d, "reset"), Err(libc::EACCES));
        assert_eq!(write(&d, "mm_stat", b"1"), Err(libc::EACCES));
        assert_eq!(
            write(&d, "compact", b"1\n"),
            Err(libc::EINVAL),
            "compact needs an initialized device"
        );
        assert_eq!(write(&d, "comp_algorithm", b"deflate\n"), Err(libc::EINVAL));
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
}
