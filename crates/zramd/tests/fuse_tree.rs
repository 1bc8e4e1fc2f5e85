//! The FUSE export: the kernel's attribute files with their errnos, the `disk` file with
//! fallocate, and the seeds' workload end to end (root: loop device, ext4, untar, delete,
//! fstrim, e2fsck). Tests that cannot run here print why and return.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod ext4;
    pub mod have;
    pub mod run;
}

use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::ext4::Ext4;
use common::have::have;
use common::run::{run, run_ok};
use zramd::serve::{DeviceSpec, ServeOptions, Server};

/// How long one system command (tar, losetup, mkfs, mount, fstrim...) may take.
const LIMIT: Duration = Duration::from_secs(300);

fn start(dir: &Path, size: &str) -> Server {
    let mount = dir.join("mnt");
    std::fs::create_dir_all(&mount).unwrap();
    Server::start(&ServeOptions {
        devices: vec![DeviceSpec {
            name: "zram0".into(),
            size: size.parse().unwrap(),
            ..DeviceSpec::default()
        }],
        control: Some(dir.join("control.sock")),
        fuse: Some(mount),
        ..ServeOptions::default()
    })
    .expect("start server with FUSE")
}

fn errno_of(r: std::io::Result<()>) -> Option<i32> {
    r.err().and_then(|e| e.raw_os_error())
}

fn mm_stat(dev: &Path) -> Vec<u64> {
    std::fs::read_to_string(dev.join("mm_stat"))
        .unwrap()
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect()
}

#[test]
fn attribute_files_behave_as_sysfs() {
    if !have("attribute_files_behave_as_sysfs", "fuse") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path(), "16M");
    let dev = tmp.path().join("mnt/zram0");
    let read = |name: &str| std::fs::read_to_string(dev.join(name));
    let write = |name: &str, value: &str| std::fs::write(dev.join(name), value);

    let names: Vec<String> = std::fs::read_dir(&dev)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for want in [
        "disk",
        "disksize",
        "initstate",
        "reset",
        "comp_algorithm",
        "mm_stat",
        "io_stat",
        "debug_stat",
        "compact",
        "mem_limit",
        "mem_used_max",
        "algorithm_params",
        "unit_size",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "{want} missing from {names:?}"
        );
    }
    assert_eq!(read("disksize").unwrap(), format!("{}\n", 16 << 20));
    assert_eq!(read("initstate").unwrap(), "1\n");
    assert_eq!(read("comp_algorithm").unwrap(), "lzo-rle lzo [lz4] zstd \n");
    assert_eq!(std::fs::metadata(dev.join("disk")).unwrap().len(), 16 << 20);

    // Errnos as the kernel's.
    assert_eq!(errno_of(write("disksize", "32M")), Some(libc::EBUSY));
    assert_eq!(errno_of(write("comp_algorithm", "zstd")), Some(libc::EBUSY));
    assert_eq!(read("unit_size").unwrap(), "4096\n");
    assert_eq!(errno_of(write("unit_size", "32K")), Some(libc::EBUSY));
    assert_eq!(errno_of(write("unit_size", "33K")), Some(libc::EINVAL));
    assert_eq!(errno_of(write("mm_stat", "1")), Some(libc::EACCES));
    assert_eq!(
        read("reset").unwrap_err().raw_os_error(),
        Some(libc::EACCES)
    );
    assert_eq!(errno_of(write("mem_used_max", "7")), Some(libc::EINVAL));
    assert_eq!(errno_of(write("mem_limit", "plenty")), Some(libc::EINVAL));
    assert_eq!(errno_of(write("reset", "0")), Some(libc::EINVAL));

    // The disk: data in, stats move, compact and limits work.
    let text: Vec<u8> = b"zram users keep their scripts. "
        .iter()
        .cycle()
        .take(1 << 20)
        .copied()
        .collect();
    {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(dev.join("disk"))
            .unwrap();
        f.write_all(&text).unwrap();
        f.sync_all().unwrap();
        // Reset is refused while the disk is open.
        assert_eq!(errno_of(write("reset", "1")), Some(libc::EBUSY));
        f.seek(SeekFrom::Start(0)).unwrap();
        let mut back = vec![0u8; text.len()];
        f.read_exact(&mut back).unwrap();
        assert_eq!(back, text);
    }
    let mm = mm_stat(&dev);
    assert_eq!(mm[0], 1 << 20, "orig_data_size");
    assert!(mm[1] > 0 && mm[1] < 1 << 18, "compressed: {mm:?}");
    write("compact", "1\n").unwrap();
    write("mem_limit", "8M\n").unwrap();
    assert_eq!(mm_stat(&dev)[3], 8 << 20);
    write("mem_used_max", "0\n").unwrap();

    // fallocate: punch-hole reads back zeroes and frees pages; zero-range too.
    let disk = dev.join("disk");
    run_ok(
        Command::new("fallocate")
            .args(["-p", "-o", "100", "-l", "524288"])
            .arg(&disk),
        LIMIT,
    );
    let mut back = vec![0u8; text.len()];
    std::fs::File::open(&disk)
        .unwrap()
        .read_exact(&mut back)
        .unwrap();
    assert_eq!(&back[..100], &text[..100]);
    assert!(back[100..524_388].iter().all(|&b| b == 0));
    assert_eq!(&back[524_388..], &text[524_388..]);
    assert!(mm_stat(&dev)[0] < 1 << 20, "punched pages freed");
    run_ok(
        Command::new("fallocate")
            .args(["-z", "-o", "524288", "-l", "8192"])
            .arg(&disk),
        LIMIT,
    );
    // Resizing the disk is refused.
    let r = run(
        Command::new("truncate").args(["-s", "1M"]).arg(&disk),
        LIMIT,
    );
    assert!(!r.ok, "{r:?}");

    // Reset, then re-initialize with another algorithm, as with sysfs.
    write("reset", "1\n").unwrap();
    assert_eq!(read("initstate").unwrap(), "0\n");
    assert_eq!(read("disksize").unwrap(), "0\n");
    assert_eq!(
        std::fs::File::open(&disk).unwrap_err().raw_os_error(),
        Some(libc::ENXIO)
    );
    write("comp_algorithm", "zstd\n").unwrap();
    write("algorithm_params", "algo=zstd level=7\n").unwrap();
    assert_eq!(errno_of(write("unit_size", "256K")), Some(libc::EINVAL));
    write("unit_size", "32K\n").unwrap();
    write("disksize", "8M\n").unwrap();
    assert_eq!(read("comp_algorithm").unwrap(), "lzo-rle lzo lz4 [zstd] \n");
    assert_eq!(read("unit_size").unwrap(), "32768\n");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&disk)
        .unwrap()
        .write_all(&text[..4096])
        .unwrap();
    // One page written: its 32 KiB unit is stored (the rest of it zeroes).
    assert_eq!(mm_stat(&dev)[0], 32768);

    server.stop();
    assert!(
        std::fs::read_dir(tmp.path().join("mnt"))
            .unwrap()
            .next()
            .is_none(),
        "unmounted"
    );
}

#[test]
fn ext4_on_the_fuse_disk_untar_delete_fstrim_fsck() {
    const NAME: &str = "ext4_on_the_fuse_disk_untar_delete_fstrim_fsck";
    for need in [
        "fuse",
        "root",
        "losetup",
        "mkfs.ext4",
        "e2fsck",
        "fstrim",
        "tar",
    ] {
        if !have(NAME, need) {
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    // A small real tree: the system's C headers.
    let tarball = tmp.path().join("include.tar");
    run_ok(
        Command::new("tar")
            .arg("cf")
            .arg(&tarball)
            .args(["-C", "/usr", "include"]),
        LIMIT,
    );
    let server = start(tmp.path(), "512M");
    let dev = tmp.path().join("mnt/zram0");
    let mnt = tmp.path().join("ext4");
    let fs = Ext4::create(&dev.join("disk"), &mnt, &["-o", "discard"]);

    run_ok(
        Command::new("tar")
            .arg("xf")
            .arg(&tarball)
            .arg("-C")
            .arg(&mnt),
        LIMIT,
    );
    run_ok(&mut Command::new("sync"), LIMIT);
    // Every file matches the tarball.
    run_ok(
        Command::new("tar")
            .arg("df")
            .arg(&tarball)
            .arg("-C")
            .arg(&mnt),
        LIMIT,
    );
    let full = mm_stat(&dev);
    println!("after untar: mm_stat {full:?}");
    assert!(full[0] > 10 << 20, "the tree is on the device: {full:?}");
    assert!(full[2] < full[0], "it is compressed: {full:?}");

    // Delete most of it, trim, and watch the device give memory back.
    let dirs: Vec<PathBuf> = std::fs::read_dir(mnt.join("include"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .collect();
    for d in &dirs {
        std::fs::remove_dir_all(d).unwrap();
    }
    run_ok(&mut Command::new("sync"), LIMIT);
    run_ok(Command::new("fstrim").arg(&mnt), LIMIT);
    let after = mm_stat(&dev);
    println!("after delete + fstrim: mm_stat {after:?}");
    assert!(
        after[0] < full[0] / 2,
        "orig_data_size falls: {full:?} -> {after:?}"
    );
    assert!(
        after[2] < full[2],
        "mem_used_total falls: {full:?} -> {after:?}"
    );

    fs.unmount_and_check();
    server.stop();
}
