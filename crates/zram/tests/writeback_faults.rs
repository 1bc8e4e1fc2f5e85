//! Writeback to a real backing file that goes wrong under the device: a filesystem that
//! fills up (`ENOSPC`), a FUSE-served file that fails (`EIO`, injected by nbdkit's error
//! filter), a file truncated, truncated and grown back, overwritten or removed while in
//! use, and backing paths that are no file.
//!
//! Each test stores known pages (text that compresses, random pages stored raw, same-filled
//! pages), writes idle ones back through `Zram::new`'s own `FileBacking`, and checks every
//! byte: a failed writeback stops with the file's errno, is counted in `wb_failed` and
//! leaves its slots in memory with their data; a read of a written-back slot returns the
//! right bytes or fails with `EIO`, counted in `failed_reads` and `bd_read_failed`, never
//! wrong bytes. The tests that need root (mounting a tmpfs) or FUSE with nbdkit and nbdfuse
//! print `SKIPPED: <reason>` and return when they cannot have them.

mod common;
#[path = "common/text.rs"]
mod text;
#[path = "common/tmpfs.rs"]
mod tmpfs;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::random;
use zram::slot::Flags;
use zram::stats::Counters;
use zram::{IdleRequest, Mode, PAGE_SIZE, WritebackRequest, Zram, ZramConfig};

/// Segments of the file store `Zram::new` opens (its default).
const SEG: u64 = 1 << 20;

/// A fresh temporary directory on the disk the build is on.
fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temporary directory")
}

/// Text that lz4 packs to about half.
fn text(page: usize) -> Vec<u8> {
    text::text_page(
        page,
        &[
            "idle ",
            "writeback ",
            "segment ",
            "slot ",
            "punch\n",
            "errno ",
        ],
    )
}

/// Page `p` of the test data: same-filled every 8th, else text on even pages and random
/// (stored raw) on odd ones.
fn page(p: usize) -> Vec<u8> {
    match p {
        p if p % 8 == 7 => vec![p as u8; PAGE_SIZE],
        p if p % 2 == 0 => text(p),
        p => random(PAGE_SIZE, p as u64 + 1000),
    }
}

/// A device of `pages` pages backed by the file at `path`, filled with [`page`]; and its
/// image.
fn device(path: &Path, pages: usize, readahead: bool) -> (Zram, Vec<u8>) {
    let zram = Zram::new(ZramConfig {
        disksize: (pages * PAGE_SIZE) as u64,
        backing_dev: Some(path.to_owned()),
        readback_readahead: readahead,
        writeback_batch_size: 16,
        auto_compact: None,
        ..ZramConfig::default()
    })
    .expect("a device on the backing file");
    let mut image = Vec::with_capacity(pages * PAGE_SIZE);
    for p in 0..pages {
        let data = page(p);
        zram.write((p * PAGE_SIZE) as u64, &data).expect("write");
        image.extend_from_slice(&data);
    }
    (zram, image)
}

/// Marks every slot idle, then reads the pages `keep` names so that they are not.
fn mark_idle_but(zram: &Zram, image: &[u8], keep: impl Fn(usize) -> bool) {
    zram.mark_idle(IdleRequest::All);
    for p in (0..image.len() / PAGE_SIZE).filter(|&p| keep(p)) {
        assert_eq!(read_page(zram, image, p), Ok(()), "page {p} in memory");
    }
}

fn idle() -> WritebackRequest {
    WritebackRequest::mode(Mode::Idle)
}

/// The pages whose slots are in the backing file.
fn written_back(zram: &Zram, pages: usize) -> Vec<usize> {
    (0..pages)
        .filter(|&p| zram.slot(p).expect("slot").flags.contains(Flags::WB))
        .collect()
}

/// Reads page `p` with `Zram::read`: `Ok` with the right bytes or the error's errno; wrong
/// bytes fail the test.
fn read_page(zram: &Zram, image: &[u8], p: usize) -> Result<(), i32> {
    let want = &image[p * PAGE_SIZE..(p + 1) * PAGE_SIZE];
    let mut out = vec![0xEE; PAGE_SIZE];
    zram.read((p * PAGE_SIZE) as u64, &mut out)
        .map_err(|e| e.errno())?;
    assert!(out == want, "page {p} read back wrong bytes");
    Ok(())
}

/// Every page reads back right through `Zram::inspect` (no access recorded).
fn check_all(zram: &Zram, image: &[u8]) {
    for p in 0..image.len() / PAGE_SIZE {
        let mut out = vec![0xEE; PAGE_SIZE];
        let r = zram.inspect((p * PAGE_SIZE) as u64, &mut out);
        assert!(r.is_ok(), "page {p}: {r:?}");
        assert!(
            out == image[p * PAGE_SIZE..(p + 1) * PAGE_SIZE],
            "page {p} differs"
        );
    }
}

/// Reads every page of `pages` with `Zram::read`; each gives the right bytes or `EIO`.
/// Returns how many failed, after checking each failure was counted once.
fn read_all_or_eio(zram: &Zram, image: &[u8], pages: &[usize]) -> u64 {
    let (failed_reads, bd_failed) = (zram.io_stat().failed_reads, bd_read_failed(zram));
    let mut errors = 0;
    for &p in pages {
        if let Err(errno) = read_page(zram, image, p) {
            assert_eq!(errno, libc::EIO, "page {p}");
            errors += 1;
        }
    }
    assert_eq!(zram.io_stat().failed_reads, failed_reads + errors);
    assert_eq!(bd_read_failed(zram), bd_failed + errors);
    errors
}

fn wb_failed(zram: &Zram) -> u64 {
    Counters::get(&zram.counters().wb_failed)
}

fn bd_read_failed(zram: &Zram) -> u64 {
    Counters::get(&zram.counters().bd_read_failed)
}

/// The slots in the file are exactly those counted, and hold exactly the file's live bytes;
/// no slot is left marked as being written back.
fn check_accounts(zram: &Zram, pages: usize) -> Vec<usize> {
    let wb = written_back(zram, pages);
    assert_eq!(zram.bd_stat().bd_count, wb.len() as u64);
    let lens: u64 = wb.iter().map(|&p| zram.slot(p).unwrap().len as u64).sum();
    assert_eq!(zram.backing_stats().expect("backing").live_bytes, lens);
    for p in 0..pages {
        let flags = zram.slot(p).unwrap().flags;
        assert!(!flags.contains(Flags::PP), "page {p} still marked PP");
    }
    wb
}

/// Waits up to `secs` seconds for `done`; false if it never was.
fn wait_for(secs: u64, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    done()
}

#[test]
fn a_full_filesystem_stops_writeback_with_enospc_and_loses_nothing() {
    let dir = tempdir();
    // Four of the store's 1 MiB segments: two can be emptied and punched while others live.
    let mount = match tmpfs::mount_tmpfs(dir.path(), "4M") {
        Ok(m) => m,
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    let path = mount.0.join("backing");
    File::create(&path).expect("create");
    // 3072 pages: about 5 MiB of raw pages and 2.5 MiB of compressed text to write back.
    let pages = 3072;
    let (zram, mut image) = device(&path, pages, true);
    mark_idle_but(&zram, &image, |p| p % 16 == 0);
    let e = zram
        .writeback(&idle())
        .expect_err("4 MiB cannot hold it all");
    assert_eq!(e.errno(), libc::ENOSPC, "{e}");
    assert_eq!(wb_failed(&zram), 1);
    assert_eq!(zram.backing_stats().unwrap().write_errors, 1);
    let wb = check_accounts(&zram, pages);
    assert!(wb.len() > 512, "only {} pages written back", wb.len());
    // The failed batch and those after it are still in memory, idle, with their data.
    let left: Vec<usize> = (0..pages)
        .filter(|&p| p % 8 != 7 && p % 16 != 0 && !wb.contains(&p))
        .collect();
    assert!(!left.is_empty(), "everything was written back");
    for &p in &left {
        let e = zram.slot(p).unwrap();
        assert!(
            e.len != 0 && e.flags.contains(Flags::IDLE),
            "page {p}: {e:?}"
        );
    }
    check_all(&zram, &image);
    let bd_reads = zram.bd_stat().bd_reads;
    assert_eq!(read_all_or_eio(&zram, &image, &wb), 0);
    assert_eq!(zram.bd_stat().bd_reads, bd_reads + wb.len() as u64);

    // Discarding the slots of the first two segments punches them out of the tmpfs; a
    // writeback then has room again.
    let punched = zram.backing_stats().unwrap().segments_punched;
    let first: Vec<usize> = wb
        .iter()
        .copied()
        .filter(|&p| zram::slot::wb_offset(zram.slot(p).unwrap().handle) < 2 * SEG)
        .collect();
    for &p in &first {
        zram.discard((p * PAGE_SIZE) as u64, PAGE_SIZE as u64)
            .expect("discard");
        image[p * PAGE_SIZE..(p + 1) * PAGE_SIZE].fill(0);
    }
    assert_eq!(zram.backing_stats().unwrap().segments_punched, punched + 2);
    let mut some = idle();
    some.max_pages = 128;
    let report = zram
        .writeback(&some)
        .expect("writeback after room was freed");
    assert_eq!(report.pages, 128);
    assert_eq!(wb_failed(&zram), 1);
    let wb = check_accounts(&zram, pages);
    check_all(&zram, &image);
    assert_eq!(read_all_or_eio(&zram, &image, &wb), 0);
    drop(zram);
    drop(mount);
}

/// nbdkit serving a 64 MiB RAM disk that fails every request while a trigger file exists,
/// mounted as a file with nbdfuse; unmounted and stopped when dropped.
struct FailingFile {
    mnt: PathBuf,
    trigger: PathBuf,
    nbdkit: Child,
    nbdfuse: Option<Child>,
}

impl FailingFile {
    /// Starts both in `dir`; `Err` says why they could not be had.
    fn start(dir: &Path) -> Result<Self, String> {
        if !Path::new("/dev/fuse").exists() {
            return Err("no /dev/fuse".into());
        }
        let sock = dir.join("sock");
        let trigger = dir.join("trigger");
        let mnt = dir.join("mnt");
        std::fs::create_dir(&mnt).map_err(|e| e.to_string())?;
        let log = File::create(dir.join("nbdkit.log")).map_err(|e| e.to_string())?;
        let nbdkit = Command::new("nbdkit")
            .args(["-f", "--exit-with-parent", "-U"])
            .arg(&sock)
            .args([
                "--filter=error",
                "memory",
                "64M",
                "error=EIO",
                "error-rate=100%",
            ])
            .arg(format!("error-file={}", trigger.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("nbdkit: {e}"))?;
        let mut this = Self {
            mnt,
            trigger,
            nbdkit,
            nbdfuse: None,
        };
        let nbdkit = &mut this.nbdkit;
        if !wait_for(10, || {
            sock.exists() || !matches!(nbdkit.try_wait(), Ok(None))
        }) {
            return Err("nbdkit did not listen within 10 s".into());
        }
        if !sock.exists() {
            let log = std::fs::read_to_string(dir.join("nbdkit.log")).unwrap_or_default();
            return Err(format!("nbdkit failed: {}", log.trim()));
        }
        let nbdfuse = Command::new("nbdfuse")
            .arg(&this.mnt)
            .arg("--unix")
            .arg(&sock)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("nbdfuse: {e}"))?;
        let nbdfuse = this.nbdfuse.insert(nbdfuse);
        let file = this.mnt.join("nbd");
        if !wait_for(10, || {
            file.exists() || !matches!(nbdfuse.try_wait(), Ok(None))
        }) || !file.exists()
        {
            return Err("nbdfuse did not mount the file within 10 s".into());
        }
        Ok(this)
    }

    fn file(&self) -> PathBuf {
        self.mnt.join("nbd")
    }

    /// Makes every request to the file fail (`on`) or succeed.
    fn fail(&self, on: bool) {
        if on {
            File::create(&self.trigger).expect("trigger");
        } else {
            std::fs::remove_file(&self.trigger).expect("trigger");
        }
    }
}

/// Waits up to 5 s for `child` to exit, then kills it.
fn reap(child: &mut Child) {
    if !wait_for(5, || !matches!(child.try_wait(), Ok(None))) {
        let _ = child.kill();
    }
    let _ = child.wait();
}

impl Drop for FailingFile {
    fn drop(&mut self) {
        if let Some(mut nbdfuse) = self.nbdfuse.take() {
            let unmount = |lazy: bool| {
                let mut cmd = Command::new("fusermount3");
                cmd.arg(if lazy { "-uz" } else { "-u" }).arg(&self.mnt);
                cmd.status().is_ok_and(|s| s.success())
            };
            if !unmount(false) && !unmount(true) {
                eprintln!("could not unmount {}", self.mnt.display());
            }
            reap(&mut nbdfuse);
        }
        let _ = self.nbdkit.kill();
        reap(&mut self.nbdkit);
    }
}

#[test]
fn a_failing_file_fails_writeback_and_reads_with_eio_and_never_wrong_bytes() {
    let dir = tempdir();
    let fuse = match FailingFile::start(dir.path()) {
        Ok(fuse) => fuse,
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    let pages = 256;
    // Without read-ahead every read of a written-back slot goes to the file.
    let (zram, image) = device(&fuse.file(), pages, false);
    mark_idle_but(&zram, &image, |p| p % 4 == 0);

    fuse.fail(true);
    let e = zram.writeback(&idle()).expect_err("the file fails");
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert_eq!(wb_failed(&zram), 1);
    assert!(check_accounts(&zram, pages).is_empty());
    check_all(&zram, &image);
    assert_eq!(
        read_all_or_eio(&zram, &image, &[1, 2, 3, 5]),
        0,
        "in memory"
    );

    fuse.fail(false);
    // The pages just read are no longer idle.
    mark_idle_but(&zram, &image, |p| p % 4 == 0);
    let report = zram.writeback(&idle()).expect("the file works again");
    let wb = check_accounts(&zram, pages);
    assert_eq!(report.pages, wb.len() as u64);
    let resident = (0..pages).filter(|p| p % 8 != 7 && p % 4 != 0).count();
    assert_eq!(wb.len(), resident);
    assert_eq!(wb_failed(&zram), 1);
    check_all(&zram, &image);

    fuse.fail(true);
    let errors = read_all_or_eio(&zram, &image, &wb);
    assert!(errors > 0, "no read of the failing file failed");
    let in_memory: Vec<usize> = (0..pages).filter(|p| !wb.contains(p)).collect();
    assert_eq!(read_all_or_eio(&zram, &image, &in_memory), 0);
    assert_eq!(
        check_accounts(&zram, pages),
        wb,
        "failed reads change no slot"
    );

    fuse.fail(false);
    assert_eq!(read_all_or_eio(&zram, &image, &wb), 0);
    check_all(&zram, &image);
    println!("{errors} of {} reads failed while the file did", wb.len());
    drop(zram);
    drop(fuse);
}

/// A device of `pages` pages on a new backing file, with every page but each fourth written
/// back; its folder (kept while it lives), the file, the device, its image and the pages
/// written back.
fn three_quarters_written_back(
    pages: usize,
    readahead: bool,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    Zram,
    Vec<u8>,
    Vec<usize>,
) {
    let dir = tempdir();
    let path = dir.path().join("backing");
    File::create(&path).expect("create");
    let (zram, image) = device(&path, pages, readahead);
    mark_idle_but(&zram, &image, |p| p % 4 == 0);
    zram.writeback(&idle()).expect("writeback");
    let wb = check_accounts(&zram, pages);
    (dir, path, zram, image, wb)
}

#[test]
fn a_file_truncated_under_the_device_reads_as_eio_never_as_other_bytes() {
    for readahead in [true, false] {
        let pages = 256;
        let (_dir, path, zram, mut image, wb) = three_quarters_written_back(pages, readahead);
        assert!(!wb.is_empty());

        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(0))
            .expect("truncate");
        let errors = read_all_or_eio(&zram, &image, &wb);
        assert_eq!(errors, wb.len() as u64, "the file is empty");
        let in_memory: Vec<usize> = (0..pages).filter(|p| !wb.contains(p)).collect();
        assert_eq!(read_all_or_eio(&zram, &image, &in_memory), 0);

        // A lost slot can still be overwritten or discarded.
        let (a, b) = (wb[0], wb[1]);
        let new = random(PAGE_SIZE, 77);
        zram.write((a * PAGE_SIZE) as u64, &new).expect("overwrite");
        image[a * PAGE_SIZE..(a + 1) * PAGE_SIZE].copy_from_slice(&new);
        zram.discard((b * PAGE_SIZE) as u64, PAGE_SIZE as u64)
            .expect("discard");
        image[b * PAGE_SIZE..(b + 1) * PAGE_SIZE].fill(0);
        assert_eq!(read_all_or_eio(&zram, &image, &[a, b]), 0);
        assert_eq!(check_accounts(&zram, pages).len(), wb.len() - 2);
    }
}

#[test]
fn a_file_cut_and_grown_back_or_overwritten_from_outside_reads_as_eio() {
    for readahead in [true, false] {
        let pages = 256;
        let (_dir, path, zram, image, wb) = three_quarters_written_back(pages, readahead);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .expect("open");
        let len = file.metadata().expect("stat").len();
        // Another program cuts the file in half and grows it back (the second half reads
        // as zeroes), and writes over 100 bytes of the first half.
        file.set_len(len / 2)
            .and_then(|()| file.set_len(len))
            .expect("cut and grow");
        std::os::unix::fs::FileExt::write_all_at(&file, &[0x5A; 100], len / 4).expect("write");
        let offset = |p: usize| zram::slot::wb_offset(zram.slot(p).expect("slot").handle);
        let spoilt = |p: &usize| {
            let (start, end) = (
                offset(*p),
                offset(*p) + zram.slot(*p).expect("slot").len as u64,
            );
            end > len / 2 || (start < len / 4 + 100 && end > len / 4)
        };
        let expected = wb.iter().filter(|p| spoilt(p)).count() as u64;
        assert!(expected > 2, "{expected} of {} pages", wb.len());
        // Every page reads right or fails with EIO (`read_page` fails on wrong bytes);
        // exactly the spoilt ones fail.
        assert_eq!(
            read_all_or_eio(&zram, &image, &wb),
            expected,
            "readahead {readahead}"
        );
    }
}

#[test]
fn a_file_removed_under_the_device_keeps_working() {
    let dir = tempdir();
    let path = dir.path().join("backing");
    File::create(&path).expect("create");
    let pages = 512;
    let (zram, mut image) = device(&path, pages, true);
    mark_idle_but(&zram, &image, |p| p % 2 == 0);
    zram.writeback(&idle()).expect("writeback");
    let wb = check_accounts(&zram, pages);
    assert!(!wb.is_empty());

    std::fs::remove_file(&path).expect("remove");
    assert_eq!(read_all_or_eio(&zram, &image, &wb), 0);
    assert_eq!(zram.bd_stat().bd_reads, wb.len() as u64);

    // New data, and what is left in memory, is written back to the same open file.
    for p in (0..pages).step_by(8) {
        let data = random(PAGE_SIZE, p as u64 + 5000);
        zram.write((p * PAGE_SIZE) as u64, &data).expect("write");
        image[p * PAGE_SIZE..(p + 1) * PAGE_SIZE].copy_from_slice(&data);
    }
    zram.mark_idle(IdleRequest::All);
    let report = zram
        .writeback(&idle())
        .expect("writeback to the removed file");
    assert!(report.pages > 0);
    let wb = check_accounts(&zram, pages);
    assert_eq!(wb.len(), (0..pages).filter(|p| p % 8 != 7).count());
    assert_eq!(read_all_or_eio(&zram, &image, &wb), 0);
    check_all(&zram, &image);
    assert_eq!(wb_failed(&zram), 0);
}

#[test]
fn a_backing_path_that_is_no_file_is_refused_with_its_errno() {
    let dir = tempdir();
    let open = |path: &Path| {
        Zram::new(ZramConfig {
            disksize: 1 << 20,
            backing_dev: Some(path.to_owned()),
            auto_compact: None,
            ..ZramConfig::default()
        })
        .map(drop)
        .map_err(|e| e.errno())
    };
    assert_eq!(open(dir.path()), Err(libc::EINVAL), "a directory");
    assert_eq!(open(&dir.path().join("missing")), Err(libc::ENOENT));
    assert_eq!(
        open(Path::new("/dev/null")),
        Err(libc::EINVAL),
        "a character device"
    );
    let path = dir.path().join("backing");
    File::create(&path).expect("create");
    assert_eq!(open(&path), Ok(()));
}
