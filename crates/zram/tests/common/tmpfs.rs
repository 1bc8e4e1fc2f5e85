//! A small tmpfs mounted for a test (root only), unmounted when its guard drops, even when
//! the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A mounted filesystem; unmounted when dropped.
pub struct Mount(pub PathBuf);

impl Drop for Mount {
    fn drop(&mut self) {
        let status = Command::new("umount").arg(&self.0).status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("could not unmount {}", self.0.display());
        }
    }
}

/// Mounts a tmpfs of `size` (e.g. `"2M"`) on `dir`; `Err` says why it cannot (the
/// caller prints it as the reason the test is skipped).
pub fn mount_tmpfs(dir: &Path, size: &str) -> Result<Mount, &'static str> {
    if !rustix::process::geteuid().is_root() {
        return Err("mounting a small tmpfs needs root");
    }
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(Mount(dir.to_owned()))
    } else {
        Err("could not mount a tmpfs")
    }
}
