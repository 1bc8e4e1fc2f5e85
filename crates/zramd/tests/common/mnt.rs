//! FUSE mount points for tests: a temporary directory with `mnt` in it, detached however
//! the test ends, and the errno of a failed file operation.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::have::have;

pub fn errno_of<T>(r: std::io::Result<T>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

/// How many mounts stand on `dir` (given with its links resolved), from
/// /proc/self/mountinfo (the test's paths have no blanks to escape).
pub fn mounts_on(dir: &Path) -> usize {
    let dir = dir.to_str().expect("UTF-8 path");
    std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(dir))
        .count()
}

/// Detaches whatever is still mounted on the directory when dropped, so that a failing
/// test leaves no mount behind.
pub struct Detach(PathBuf);

impl Drop for Detach {
    fn drop(&mut self) {
        while mounts_on(&self.0) > 0 {
            if !Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status()
                .is_ok_and(|s| s.success())
            {
                break;
            }
        }
    }
}

/// For a test that mounts a tree, if FUSE can be used here (else None: the test has said
/// why it is skipped): a temporary directory and `mnt` in it, with its links resolved (as
/// mountinfo shows it), detached on drop.
pub fn fuse_dirs(test: &str) -> Option<(tempfile::TempDir, PathBuf, Detach)> {
    if !have(test, "fuse") {
        return None;
    }
    let tmp = tempfile::tempdir().unwrap();
    let mnt = tmp.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let mnt = mnt.canonicalize().unwrap();
    Some((tmp, mnt.clone(), Detach(mnt)))
}
