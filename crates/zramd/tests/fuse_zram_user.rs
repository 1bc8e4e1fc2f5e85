//! The FUSE tree behaves like the kernel's zram for a zram user: a script written for
//! `/sys/block` and `/sys/class/zram-control` (`tests/fixtures/zram-user.sh`: hot_add,
//! comp_algorithm, disksize, writing, mm_stat, reset, hot_remove) runs unchanged against
//! the tree and, where this machine has zram and the test runs as root, against the
//! kernel's, and both print the same for what must agree. `hot_remove` gives the kernel's
//! errnos; attribute files are readable by every user as in sysfs, writable by none but
//! the owner. Tests that cannot run here print why and return.

mod common {
    pub mod have;
    pub mod mnt;
    #[expect(
        dead_code,
        reason = "the scripts here may fail: their output is checked"
    )]
    pub mod run;
    pub mod serve_tree;
}

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::have::have;
use common::mnt::{errno_of, fuse_dirs};
use common::run::run;
use common::serve_tree::serve_tree;
use zram::ZramConfig;

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/zram-user.sh");
const KERNEL_CONTROL: &str = "/sys/class/zram-control";
const LIMIT: Duration = Duration::from_secs(120);

/// Runs the script with these variables; its key=value lines, and whether it succeeded.
fn zram_user(vars: &[(&str, String)]) -> (BTreeMap<String, String>, bool, String) {
    let mut cmd = Command::new("sh");
    cmd.arg(SCRIPT);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    let r = run(&mut cmd, LIMIT);
    let lines = r
        .stdout
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    (lines, r.ok, format!("{}{}", r.stdout, r.stderr))
}

/// A kernel zram device added by a test: reset and removed again when dropped, also when
/// the test fails.
struct KernelDevice(Option<String>);

impl Drop for KernelDevice {
    fn drop(&mut self) {
        if let Some(n) = &self.0 {
            let dev = PathBuf::from(format!("/sys/block/zram{n}"));
            if dev.exists() {
                let _ = std::fs::write(dev.join("reset"), "1");
                let _ = std::fs::write(Path::new(KERNEL_CONTROL).join("hot_remove"), n);
            }
        }
    }
}

fn kernel_zram(test: &str) -> bool {
    if !have(test, "root") {
        return false;
    }
    if !Path::new(KERNEL_CONTROL).join("hot_add").exists() {
        eprintln!("SKIPPED {test} (the kernel part): no {KERNEL_CONTROL} here");
        return false;
    }
    true
}

#[test]
fn a_zram_users_script_runs_unchanged_on_the_tree_and_the_kernel() {
    const NAME: &str = "a_zram_users_script_runs_unchanged_on_the_tree_and_the_kernel";
    let Some((tmp, mnt, _detach)) = fuse_dirs(NAME) else {
        return;
    };
    let server = serve_tree(tmp.path(), &mnt, ZramConfig::default());
    let (tree, ok, said) = zram_user(&[
        ("SYS_BLOCK", mnt.display().to_string()),
        (
            "ZRAM_CONTROL",
            mnt.join("zram-control").display().to_string(),
        ),
        ("ZRAM_DISK", format!("{}/zram%d/disk", mnt.display())),
    ]);
    assert!(ok, "the script failed on the tree: {said}");
    let want = [
        ("added", "1"),
        ("initstate_new", "0"),
        ("default_algorithm", "lz4"),
        ("algorithm", "lzo"),
        ("disksize", "67108864"),
        ("initstate", "1"),
        ("orig_data_size", "1048576"),
        ("compressed", "yes"),
        ("initstate_after_reset", "0"),
        ("disksize_after_reset", "0"),
        ("algorithm_after_reset", "default"),
        ("removed", "yes"),
    ];
    for (k, v) in want {
        assert_eq!(tree.get(k).map(String::as_str), Some(v), "{k}: {said}");
    }
    assert!(server.registry.device("zram1").is_none(), "removed");
    server.stop();

    if !kernel_zram(NAME) {
        return;
    }
    let (kernel, ok, said) = zram_user(&[]);
    let _added = KernelDevice(kernel.get("added").cloned());
    assert!(ok, "the script failed on the kernel's zram: {said}");
    for (k, _) in want {
        if k != "added" && k != "default_algorithm" {
            assert_eq!(
                kernel.get(k),
                tree.get(k),
                "{k}: kernel {kernel:?}, tree {tree:?}"
            );
        }
    }
}

#[test]
fn hot_add_and_hot_remove_in_the_tree_answer_as_the_kernels() {
    const NAME: &str = "hot_add_and_hot_remove_in_the_tree_answer_as_the_kernels";
    let Some((tmp, mnt, _detach)) = fuse_dirs(NAME) else {
        return;
    };
    let server = serve_tree(tmp.path(), &mnt, ZramConfig::default());
    let control = mnt.join("zram-control");
    let (hot_add, hot_remove) = (control.join("hot_add"), control.join("hot_remove"));
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    assert_eq!(
        (mode(&control), mode(&hot_add), mode(&hot_remove)),
        (0o755, 0o400, 0o200),
        "the kernel's modes"
    );
    let mut listed: Vec<String> = std::fs::read_dir(&control)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    listed.sort();
    assert_eq!(listed, ["hot_add", "hot_remove"]);

    assert_eq!(std::fs::read_to_string(&hot_add).unwrap(), "1\n");
    assert_eq!(std::fs::read_to_string(&hot_add).unwrap(), "2\n");
    let mut devices: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    devices.sort();
    assert_eq!(devices, ["zram-control", "zram0", "zram1", "zram2"]);
    let zram1 = mnt.join("zram1");
    assert_eq!(
        std::fs::read_to_string(zram1.join("initstate")).unwrap(),
        "0\n"
    );
    std::fs::write(zram1.join("disksize"), "1M").unwrap();
    // hot_add is read-only, hot_remove write-only, even for root.
    assert_eq!(errno_of(std::fs::write(&hot_add, "1")), Some(libc::EACCES));
    assert_eq!(errno_of(std::fs::read(&hot_remove)), Some(libc::EACCES));

    // Held open: EBUSY, and the device stays.
    let disk = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(zram1.join("disk"))
        .unwrap();
    assert_eq!(
        errno_of(std::fs::write(&hot_remove, "1")),
        Some(libc::EBUSY)
    );
    drop(disk);
    assert!(zram1.join("disk").exists());

    // Bad input: the kernel's errnos (kstrtoint, then ENODEV), never a crash.
    let bad = ["abc", "999", "\n", "-1", "99999999999", "1 ", "0x1"];
    let errnos: Vec<Option<i32>> = bad
        .iter()
        .map(|b| errno_of(std::fs::write(&hot_remove, b)))
        .collect();
    let want = [
        libc::EINVAL,
        libc::ENODEV,
        libc::EINVAL,
        libc::EINVAL,
        libc::ERANGE,
        libc::EINVAL,
        libc::EINVAL,
    ];
    assert_eq!(errnos, want.map(Some));
    if kernel_zram(NAME) {
        let kernel_remove = Path::new(KERNEL_CONTROL).join("hot_remove");
        // Numbers no kernel device has (a million), or no number: nothing is removed.
        let kernel: Vec<Option<i32>> = ["abc", "999999", "\n", "-1", "99999999999", "1 ", "0x1"]
            .iter()
            .map(|b| errno_of(std::fs::write(&kernel_remove, b)))
            .collect();
        assert_eq!(kernel, errnos, "the kernel's hot_remove answers the same");
    }

    let folder = std::fs::File::open(&zram1).unwrap();
    std::fs::write(&hot_remove, "1\n").unwrap();
    assert_eq!(
        errno_of(std::fs::metadata(&zram1)),
        Some(libc::ENOENT),
        "gone at once"
    );
    // Its folder, listed through a descriptor opened before: gone too (was ENOTDIR).
    assert_eq!(list_through(&folder), Some(libc::ENOENT));
    drop(folder);
    assert!(server.registry.device("zram1").is_none());
    // Its number is free again; ids (inodes) are not reused.
    assert_eq!(std::fs::read_to_string(&hot_add).unwrap(), "1\n");
    assert_eq!(
        std::fs::read_to_string(zram1.join("initstate")).unwrap(),
        "0\n"
    );
    server.stop();
}

/// The errno of `getdents64` on an open directory, if it fails.
#[expect(
    unsafe_code,
    reason = "lists a directory through a descriptor opened before it was removed"
)]
fn list_through(dir: &std::fs::File) -> Option<i32> {
    let mut buf = [0u8; 4096];
    let fd = std::os::fd::AsRawFd::as_raw_fd(dir);
    // SAFETY: `buf` is writable for its length and `fd` is an open descriptor.
    let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), buf.len()) };
    (n < 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap_or(0))
}

#[test]
fn reset_in_the_tree_brings_back_the_default_algorithm() {
    const NAME: &str = "reset_in_the_tree_brings_back_the_default_algorithm";
    let Some((tmp, mnt, _detach)) = fuse_dirs(NAME) else {
        return;
    };
    let config = ZramConfig {
        algorithm: zram::Algorithm::Zstd,
        ..ZramConfig::default()
    };
    let server = serve_tree(tmp.path(), &mnt, config);
    let dev = mnt.join("zram0");
    let read = |name: &str| std::fs::read_to_string(dev.join(name)).unwrap();
    assert_eq!(read("comp_algorithm"), "lzo-rle lzo lz4 lz4hc [zstd] \n");
    std::fs::write(dev.join("reset"), "1").unwrap();
    assert_eq!(read("comp_algorithm"), "lzo-rle lzo [lz4] lz4hc zstd \n");
    assert_eq!(read("initstate"), "0\n");
    server.stop();
}

#[test]
fn every_user_reads_attributes_and_only_the_owner_writes() {
    const NAME: &str = "every_user_reads_attributes_and_only_the_owner_writes";
    if !have(NAME, "root") || !have(NAME, "setpriv") {
        return;
    }
    let Some((tmp, mnt, _detach)) = fuse_dirs(NAME) else {
        return;
    };
    // The way to the tree is open to everyone.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = serve_tree(tmp.path(), &mnt, ZramConfig::default());
    let nobody = |script: &str| {
        run(
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .args(["sh", "-c", script, "sh"])
                .arg(&mnt),
            LIMIT,
        )
    };
    let r = nobody("cat \"$1/zram0/mm_stat\"");
    assert!(r.ok, "nobody cannot read mm_stat: {}", r.stderr);
    assert!(r.stdout.split_whitespace().count() >= 7, "{}", r.stdout);
    let r = nobody("cat \"$1/zram0/comp_algorithm\"");
    assert!(r.ok && r.stdout.contains("[lz4]"), "{}", r.stderr);
    for (what, script) in [
        (
            "write comp_algorithm",
            "echo zstd > \"$1/zram0/comp_algorithm\"",
        ),
        ("write compact", "echo 1 > \"$1/zram0/compact\""),
        ("read the disk", "head -c 1 \"$1/zram0/disk\""),
        ("hot_add", "cat \"$1/zram-control/hot_add\""),
        ("hot_remove", "echo 0 > \"$1/zram-control/hot_remove\""),
    ] {
        let r = nobody(script);
        assert!(!r.ok, "nobody could {what}");
        assert!(
            r.stderr.contains("Permission denied"),
            "{what}: {}",
            r.stderr
        );
    }
    assert_eq!(
        std::fs::read_to_string(mnt.join("zram0/comp_algorithm")).unwrap(),
        "lzo-rle lzo [lz4] lz4hc zstd \n"
    );
    assert_eq!(server.registry.exports().iter().count(), 1);
    server.stop();
}
