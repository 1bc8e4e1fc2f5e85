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

/// The one file a `backing_dev` write may name: a scratch file of this process, removed
/// by nothing (it sits in the temporary directory, as fuzzing's own files do).
fn scratch() -> &'static PathBuf {
    static SCRATCH: OnceLock<PathBuf> = OnceLock::new();
    SCRATCH.get_or_init(|| {
        let path = std::env::temp_dir().join(format!("zramd-fuzz-backing-{}", std::process::id()));
        std::fs::File::create(&path).expect("create the scratch backing file");
        path
    })
}

fuzz_target!(|data: &[u8]| {
    zramd::sysfs::exercise_attributes(data, scratch());
});
