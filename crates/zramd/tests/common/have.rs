//! Whether a test can run here. What is missing is said on stderr as
//! `SKIPPED <test>: <why>` and the test returns: a test that cannot run never passes
//! silently.

/// Does this machine have what `test` needs? `need` is one of:
/// - `"root"`: the test runs as root (losetup, mount);
/// - `"fuse"`: FUSE file systems can be mounted: `/dev/fuse` opens read-write and, unless
///   the test runs as root, `fusermount3` is installed;
/// - anything else: the name of a program that must be on PATH.
///
/// If not, prints why the test is skipped and returns false.
pub fn have(test: &str, need: &str) -> bool {
    let missing = match need {
        "root" => (!is_root()).then(|| "needs root (losetup, mount)".to_owned()),
        "fuse" => fuse_missing(),
        tool => (!on_path(tool)).then(|| {
            format!(
                "`{tool}` is not installed (apt-get install -y libnbd-bin python3-libnbd qemu-utils fio nbdkit fuse3 e2fsprogs)"
            )
        }),
    };
    if let Some(why) = &missing {
        eprintln!("SKIPPED {test}: {why}");
    }
    missing.is_none()
}

fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(2) == Some("0"))
}

/// Why FUSE cannot be mounted here, if it cannot.
fn fuse_missing() -> Option<String> {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/fuse")
    {
        return Some(format!(
            "/dev/fuse cannot be opened here ({e}; needs FUSE and its permissions)"
        ));
    }
    if !is_root() && !on_path("fusermount3") {
        return Some("not root and `fusermount3` is not installed".into());
    }
    None
}
