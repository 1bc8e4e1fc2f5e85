//! ext4 on a loop device over a file (root): attached, made, mounted, then unmounted and
//! checked with e2fsck; whatever happens, the mount and the loop device are undone on drop.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::run::run_ok;

/// How long one of losetup, mkfs.ext4, mount, umount or e2fsck may take.
const LIMIT: Duration = Duration::from_secs(300);

/// A mounted ext4 file system on a loop device.
#[derive(Debug)]
pub struct Ext4 {
    loopdev: String,
    mnt: PathBuf,
    mounted: bool,
}

impl Ext4 {
    /// Attaches `file` to a free loop device, makes an ext4 file system on it and mounts it
    /// on `mnt` (created if missing) with `mount_args` before the device (e.g.
    /// `["-o", "discard"]`).
    pub fn create(file: &Path, mnt: &Path, mount_args: &[&str]) -> Self {
        let loopdev = run_ok(
            Command::new("losetup").args(["-f", "--show"]).arg(file),
            LIMIT,
        )
        .stdout
        .trim()
        .to_owned();
        let mut fs = Self {
            loopdev,
            mnt: mnt.to_owned(),
            mounted: false,
        };
        run_ok(
            Command::new("mkfs.ext4").args(["-q", "-F", &fs.loopdev]),
            LIMIT,
        );
        std::fs::create_dir_all(mnt).expect("mount point");
        run_ok(
            Command::new("mount")
                .args(mount_args)
                .arg(&fs.loopdev)
                .arg(mnt),
            LIMIT,
        );
        fs.mounted = true;
        fs
    }

    /// Unmounts, requires `e2fsck -f -n` to find the file system consistent, and detaches
    /// the loop device.
    pub fn unmount_and_check(mut self) {
        run_ok(Command::new("umount").arg(&self.mnt), LIMIT);
        self.mounted = false;
        run_ok(
            Command::new("e2fsck").args(["-f", "-n", &self.loopdev]),
            LIMIT,
        );
    }
}

impl Drop for Ext4 {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.mnt).status();
        }
        let _ = Command::new("losetup").args(["-d", &self.loopdev]).status();
    }
}
