//! A loop device over an image file, for the tests of block-device backing stores.

use std::path::Path;
use std::process::Command;

/// A loop device (its path), detached when dropped.
pub struct Loop(pub String);

impl Drop for Loop {
    fn drop(&mut self) {
        let status = Command::new("losetup").args(["-d", &self.0]).status();
        if !status.is_ok_and(|s| s.success()) {
            eprintln!("could not detach {}", self.0);
        }
    }
}

/// A loop device over a new image of `len` zero bytes at `image`; `Err` says why there can
/// be none here (the test prints it as SKIPPED).
pub fn attach(image: &Path, len: usize) -> Result<Loop, String> {
    if !rustix::process::geteuid().is_root() {
        return Err("setting up a loop device needs root".into());
    }
    std::fs::write(image, vec![0u8; len]).expect("image");
    let out = Command::new("losetup")
        .args(["--find", "--show"])
        .arg(image)
        .output();
    match out {
        Ok(out) if out.status.success() => {
            Ok(Loop(String::from_utf8_lossy(&out.stdout).trim().to_owned()))
        }
        _ => Err("no loop device to be had".into()),
    }
}
