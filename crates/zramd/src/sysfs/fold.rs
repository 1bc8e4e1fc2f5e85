//! Folding and deduplication (seed 004, and inline deduplication beyond it).
//!
//! - `fold` (write-only): seed 004's trigger, `echo 1 > fold`. Like the kernel's `compact`
//!   it reads nothing of what was written; it folds the stored objects that are identical
//!   into one and answers when the pass is done; `EINVAL` on an uninitialized device. What
//!   it freed shows in `mm_stat`'s tenth field, `pages_folded`.
//! - `dedup` (ours, `0`/`1`): inline deduplication, a setting like `comp_algorithm`: taken
//!   while the device is uninitialized, `EBUSY` once it is. The value is read as the kernel
//!   reads `writeback_limit_enable` (`kstrtoull`; not 0 is on), and it is checked before the
//!   device's state.
//! - `fold_stat` (ours, read-only): one line of numbers, `folds objects_folded pages_folded
//!   dedup_pages dedup_bytes shared_objects index_bytes` (zeroes while uninitialized).

use zram::FoldStats;

use super::{invalid, kstrtoull};
use crate::device::{Device, DeviceError};

/// Reads `dedup` or `fold_stat`.
pub(super) fn read(dev: &Device, name: &str) -> Result<String, i32> {
    let zram = dev.zram();
    Ok(match name {
        "dedup" => {
            let on = zram.map_or_else(|| dev.settings().dedup, |z| z.dedup());
            format!("{}\n", u8::from(on))
        }
        "fold_stat" => format_fold_stat(&zram.map(|z| z.fold_stats()).unwrap_or_default()),
        _ => return Err(libc::EACCES),
    })
}

/// `fold_stat`: `folds objects_folded pages_folded dedup_pages dedup_bytes shared_objects
/// index_bytes`, each right-aligned in 8 columns as `mm_stat`'s are.
pub fn format_fold_stat(s: &FoldStats) -> String {
    format!(
        "{:8} {:8} {:8} {:8} {:8} {:8} {:8}\n",
        s.folds,
        s.objects_folded,
        s.pages_folded,
        s.dedup_pages,
        s.dedup_bytes,
        s.shared_objects,
        s.index_bytes
    )
}

/// Stores `fold` or `dedup`.
pub(super) fn store(dev: &Device, name: &str, value: &[u8]) -> Result<(), DeviceError> {
    match name {
        // As the kernel's compact_store (and seed 004's fold_store): nothing of what was
        // written is read.
        "fold" => dev
            .initialized_zram()
            .and_then(|z| z.fold().map(drop).map_err(DeviceError::Zram)),
        "dedup" => {
            let on = kstrtoull(value, u64::MAX).map_err(|_| invalid("dedup", value))? != 0;
            dev.update_settings(|s| {
                let mut next = s.clone();
                next.dedup = on;
                next.check_allocator()?;
                *s = next;
                Ok(())
            })
        }
        _ => Err(DeviceError::invalid("attribute", name)),
    }
}
