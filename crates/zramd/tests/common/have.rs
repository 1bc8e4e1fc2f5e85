//! Whether a test can run here. What is missing is said on stderr as
//! `SKIPPED <test>: <why>` and the test returns: a missing tool never passes silently.

/// Is `tool` on PATH? If not, says why `test` is skipped.
pub fn have(test: &str, tool: &str) -> bool {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false);
    if !found {
        eprintln!(
            "SKIPPED {test}: `{tool}` is not installed (apt-get install -y libnbd-bin python3-libnbd qemu-utils fio nbdkit fuse3)"
        );
    }
    found
}
