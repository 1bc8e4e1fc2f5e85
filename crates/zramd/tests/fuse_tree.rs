//! The FUSE export: the kernel's attribute files with their errnos, the tree's refusals
//! and kept modes, the `disk` file with fallocate and a block device's end, slow attribute
//! writes beside everything else, mounting and shutting down with a real `zramd serve`,
//! and the seeds' workload end to end (root: loop device, ext4, untar, delete, fstrim,
//! e2fsck). Tests that cannot run here print why and return.
//!
//! The errnos written as "the kernel's" were read from a kernel 6.18 zram device (hot-added
//! through /sys/class/zram-control, then reset and removed) doing the same operations as
//! root on /sys/block/zramN.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod ext4;
    pub mod have;
    pub mod mm_stat;
    pub mod mnt;
    pub mod run;
    #[expect(
        dead_code,
        reason = "the FUSE tests reach the server through its tree, not its NBD socket or CLI"
    )]
    pub mod served;
}

use std::fs::OpenOptions;
use std::io::{Read as _, Seek as _, SeekFrom, Write as _};
use std::os::unix::fs::{FileExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime};

use common::ext4::Ext4;
use common::have::have;
use common::mm_stat::mm_stat;
use common::mnt::{errno_of, fuse_dirs, mounts_on};
use common::run::{run, run_ok};
use common::served::Served;
use zramd::serve::{DeviceSpec, ServeOptions, Server};

/// How long one system command (tar, losetup, mkfs, mount, fstrim...) may take.
const LIMIT: Duration = Duration::from_secs(300);

fn start(dir: &Path, size: &str) -> Server {
    start_devices(dir, &[("zram0", size)])
}

/// A server with these devices (name, size) and its FUSE tree at `dir/mnt`.
fn start_devices(dir: &Path, devices: &[(&str, &str)]) -> Server {
    let mount = dir.join("mnt");
    std::fs::create_dir_all(&mount).unwrap();
    Server::start(&ServeOptions {
        devices: devices
            .iter()
            .map(|(name, size)| DeviceSpec {
                name: (*name).into(),
                size: size.parse().unwrap(),
                ..DeviceSpec::default()
            })
            .collect(),
        control: Some(dir.join("control.sock")),
        fuse: Some(mount),
        ..ServeOptions::default()
    })
    .expect("start server with FUSE")
}

/// `len` bytes of `phrase` over and over: data that compresses.
fn repeated(phrase: &[u8], len: usize) -> Vec<u8> {
    phrase.iter().cycle().take(len).copied().collect()
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
    assert_eq!(
        read("comp_algorithm").unwrap(),
        "lzo-rle lzo [lz4] lz4hc zstd \n"
    );
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
    assert_eq!(errno_of(write("mem_limit", "lots")), Some(libc::EINVAL));
    assert_eq!(errno_of(write("reset", "0")), Some(libc::EINVAL));

    // The disk: data in, stats move, compact and limits work.
    let text = repeated(b"zram users keep their scripts. ", 1 << 20);
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
    // Ranges past the end are cut there when the size is kept (punch-hole always keeps
    // it), and refused when zero-range would grow the disk.
    let size = 16u64 << 20;
    let last = size - 4096;
    let disk_file = std::fs::OpenOptions::new().write(true).open(&disk).unwrap();
    let fallocate = |args: &[&str]| run(Command::new("fallocate").args(args).arg(&disk), LIMIT);
    let last_at = last.to_string();
    for mode in [&["-p"][..], &["-z", "-n"]] {
        disk_file.write_all_at(&[7u8; 4096], last).unwrap();
        let r = fallocate(&[mode, &["-o", &last_at, "-l", "8192"]].concat());
        assert!(r.ok, "{mode:?}: {r:?}");
        let mut tail = vec![1u8; 4096];
        std::fs::File::open(&disk)
            .unwrap()
            .read_exact_at(&mut tail, last)
            .unwrap();
        assert!(
            tail.iter().all(|&b| b == 0),
            "{mode:?}: the last page is zeroes"
        );
    }
    let r = fallocate(&["-z", "-o", &last_at, "-l", "8192"]);
    assert!(!r.ok && r.stderr.contains("File too large"), "{r:?}");
    drop(disk_file);
    // Resizing the disk is refused.
    let r = run(
        Command::new("truncate").args(["-s", "1M"]).arg(&disk),
        LIMIT,
    );
    assert!(!r.ok, "{r:?}");
    // Opening it with O_TRUNC (`cp`, `>`) truncates nothing, as on a block device.
    let image = tmp.path().join("image");
    std::fs::write(&image, &text[..8192]).unwrap();
    run_ok(Command::new("cp").arg(&image).arg(&disk), LIMIT);
    let mut head = vec![0u8; 8192];
    std::fs::File::open(&disk)
        .unwrap()
        .read_exact(&mut head)
        .unwrap();
    assert!(head[..] == text[..8192]);
    assert_eq!(std::fs::metadata(&disk).unwrap().len(), 16 << 20);

    // Reset, then re-initialize with another algorithm, as with sysfs.
    write("reset", "1\n").unwrap();
    assert_eq!(read("initstate").unwrap(), "0\n");
    assert_eq!(read("disksize").unwrap(), "0\n");
    assert_eq!(
        std::fs::metadata(&disk).unwrap().len(),
        0,
        "the size at once"
    );
    assert_eq!(
        std::fs::File::open(&disk).unwrap_err().raw_os_error(),
        Some(libc::ENXIO)
    );
    write("comp_algorithm", "zstd\n").unwrap();
    write("algorithm_params", "algo=zstd level=7\n").unwrap();
    assert_eq!(errno_of(write("unit_size", "256K")), Some(libc::EINVAL));
    write("unit_size", "32K\n").unwrap();
    write("disksize", "8M\n").unwrap();
    // The new size at once, as `mkfs` right after `disksize` needs it.
    assert_eq!(std::fs::metadata(&disk).unwrap().len(), 8 << 20);
    assert_eq!(
        read("comp_algorithm").unwrap(),
        "lzo-rle lzo lz4 lz4hc [zstd] \n"
    );
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

/// `disk` ends as a block device ends: reads from the end on are end of file, reads and
/// writes across it do the part before it, writes from the end on are ENOSPC (what
/// /dev/zramN gives for the same pread/pwrite calls).
#[test]
fn disk_ends_as_a_block_device_ends() {
    let Some((tmp, mnt, _detach)) = fuse_dirs("disk_ends_as_a_block_device_ends") else {
        return;
    };
    let server = start(tmp.path(), "1M");
    let size: u64 = 1 << 20;
    let disk = OpenOptions::new()
        .read(true)
        .write(true)
        .open(mnt.join("zram0/disk"))
        .unwrap();
    let data: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8 + 1).collect();
    // Across the end: the part that fits, and the count says so.
    assert_eq!(disk.write_at(&data, size - 4096).unwrap(), 4096);
    assert_eq!(disk.write_at(&data[..100], size - 10).unwrap(), 10);
    // From the end on: no space.
    for at in [size, size + 1, size + 4096, 2 * size] {
        assert_eq!(
            errno_of(disk.write_at(&data, at)),
            Some(libc::ENOSPC),
            "{at}"
        );
    }
    let mut back = vec![0u8; 8192];
    assert_eq!(disk.read_at(&mut back, size - 4096).unwrap(), 4096);
    assert_eq!(&back[..4086], &data[..4086]);
    assert_eq!(&back[4086..4096], &data[..10]);
    assert_eq!(disk.read_at(&mut back, size - 10).unwrap(), 10);
    // From the end on: end of file, not an error.
    for at in [size, size + 1, 2 * size] {
        assert_eq!(disk.read_at(&mut back, at).unwrap(), 0, "{at}");
    }
    let mut tail = Vec::new();
    let mut f = &disk;
    f.seek(SeekFrom::Start(size - 5000)).unwrap();
    f.read_to_end(&mut tail).unwrap();
    assert_eq!(tail.len(), 5000);
    // Nothing else was touched, and the disk serves on.
    assert_eq!(disk.read_at(&mut back, 0).unwrap(), 8192);
    assert!(back.iter().all(|&b| b == 0));
    assert_eq!(mm_stat(&mnt.join("zram0"))[0], 4096, "one page stored");
    drop(disk);
    server.stop();
}

/// The tree refuses what sysfs refuses, with the kernel's errnos for root, and keeps the
/// modes, owners and times that chmod, chown and touch set, honouring the modes as kernfs
/// does. Attribute writes work at any offset and store at most a page, as sysfs's.
#[test]
fn the_tree_refuses_what_sysfs_refuses_and_keeps_modes() {
    const NAME: &str = "the_tree_refuses_what_sysfs_refuses_and_keeps_modes";
    if !have(NAME, "root") || !have(NAME, "mkfifo") {
        return;
    }
    let Some((tmp, mnt, _detach)) = fuse_dirs(NAME) else {
        return;
    };
    let server = start(tmp.path(), "16M");
    let dev = mnt.join("zram0");
    let at = |name: &str| dev.join(name);
    let compact = at("compact");

    // The kernel's errnos for root on /sys/block/zramN.
    let create = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(at("new"));
    assert_eq!(errno_of(create), Some(libc::EACCES), "create");
    let create_new = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&compact);
    assert_eq!(errno_of(create_new), Some(libc::EEXIST));
    assert_eq!(errno_of(std::fs::create_dir(at("dir"))), Some(libc::EPERM));
    assert_eq!(errno_of(std::fs::create_dir(&compact)), Some(libc::EEXIST));
    assert_eq!(errno_of(std::fs::remove_file(&compact)), Some(libc::EPERM));
    assert_eq!(
        errno_of(std::fs::remove_file(at("none"))),
        Some(libc::ENOENT)
    );
    assert_eq!(errno_of(std::fs::remove_dir(&dev)), Some(libc::EPERM));
    assert_eq!(errno_of(std::fs::remove_dir(&compact)), Some(libc::ENOTDIR));
    assert_eq!(
        errno_of(std::fs::rename(&compact, at("c2"))),
        Some(libc::EPERM)
    );
    assert_eq!(
        errno_of(std::fs::rename(&compact, at("reset"))),
        Some(libc::EPERM)
    );
    let symlink = std::os::unix::fs::symlink("/tmp", at("link"));
    assert_eq!(errno_of(symlink), Some(libc::EPERM));
    assert_eq!(
        errno_of(std::fs::hard_link(&compact, at("hl"))),
        Some(libc::EPERM)
    );
    let fifo = run(Command::new("mkfifo").arg(at("fifo")), LIMIT);
    assert!(
        !fifo.ok && fifo.stderr.contains("Operation not permitted"),
        "mknod of a FIFO is EPERM: {fifo:?}"
    );

    // Writes at any offset, and in append mode (`echo 1 >> compact`), as sysfs's.
    OpenOptions::new()
        .append(true)
        .open(&compact)
        .unwrap()
        .write_all(b"1\n")
        .unwrap();
    let f = OpenOptions::new().write(true).open(&compact).unwrap();
    assert_eq!(f.write_at(b"1", 5000).unwrap(), 1);
    // A write stores at most a page; the count says how much (the kernel's: 4096 of 5000).
    let mut long = b"8M".to_vec();
    long.resize(5000, b' ');
    let mut limit = OpenOptions::new()
        .write(true)
        .open(at("mem_limit"))
        .unwrap();
    assert_eq!(limit.write(&long).unwrap(), 4096);
    assert_eq!(mm_stat(&dev)[3], 8 << 20);
    // Truncation (`>` redirections) is a no-op.
    f.set_len(0).unwrap();

    // chmod: kept, shown, honoured even for root (kernfs checks the mode at open); a file
    // with nothing to show opened for reading answers EIO.
    let mode = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
    let chmod = |p: &Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    };
    assert_eq!(mode(&compact), 0o200);
    chmod(&compact, 0o600);
    assert_eq!(mode(&compact), 0o600);
    assert_eq!(errno_of(std::fs::read(&compact)), Some(libc::EIO));
    chmod(&compact, 0o000);
    assert_eq!(errno_of(std::fs::write(&compact, "1")), Some(libc::EACCES));
    chmod(&compact, 0o4755);
    assert_eq!(mode(&compact), 0o4755, "the kernel keeps setuid too");
    chmod(&compact, 0o200);
    std::fs::write(&compact, "1").unwrap();
    chmod(&at("mm_stat"), 0o000);
    assert_eq!(errno_of(std::fs::read(at("mm_stat"))), Some(libc::EACCES));
    chmod(&at("mm_stat"), 0o444);
    assert_eq!(mm_stat(&dev)[3], 8 << 20);
    chmod(&dev, 0o700);
    assert_eq!(mode(&dev), 0o700);
    // chown and touch: kept and shown.
    std::os::unix::fs::chown(&compact, Some(1), Some(2)).unwrap();
    let meta = std::fs::metadata(&compact).unwrap();
    assert_eq!((meta.uid(), meta.gid()), (1, 2));
    std::os::unix::fs::chown(&compact, Some(0), Some(0)).unwrap();
    let five = SystemTime::UNIX_EPOCH + Duration::from_secs(5);
    f.set_times(
        std::fs::FileTimes::new()
            .set_accessed(five)
            .set_modified(five),
    )
    .unwrap();
    let meta = std::fs::metadata(&compact).unwrap();
    assert_eq!((meta.atime(), meta.mtime()), (5, 5));
    assert_eq!(
        std::fs::metadata(at("reset")).unwrap().mtime_nsec(),
        std::fs::metadata(at("disksize")).unwrap().mtime_nsec(),
        "other files keep their times"
    );
    drop(f);
    drop(limit);

    // Everything else serves on.
    let disk = OpenOptions::new()
        .read(true)
        .write(true)
        .open(at("disk"))
        .unwrap();
    disk.write_at(&[9u8; 4096], 0).unwrap();
    let mut page = [0u8; 4096];
    disk.read_exact_at(&mut page, 0).unwrap();
    assert!(page.iter().all(|&b| b == 9));
    drop(disk);
    server.stop();
}

/// An attribute write that is slow (here a dictionary read through this very tree, from
/// another device's disk) holds none of the FUSE session's threads. Twice as many such
/// writes at once as the session has threads (to different devices: the kernel lets one
/// write at a time reach a file) all finish, where they would wait on each other for ever
/// if each held a session thread. Dictionaries that are not regular files are EINVAL at
/// once.
#[test]
fn slow_attribute_writes_hold_no_session_thread() {
    let Some((tmp, mnt, _detach)) = fuse_dirs("slow_attribute_writes_hold_no_session_thread")
    else {
        return;
    };
    let writers = 2 * zramd::fuse::session_threads() + 1;
    let names: Vec<String> = (0..writers).map(|i| format!("zram{i}")).collect();
    let mut devices: Vec<(&str, &str)> = names.iter().map(|n| (n.as_str(), "64K")).collect();
    devices.push(("dict", "64K"));
    let server = start_devices(tmp.path(), &devices);
    let dict = mnt.join("dict/disk");
    let words = repeated(b"compressed pages, kept in memory; ", 64 << 10);
    OpenOptions::new()
        .write(true)
        .open(&dict)
        .unwrap()
        .write_all_at(&words, 0)
        .unwrap();
    for name in &names {
        std::fs::write(mnt.join(name).join("reset"), "1").unwrap();
        std::fs::write(mnt.join(name).join("comp_algorithm"), "zstd").unwrap();
    }
    let params = mnt.join("zram0/algorithm_params");
    let fifo = tmp.path().join("fifo");
    run_ok(Command::new("mkfifo").arg(&fifo), LIMIT);
    for bad in [fifo.as_path(), Path::new("/dev/zero"), tmp.path()] {
        let r = std::fs::write(&params, format!("algo=zstd dict={}", bad.display()));
        assert_eq!(errno_of(r), Some(libc::EINVAL), "{}", bad.display());
    }

    let (tx, rx) = std::sync::mpsc::channel();
    for name in &names {
        let (tx, params) = (tx.clone(), mnt.join(name).join("algorithm_params"));
        let value = format!("algo=zstd level=5 dict={}", dict.display());
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::write(params, value).map_err(|e| e.raw_os_error()));
        });
    }
    for i in 0..writers {
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(r) => assert_eq!(r, Ok(()), "writer {i}"),
            Err(_) => {
                // Abort the tree's connection, so that the stuck writers fail and end.
                let _ = Command::new("umount").arg("-f").arg(&mnt).status();
                panic!("{} of {writers} writers are stuck", writers - i);
            }
        }
    }
    for name in &names {
        std::fs::write(mnt.join(name).join("disksize"), "64K").unwrap();
        let zram = server.registry.device(name).unwrap().zram().unwrap();
        let kept = zram.params().dictionary.clone();
        assert_eq!(kept.as_deref(), Some(&words), "{name}: the disk's bytes");
        assert_eq!(zram.params().level, Some(5));
    }
    assert_eq!(std::fs::read(&dict).unwrap(), words, "nothing lost");
    server.stop();
}

const ZRAMD: &str = env!("CARGO_BIN_EXE_zramd");

/// SIGTERM while a process holds `disk` open: `zramd serve` exits cleanly and leaves no
/// mount behind (it detaches the busy tree lazily), so the directory is usable at once; the
/// holder's file reads ENOTCONN from then on.
#[test]
fn sigterm_with_disk_held_open_leaves_no_mount() {
    let Some((tmp, mnt, _detach)) = fuse_dirs("sigterm_with_disk_held_open_leaves_no_mount") else {
        return;
    };
    let served = Served::start(
        tmp.path(),
        &["--size", "16M", "--fuse", mnt.to_str().unwrap()],
    );
    assert_eq!(mounts_on(&mnt), 1);
    let held = OpenOptions::new()
        .read(true)
        .write(true)
        .open(mnt.join("zram0/disk"))
        .unwrap();
    held.write_at(b"held open", 0).unwrap();
    served.stop();
    assert_eq!(mounts_on(&mnt), 0, "nothing left mounted");
    let entries = std::fs::read_dir(&mnt)
        .expect("the directory is usable")
        .count();
    assert_eq!(entries, 0, "and empty again");
    let mut buf = [0u8; 9];
    assert_eq!(errno_of(held.read_at(&mut buf, 0)), Some(libc::ENOTCONN));
}

/// A second server given a live tree's directory is refused with a clear error and binds
/// nothing; the first serves on. A crashed server's dead tree (ENOTCONN) is detached and
/// the directory reused.
#[test]
fn a_live_tree_is_refused_and_a_dead_one_reused() {
    let Some((tmp, mnt, _detach)) = fuse_dirs("a_live_tree_is_refused_and_a_dead_one_reused")
    else {
        return;
    };
    let fuse = ["--size", "16M", "--fuse", mnt.to_str().unwrap()];
    let sub = |name: &str| {
        let d = tmp.path().join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let first = Served::start(&sub("first"), &fuse);
    let second = sub("second");
    let r = run(
        Command::new(ZRAMD)
            .arg("serve")
            .args(fuse)
            .arg("--unix")
            .arg(second.join("nbd.sock"))
            .arg("--control")
            .arg(second.join("control.sock")),
        // It must exit at once; one that mounts over the tree serves until killed.
        Duration::from_secs(60),
    );
    assert!(!r.ok, "a second server on a live tree must fail: {r:?}");
    assert!(
        r.stderr.contains("already a mount point") && r.stderr.contains(mnt.to_str().unwrap()),
        "{}",
        r.stderr
    );
    assert!(!second.join("control.sock").exists() && !second.join("nbd.sock").exists());
    assert_eq!(mounts_on(&mnt), 1, "nothing mounted over the live tree");
    assert_eq!(
        std::fs::read_to_string(mnt.join("zram0/initstate")).unwrap(),
        "1\n"
    );
    OpenOptions::new()
        .write(true)
        .open(mnt.join("zram0/disk"))
        .unwrap()
        .write_all_at(b"still served", 0)
        .unwrap();

    first.kill();
    assert_eq!(
        errno_of(std::fs::read_dir(&mnt)),
        Some(libc::ENOTCONN),
        "a crashed server leaves a dead tree"
    );
    let third = Served::start(&sub("third"), &fuse);
    assert_eq!(mounts_on(&mnt), 1);
    assert_eq!(
        std::fs::read_to_string(mnt.join("zram0/initstate")).unwrap(),
        "1\n"
    );
    third.stop();
    assert_eq!(mounts_on(&mnt), 0, "nothing left mounted");
}

/// A tree someone unmounted from outside: the server stops cleanly and says so, instead of
/// warning that the tree is in use and detaching it lazily.
#[test]
fn a_tree_unmounted_from_outside_stops_cleanly() {
    let Some((tmp, mnt, _detach)) = fuse_dirs("a_tree_unmounted_from_outside_stops_cleanly") else {
        return;
    };
    let served = Served::start(
        tmp.path(),
        &["--size", "16M", "--fuse", mnt.to_str().unwrap()],
    );
    // umount as root, fusermount3 as a user who mounted it.
    if !run(Command::new("umount").arg(&mnt), LIMIT).ok {
        run_ok(Command::new("fusermount3").arg("-u").arg(&mnt), LIMIT);
    }
    assert_eq!(mounts_on(&mnt), 0);
    let log = {
        let err = tmp.path().join("zramd-serve.err");
        served.stop();
        std::fs::read_to_string(err).unwrap()
    };
    assert!(log.contains("unmounted from outside"), "{log}");
    assert!(!log.contains("in use"), "{log}");
}
