//! Cleaning the backing store (`zram::clean`): written-back objects are moved out of sparse
//! segments, so that a store bounded in size takes new writebacks while mostly empty, with
//! every slot's data intact and nothing leaked.
//!
//! The store is bounded by the process's file-size limit (`RLIMIT_FSIZE`, which a regular
//! backing file stays within as a block device stays within its size): every test of this
//! binary sets the same limit before it opens a file, so that all of them see it.

mod common;
#[path = "common/loopdev.rs"]
mod loopdev;

use std::path::Path;
use std::sync::Arc;
use std::sync::Once;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use common::random;
use zram::backing::{Backing, BackingStats, FileBacking, FileOptions, Sparse};
use zram::slot::Flags;
use zram::{Mode, PAGE_SIZE, WritebackRequest, Zram, ZramConfig};

/// Segments of the file store `Zram::new` opens (its default).
const SEG: u64 = 1 << 20;
/// The store's bound: 8 segments, one of them kept back for cleaning.
const LIMIT: u64 = 8 * SEG;

/// Bounds every file this process writes to [`LIMIT`] bytes.
fn limit_file_size() {
    static LIMIT_SET: Once = Once::new();
    LIMIT_SET.call_once(|| {
        let mut rlimit = rustix::process::getrlimit(rustix::process::Resource::Fsize);
        rlimit.current = Some(LIMIT);
        rustix::process::setrlimit(rustix::process::Resource::Fsize, rlimit)
            .expect("lowering the file-size limit");
    });
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temporary directory")
}

/// A device of `pages` pages backed by the file or block device at `path`.
fn device(path: &Path, pages: usize, dedup: bool) -> Zram {
    limit_file_size();
    Zram::new(ZramConfig {
        disksize: (pages * PAGE_SIZE) as u64,
        backing_dev: Some(path.to_owned()),
        writeback_batch_size: 16,
        dedup,
        auto_compact: None,
        ..ZramConfig::default()
    })
    .expect("a device on the backing file")
}

/// A device of `pages` pages backed by a fresh file in `dir`.
fn file_device(dir: &Path, pages: usize, dedup: bool) -> Zram {
    let path = dir.join("backing");
    std::fs::File::create(&path).expect("backing file");
    device(&path, pages, dedup)
}

/// Page `p`'s bytes in version `v`: incompressible, so stored raw (a page on the file).
fn page(p: usize, v: u64) -> Vec<u8> {
    random(PAGE_SIZE, (p as u64) << 20 | v)
}

fn write(zram: &Zram, p: usize, data: &[u8]) {
    zram.write((p * PAGE_SIZE) as u64, data).expect("write");
}

/// Every page reads back as `want(p)` (`None`: zeroes), without counting as an access.
fn check(zram: &Zram, pages: usize, want: impl Fn(usize) -> Option<Vec<u8>>) {
    for p in 0..pages {
        let mut out = vec![0xEE; PAGE_SIZE];
        zram.inspect((p * PAGE_SIZE) as u64, &mut out)
            .unwrap_or_else(|e| panic!("page {p}: {e}"));
        let want = want(p).unwrap_or_else(|| vec![0; PAGE_SIZE]);
        assert!(out == want, "page {p} read back wrong bytes");
    }
}

fn written_back(zram: &Zram, pages: std::ops::Range<usize>) -> Vec<usize> {
    pages
        .filter(|&p| zram.slot(p).expect("slot").flags.contains(Flags::WB))
        .collect()
}

/// After every page is discarded, the store holds nothing: no object was leaked.
fn discard_all_and_check_empty(zram: &Zram, pages: usize) {
    zram.discard(0, (pages * PAGE_SIZE) as u64)
        .expect("discard");
    let s = zram.backing_stats().expect("a backing store");
    assert_eq!(s.live_bytes, 0, "objects left on the file: {s:?}");
    assert_eq!(zram.bd_stat().bd_count, 0);
}

#[test]
fn a_full_store_of_sparse_segments_takes_new_writebacks() {
    let dir = tempdir();
    fill_clean_refill(&file_device(dir.path(), FULL_PAGES, false));
}

#[test]
fn a_full_block_device_of_sparse_segments_takes_new_writebacks() {
    let dir = tempdir();
    let loop_device = match loopdev::attach(&dir.path().join("image"), LIMIT as usize) {
        Ok(device) => device,
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    let zram = device(Path::new(&loop_device.0), FULL_PAGES, false);
    fill_clean_refill(&zram);
    drop(zram);
    drop(loop_device);
}

/// Pages of the devices [`fill_clean_refill`] works on: twice what the store holds.
const FULL_PAGES: usize = 4096;

/// Fills the store of `zram` (8 segments) with written-back pages, discards three of four,
/// and writes back as many new pages again: cleaning makes the room.
fn fill_clean_refill(zram: &Zram) {
    const PAGES: usize = FULL_PAGES;
    let all = WritebackRequest::mode(Mode::Any);
    for p in 0..PAGES / 2 {
        write(zram, p, &page(p, 0));
    }
    // Seven segments of 256 raw pages take appends; the eighth is kept for cleaning.
    let full = zram.writeback(&all).expect_err("2048 pages fill the store");
    assert_eq!(full.errno(), libc::ENOSPC, "{full}");
    let first = written_back(zram, 0..PAGES / 2);
    assert!(
        (7 * 256 - 16..=7 * 256).contains(&first.len()),
        "{} pages written back",
        first.len()
    );
    // Three of every four written-back pages go: each segment keeps a quarter of its
    // objects, none is empty, so without cleaning no segment could be reused.
    let kept: Vec<usize> = first.iter().copied().step_by(4).collect();
    for &p in first.iter().filter(|p| !kept.contains(p)) {
        zram.discard((p * PAGE_SIZE) as u64, PAGE_SIZE as u64)
            .expect("discard");
    }
    let before = zram.backing_stats().expect("a backing store");
    assert!(before.file_bytes >= 7 * SEG, "{before:?}");
    for p in PAGES / 2..PAGES {
        write(zram, p, &page(p, 1));
    }
    // The pass writes back the first half's 256 pages the first pass left in memory, then
    // the new ones, until the store is full again: of live objects this time (the live
    // quarter moved out of the segments it kept), but for less than a segment (cleaning
    // gives room back in whole segments, and one stays kept back).
    let full = zram.writeback(&all).expect_err("the store fills up again");
    assert_eq!(full.errno(), libc::ENOSPC, "{full}");
    let after = zram.backing_stats().expect("a backing store");
    assert_eq!(after.file_bytes, 7 * SEG, "{after:?}");
    assert!(after.live_bytes > 6 * SEG, "{after:?}");
    assert!(after.moved_bytes >= 6 * 64 * PAGE_SIZE as u64, "{after:?}");
    assert_eq!(zram.bd_stat().bd_count, after.live_bytes / PAGE_SIZE as u64);
    // Without cleaning the store would have taken none of them.
    assert!(written_back(zram, PAGES / 2..PAGES).len() >= 3 * 256);
    let first_half = written_back(zram, 0..PAGES / 2);
    assert!(kept.iter().all(|p| first_half.contains(p)));
    let discarded = |p: usize| p < PAGES / 2 && first.contains(&p) && !kept.contains(&p);
    check(zram, PAGES, |p| match p {
        p if discarded(p) => None,
        p if p < PAGES / 2 => Some(page(p, 0)),
        p => Some(page(p, 1)),
    });
    discard_all_and_check_empty(zram, PAGES);
}

#[test]
fn slots_sharing_a_written_back_object_move_together() {
    let dir = tempdir();
    const PAGES: usize = 1024;
    let zram = file_device(dir.path(), PAGES, true);
    // Pages 0..32 hold one page's bytes (one object with inline deduplication); the rest
    // their own.
    let shared = page(0, 7);
    let want = |p: usize| if p < 32 { shared.clone() } else { page(p, 0) };
    for p in 0..PAGES {
        write(&zram, p, &want(p));
    }
    let report = zram
        .writeback(&WritebackRequest::mode(Mode::Any))
        .expect("writeback");
    assert_eq!((report.slots, report.shared), (PAGES as u64, 31));
    let old = zram.slot(0).expect("slot").handle;
    assert!((0..32).all(|p| zram.slot(p).expect("slot").handle == old));
    // Every page but the shared ones and each 16th goes: all sealed segments are sparse.
    let kept = |p: usize| p < 32 || p.is_multiple_of(16);
    for p in (0..PAGES).filter(|&p| !kept(p)) {
        zram.discard((p * PAGE_SIZE) as u64, PAGE_SIZE as u64)
            .expect("discard");
    }
    let before = zram.backing_stats().expect("a backing store");
    let cleaned = zram.clean_backing().expect("clean");
    let after = zram.backing_stats().expect("a backing store");
    assert!(cleaned.segments >= 3, "{cleaned:?}");
    assert!(cleaned.slots > cleaned.objects, "{cleaned:?}");
    assert_eq!(cleaned.bytes, after.moved_bytes);
    assert_eq!(after.live_bytes, before.live_bytes, "moved, not copied");
    assert!(
        after.file_bytes < before.file_bytes,
        "{before:?} -> {after:?}"
    );
    let new = zram.slot(0).expect("slot").handle;
    assert_ne!(new, old, "the shared object moved");
    assert!((0..32).all(|p| zram.slot(p).expect("slot").handle == new));
    assert_eq!(
        zram.bd_stat().bd_count,
        (0..PAGES).filter(|&p| kept(p)).count() as u64
    );
    check(&zram, PAGES, |p| kept(p).then(|| want(p)));
    // Moved objects fill the open segment's rest, which may itself be sparse once sealed:
    // passes again move less and less, until nothing.
    let mut last = cleaned.objects;
    for _ in 0..5 {
        let again = zram.clean_backing().expect("clean").objects;
        assert!(again < last, "{again} objects moved after {last}");
        last = again;
        if last == 0 {
            break;
        }
    }
    assert_eq!(last, 0, "cleaning did not settle");
    check(&zram, PAGES, |p| kept(p).then(|| want(p)));
    discard_all_and_check_empty(&zram, PAGES);
}

#[test]
fn cleaning_races_writes_discards_and_reads_without_losing_data() {
    let dir = tempdir();
    const PAGES: usize = 1536;
    let zram = file_device(dir.path(), PAGES, false);
    for p in 0..PAGES {
        write(&zram, p, &page(p, 0));
    }
    zram.writeback(&WritebackRequest::mode(Mode::Any))
        .expect("writeback");
    let stop = std::sync::atomic::AtomicBool::new(false);
    let rounds = std::sync::atomic::AtomicU64::new(0);
    let versions = std::thread::scope(|s| {
        let (zram, stop, rounds) = (&zram, &stop, &rounds);
        let writer = s.spawn(move || {
            // Rewrites, discards (twice as often) and reads pages at random, checking what
            // it reads.
            let mut versions = vec![Some(0u64); PAGES];
            let mut state = 0x9e37_79b9_7f4a_7c15u64;
            for round in 1..=1_000_000u64 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                rounds.store(round, std::sync::atomic::Ordering::Relaxed);
                let r = common::xorshift(&mut state);
                let p = (r >> 8) as usize % PAGES;
                match r % 4 {
                    0 => {
                        write(zram, p, &page(p, round));
                        versions[p] = Some(round);
                    }
                    1 | 2 => {
                        zram.discard((p * PAGE_SIZE) as u64, PAGE_SIZE as u64)
                            .expect("discard");
                        versions[p] = None;
                    }
                    _ => {
                        let mut out = vec![0; PAGE_SIZE];
                        zram.read((p * PAGE_SIZE) as u64, &mut out).expect("read");
                        let want = versions[p].map_or_else(|| vec![0; PAGE_SIZE], |v| page(p, v));
                        assert!(out == want, "page {p} read back wrong bytes");
                    }
                }
            }
            versions
        });
        let mut moved = 0;
        // Until the writer has done 30,000 steps (or 20 s have passed, whichever first).
        for _ in 0..20_000 {
            if rounds.load(std::sync::atomic::Ordering::Relaxed) >= 30_000 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
            // Either may find the other running (EAGAIN), or the store full (ENOSPC).
            if let Ok(r) = zram.clean_backing() {
                moved += r.objects;
            }
            let _either = zram.writeback(&WritebackRequest::mode(Mode::Any));
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let versions = writer.join().expect("the writer");
        assert!(moved > 0, "no pass moved anything while the writer ran");
        versions
    });
    check(&zram, PAGES, |p| versions[p].map(|v| page(p, v)));
    discard_all_and_check_empty(&zram, PAGES);
}

/// A file store whose reads, past the first quarter of each segment, fail with `EIO` while
/// `failing` is on, and return a flipped byte while `spoiling` is on.
#[derive(Debug)]
struct FlakyReads {
    inner: FileBacking,
    failing: AtomicBool,
    spoiling: AtomicBool,
}

impl Backing for FlakyReads {
    fn append(&self, objects: &[&[u8]]) -> std::io::Result<Vec<u64>> {
        self.inner.append(objects)
    }
    fn append_moved(&self, objects: &[&[u8]]) -> std::io::Result<Vec<u64>> {
        self.inner.append_moved(objects)
    }
    fn sparse(&self) -> Vec<Sparse> {
        self.inner.sparse()
    }
    fn live_in(&self, range: std::ops::Range<u64>) -> Option<u64> {
        self.inner.live_in(range)
    }
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let past = offset % SEG >= SEG / 4;
        if self.failing.load(Relaxed) && past {
            return Err(std::io::Error::from_raw_os_error(libc::EIO));
        }
        self.inner.read(offset, out)?;
        if self.spoiling.load(Relaxed) && past {
            out[0] ^= 1;
        }
        Ok(())
    }
    fn free(&self, offset: u64, len: usize) {
        self.inner.free(offset, len);
    }
    fn sync(&self) -> std::io::Result<()> {
        self.inner.sync()
    }
    fn stats(&self) -> BackingStats {
        self.inner.stats()
    }
}

#[test]
fn a_segment_not_all_of_whose_objects_read_right_is_left_whole() {
    limit_file_size();
    let dir = tempdir();
    let path = dir.path().join("backing");
    std::fs::File::create(&path).expect("backing file");
    let flaky = Arc::new(FlakyReads {
        inner: FileBacking::open(&path, FileOptions::default()).expect("open"),
        failing: AtomicBool::new(false),
        spoiling: AtomicBool::new(false),
    });
    const PAGES: usize = 2048;
    let zram = Zram::with_backing(
        ZramConfig {
            disksize: (PAGES * PAGE_SIZE) as u64,
            writeback_batch_size: 16,
            auto_compact: None,
            ..ZramConfig::default()
        },
        Some(flaky.clone()),
    )
    .expect("a device on the flaky store");
    for p in 0..PAGES {
        write(&zram, p, &page(p, 0));
    }
    let all = WritebackRequest::mode(Mode::Any);
    assert_eq!(
        zram.writeback(&all).map_err(|e| e.errno()),
        Err(libc::ENOSPC)
    );
    let first = written_back(&zram, 0..PAGES);
    let kept: Vec<usize> = first.iter().copied().step_by(4).collect();
    for &p in first.iter().filter(|p| !kept.contains(p)) {
        zram.discard((p * PAGE_SIZE) as u64, PAGE_SIZE as u64)
            .expect("discard");
    }
    // Every sealed segment keeps objects past its first quarter, which cannot be read now:
    // moving the others would use up the kept segment and give no segment back.
    flaky.failing.store(true, Relaxed);
    let r = zram.clean_backing().expect("clean");
    assert_eq!((r.objects, r.segments), (0, 0), "{r:?}");
    assert!(r.segments_left >= 6 && r.unreadable > 0, "{r:?}");
    assert_eq!(zram.backing_stats().expect("stats").moved_bytes, 0);
    // Reads work again, but bytes past each segment's first quarter are not those written
    // (the check each slot keeps), as if changed from outside: those objects are moved as
    // they are, with their check, so the segments come back and their slots still fail.
    flaky.failing.store(false, Relaxed);
    flaky.spoiling.store(true, Relaxed);
    let r = zram.clean_backing().expect("clean");
    assert!(r.segments >= 6 && r.segments_left == 0, "{r:?}");
    assert!(r.mismatched > 0 && r.unreadable == 0, "{r:?}");
    flaky.spoiling.store(false, Relaxed);
    let read = |p: usize| {
        let mut out = vec![0; PAGE_SIZE];
        let r = zram
            .read((p * PAGE_SIZE) as u64, &mut out)
            .map_err(|e| e.errno());
        r.map(|()| out)
    };
    let spoilt: Vec<usize> = kept.iter().copied().filter(|&p| read(p).is_err()).collect();
    assert_eq!(spoilt.len() as u64, r.mismatched);
    assert!(spoilt.iter().all(|&p| read(p) == Err(libc::EIO)));
    // The store takes the pages left in memory.
    zram.writeback(&all).expect("writeback after cleaning");
    assert_eq!(
        zram.bd_stat().bd_count as usize,
        kept.len() + PAGES - first.len()
    );
    for p in 0..PAGES {
        let want = match p {
            p if spoilt.contains(&p) => Err(libc::EIO),
            p if first.contains(&p) && !kept.contains(&p) => Ok(vec![0; PAGE_SIZE]),
            p => Ok(page(p, 0)),
        };
        assert!(read(p) == want, "page {p}");
    }
    discard_all_and_check_empty(&zram, PAGES);
}
