//! The attribute files on arbitrary steps: writes of every writable attribute with any
//! bytes, interleaved with page writes, reads (checked against a model) and discards
//! (`zramd::sysfs::exercise_attributes`, which the test suite's random-step test also
//! drives). No input may panic, lose or change data, or leave an attribute unreadable.
//!
//! Run: `cargo +nightly fuzz run sysfs_write` from `fuzz/`.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// The one file a `backing_dev` write may name: a new file of this process in the
/// temporary directory, made with `O_CREAT | O_EXCL` (so a name already there, a symbolic
/// link planted in its place included, is never opened: the next name is tried). It is left
/// there when libFuzzer exits, as fuzzing's own files are.
fn scratch() -> &'static PathBuf {
    static SCRATCH: OnceLock<PathBuf> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let dir = std::env::temp_dir();
        (0..1000)
            .map(|n| dir.join(format!("zramd-fuzz-backing-{}-{n}", std::process::id())))
            .find(|path| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(path)
                    .is_ok()
            })
            .expect("make a scratch backing file in the temporary directory")
    })
}

fuzz_target!(|data: &[u8]| {
    zramd::sysfs::exercise_attributes(data, scratch());
});
