//! Devices added and removed at run time, as the kernel's `/sys/class/zram-control`:
//! `hot_add` makes an uninitialized device `zramN` (N the lowest free number) with the
//! default settings and says N; `hot_remove` takes N and removes `zramN` (`EBUSY` while
//! open, `ENODEV` when there is none). The FUSE tree's `zram-control` folder and the control
//! socket's `add` and `remove` both come here.

use std::sync::Arc;

use zram::ZramConfig;

use crate::export::{Export, ExportSet, RemoveError};
use crate::sysfs::kstrtoull;

/// Adds an uninitialized device with the default settings (those a `reset` brings back:
/// [`ZramConfig::default`]); returns its number and export.
pub fn add(exports: &ExportSet) -> (u32, Arc<Export>) {
    let (n, export) = exports.add_zram(ZramConfig::default());
    tracing::info!("added device {}", export.name);
    (n, export)
}

/// Removes the device named `name`.
pub fn remove(exports: &ExportSet, name: &str) -> Result<(), RemoveError> {
    exports.remove(name)?;
    tracing::info!("removed device {name}");
    Ok(())
}

/// What a write to `hot_remove` does: reads a device number as the kernel's
/// `kstrtoint(buf, 10, ...)` (an optional sign, decimal digits, one newline at most),
/// refuses a negative one (`EINVAL`), and removes `zramN`. `Err` carries the kernel's errno.
pub fn remove_store(exports: &ExportSet, text: &[u8]) -> Result<(), i32> {
    // What the kernel's store sees: a C string, up to the first NUL (as `sysfs::write`).
    let text = text.split(|&b| b == 0).next().unwrap_or_default();
    let n = device_number(text)?;
    remove(exports, &format!("zram{n}")).map_err(|e| e.errno())
}

/// A device number as `hot_remove` reads it.
pub fn device_number(text: &[u8]) -> Result<u32, i32> {
    const INT_MAX: u64 = i32::MAX as u64;
    match text.strip_prefix(b"-") {
        // `-` then what kstrtoull reads without its own `+`; -0 is 0, less is refused.
        Some(rest) if rest.starts_with(b"+") => Err(libc::EINVAL),
        Some(rest) => match kstrtoull(rest, INT_MAX + 1)? {
            0 => Ok(0),
            _ => Err(libc::EINVAL),
        },
        None => kstrtoull(text, INT_MAX).map(|n| n as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_numbers_read_as_the_kernels_kstrtoint() {
        for (text, want) in [
            ("1", Ok(1)),
            ("1\n", Ok(1)),
            ("+7", Ok(7)),
            ("007", Ok(7)),
            ("-0", Ok(0)),
            ("2147483647", Ok(i32::MAX as u32)),
            ("2147483648", Err(libc::ERANGE)),
            ("99999999999999999999", Err(libc::ERANGE)),
            ("-1", Err(libc::EINVAL)),
            ("-2147483649", Err(libc::ERANGE)),
            ("-+1", Err(libc::EINVAL)),
            ("", Err(libc::EINVAL)),
            ("\n", Err(libc::EINVAL)),
            ("abc", Err(libc::EINVAL)),
            ("0x1", Err(libc::EINVAL)),
            (" 1", Err(libc::EINVAL)),
            ("1\n\n", Err(libc::EINVAL)),
        ] {
            assert_eq!(device_number(text.as_bytes()), want, "{text:?}");
        }
    }

    /// The store sees a C string, as every attribute's: a NUL ends what is read.
    #[test]
    fn remove_reads_up_to_a_nul() {
        let set = ExportSet::new(Vec::new());
        add(&set);
        add(&set);
        remove_store(&set, b"1\0junk").unwrap();
        assert_eq!(remove_store(&set, b"1\0"), Err(libc::ENODEV));
        assert_eq!(remove_store(&set, b"\x001"), Err(libc::EINVAL));
    }

    #[test]
    fn add_takes_the_lowest_free_number_and_remove_frees_it() {
        let set = ExportSet::new(Vec::new());
        assert_eq!(add(&set).0, 0);
        assert_eq!(add(&set).0, 1);
        assert_eq!(add(&set).0, 2);
        remove_store(&set, b"1\n").unwrap();
        assert_eq!(remove_store(&set, b"1"), Err(libc::ENODEV));
        assert_eq!(remove_store(&set, b"999"), Err(libc::ENODEV));
        assert_eq!(remove_store(&set, b"abc"), Err(libc::EINVAL));
        let names: Vec<String> = set.iter().map(|e| e.name.clone()).collect();
        assert_eq!(names, ["zram0", "zram2"]);
        let (n, again) = add(&set);
        assert_eq!((n, again.name.as_str()), (1, "zram1"));
        // Ids are never reused: zram1's new id is past every earlier one.
        let ids: Vec<u64> = set.with_ids().iter().map(|(id, _)| *id).collect();
        assert_eq!(ids, [0, 2, 3]);
        // Open: EBUSY, and the device stays.
        again.device.init(1 << 20).unwrap();
        let opened = again.device.open().unwrap();
        assert_eq!(remove_store(&set, b"1"), Err(libc::EBUSY));
        drop(opened);
        remove_store(&set, b"1").unwrap();
        assert!(
            again.device.open().is_none(),
            "a removed device stays closed"
        );
        assert!(set.get("zram1").is_none());
    }
}
