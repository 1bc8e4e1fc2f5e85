//! `FileBacking` against a real file: objects round-trip byte for byte with read-ahead on
//! and off, are packed (a 1500-byte object takes 1500 bytes of file, not a 4 KiB block),
//! emptied segments are punched out of the file and reused before it grows, cached windows
//! never serve bytes that were freed and overwritten, appended and read data leaves the
//! host's page cache, a full filesystem refuses a whole append with `ENOSPC` and keeps
//! everything before it, a file truncated behind the store's back reads as an error, and only
//! existing regular files (or block devices) are accepted.

#[path = "common/loopdev.rs"]
mod loopdev;
#[path = "common/tmpfs.rs"]
mod tmpfs;

use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, RwLock};

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use zram::backing::{Backing, FileBacking, FileOptions, MAX_OBJECT};

const SEG: usize = 128 * 1024;

/// A fresh temporary directory on the disk the build is on (not a tmpfs: the page-cache
/// and hole tests need a real filesystem).
fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temporary directory")
}

/// An empty file `name` in `dir`.
fn empty_file(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::File::create(&path).expect("create");
    path
}

fn small_segments(readahead: bool) -> FileOptions {
    FileOptions {
        readahead,
        segment_size: SEG,
        ..FileOptions::default()
    }
}

fn random_bytes(rng: &mut SmallRng, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    rng.fill(&mut v[..]);
    v
}

/// Mostly 500..4096 bytes (compressed pages), some of any size up to the largest object.
fn random_len(rng: &mut SmallRng) -> usize {
    if rng.gen_ratio(1, 10) {
        rng.gen_range(1..=MAX_OBJECT)
    } else {
        rng.gen_range(500..4096)
    }
}

/// Appends `objects` in batches of 1..=`batch` and returns their offsets.
fn append_all(b: &FileBacking, objects: &[Vec<u8>], rng: &mut SmallRng, batch: usize) -> Vec<u64> {
    let mut offsets = Vec::new();
    let mut rest = objects;
    while !rest.is_empty() {
        let n = rng.gen_range(1..=batch).min(rest.len());
        let refs: Vec<&[u8]> = rest[..n].iter().map(|o| &o[..]).collect();
        offsets.extend(b.append(&refs).expect("append"));
        rest = &rest[n..];
    }
    offsets
}

fn read_back(b: &FileBacking, offset: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0; len];
    b.read(offset, &mut out).expect("read");
    out
}

#[test]
fn random_objects_round_trip_in_random_order() {
    for readahead in [true, false] {
        let dir = tempdir();
        let path = empty_file(dir.path(), "backing");
        let b = FileBacking::open(
            &path,
            FileOptions {
                readahead,
                ..FileOptions::default()
            },
        )
        .expect("open");
        let mut rng = SmallRng::seed_from_u64(7);
        let objects: Vec<Vec<u8>> = (0..3000)
            .map(|_| {
                let len = random_len(&mut rng);
                random_bytes(&mut rng, len)
            })
            .collect();
        let offsets = append_all(&b, &objects, &mut rng, 40);
        let total: u64 = objects.iter().map(|o| o.len() as u64).sum();
        assert_eq!(b.stats().live_bytes, total);
        assert_eq!(b.stats().bytes_written, total, "each byte written once");

        let mut order: Vec<usize> = (0..objects.len()).collect();
        order.shuffle(&mut rng);
        for &i in &order {
            assert!(
                read_back(&b, offsets[i], objects[i].len()) == objects[i],
                "object {i}"
            );
        }
        // In order, neighbours come from the window their predecessor read.
        for i in 0..objects.len() {
            assert!(
                read_back(&b, offsets[i], objects[i].len()) == objects[i],
                "object {i}"
            );
        }
        let s = b.stats();
        assert_eq!(s.reads, 2 * objects.len() as u64);
        assert_eq!(s.read_errors, 0);
        if readahead {
            assert!(s.cache_hits > objects.len() as u64 / 2, "{s:?}");
        } else {
            assert_eq!(s.cache_hits, 0);
            assert_eq!(s.bytes_read, 2 * total, "exactly the objects are read");
        }
    }
}

#[test]
fn objects_are_packed_not_padded_to_blocks() {
    let dir = tempdir();
    let path = empty_file(dir.path(), "backing");
    let b = FileBacking::open(&path, FileOptions::default()).expect("open");
    let mut rng = SmallRng::seed_from_u64(1);
    let n = 5000;
    let objects: Vec<Vec<u8>> = (0..n).map(|_| random_bytes(&mut rng, 1500)).collect();
    let offsets = append_all(&b, &objects, &mut rng, 64);
    let s = b.stats();
    assert_eq!(s.live_bytes, n as u64 * 1500);
    let ratio = s.file_bytes as f64 / s.live_bytes as f64;
    assert!(
        (1.0..1.01).contains(&ratio),
        "file_bytes / live_bytes = {ratio}"
    );
    let meta = std::fs::metadata(&path).expect("metadata");
    assert!(meta.len() < n as u64 * 1510, "apparent size {}", meta.len());
    assert!(
        meta.blocks() * 512 < n as u64 * 1600,
        "allocated {}",
        meta.blocks() * 512
    );
    // Back to back: each object starts where the one before ended, but at segment starts.
    let seg = FileOptions::default().segment_size as u64;
    for w in offsets.windows(2) {
        assert!(
            w[1] == w[0] + 1500 || (w[1] % seg == 0 && w[1] > w[0]),
            "{w:?}"
        );
    }
}

#[test]
fn emptied_segments_are_punched_and_reused_before_the_file_grows() {
    let dir = tempdir();
    let path = empty_file(dir.path(), "backing");
    let b = FileBacking::open(&path, small_segments(true)).expect("open");
    let mut rng = SmallRng::seed_from_u64(2);
    let per_seg = SEG / 1500; // 87
    let objects: Vec<Vec<u8>> = (0..3 * per_seg + 39)
        .map(|_| random_bytes(&mut rng, 1500))
        .collect();
    let offsets = append_all(&b, &objects, &mut rng, 20);
    let blocks_before = std::fs::metadata(&path).expect("metadata").blocks();
    let len_before = std::fs::metadata(&path).expect("metadata").len();
    assert_eq!(len_before, 3 * SEG as u64 + 39 * 1500);

    // Empty segments 0 and 1; segment 3 (open) keeps its objects, segment 2 too.
    for (&offset, o) in offsets.iter().zip(&objects) {
        if offset < 2 * SEG as u64 {
            b.free(offset, o.len());
        }
    }
    let s = b.stats();
    assert_eq!(s.segments_punched, 2);
    assert_eq!(s.live_bytes, (per_seg + 39) as u64 * 1500);
    assert_eq!(s.file_bytes, SEG as u64 + 39 * 1500);
    let blocks_after = std::fs::metadata(&path).expect("metadata").blocks();
    // Two segments of data blocks went; the filesystem may have taken one block back for
    // its own bookkeeping of the now split extents (ext4's extent tree block, 8 sectors:
    // seen once on a fragmented disk, 888 → 384).
    assert!(
        blocks_before - blocks_after >= 2 * SEG as u64 / 512 - 8,
        "allocated blocks {blocks_before} → {blocks_after}"
    );

    // New objects fill the open segment, then segments 0 and 1: the file does not grow.
    let fresh: Vec<Vec<u8>> = (0..3 * per_seg - 39)
        .map(|_| random_bytes(&mut rng, 1500))
        .collect();
    let new_offsets = append_all(&b, &fresh, &mut rng, 20);
    let (in_open, reused) = new_offsets.split_at(per_seg - 39);
    assert!(
        in_open
            .iter()
            .all(|&o| (3 * SEG as u64..4 * SEG as u64).contains(&o))
    );
    assert!(reused.iter().all(|&o| o < 2 * SEG as u64), "{reused:?}");
    assert_eq!(reused[0], 0, "the lowest free segment first");
    assert!(std::fs::metadata(&path).expect("metadata").len() <= 4 * SEG as u64);
    for (&offset, o) in new_offsets.iter().zip(&fresh) {
        assert!(read_back(&b, offset, o.len()) == *o);
    }
    for (&offset, o) in offsets
        .iter()
        .zip(&objects)
        .filter(|(off, _)| **off >= 2 * SEG as u64)
    {
        assert!(read_back(&b, offset, o.len()) == *o);
    }
}

#[test]
fn cached_windows_never_serve_freed_and_overwritten_bytes() {
    let dir = tempdir();
    let path = empty_file(dir.path(), "backing");
    let b = FileBacking::open(&path, small_segments(true)).expect("open");
    let mut rng = SmallRng::seed_from_u64(3);
    let per_seg = SEG / 1500;
    let old: Vec<Vec<u8>> = (0..per_seg + 10)
        .map(|_| random_bytes(&mut rng, 1500))
        .collect();
    let offsets = append_all(&b, &old, &mut rng, 16);
    assert!(read_back(&b, offsets[5], 1500) == old[5]);
    let hits = b.stats().cache_hits;
    assert!(read_back(&b, offsets[6], 1500) == old[6]);
    assert_eq!(b.stats().cache_hits, hits + 1, "segment 0 is cached");

    for &offset in &offsets[..per_seg] {
        b.free(offset, 1500);
    }
    let new: Vec<Vec<u8>> = (0..2 * per_seg - 10)
        .map(|_| random_bytes(&mut rng, 1500))
        .collect();
    let new_offsets = append_all(&b, &new, &mut rng, 16);
    let i = new_offsets
        .iter()
        .position(|&o| o == offsets[6])
        .expect("space reused");
    assert!(
        read_back(&b, offsets[6], 1500) == new[i],
        "stale bytes from the cache"
    );
    for (&offset, o) in new_offsets.iter().zip(&new) {
        assert!(read_back(&b, offset, 1500) == *o);
    }
}

/// Bytes of `path` in the page cache, by `fincore`; `None` if there is no `fincore`.
fn resident_bytes(path: &Path) -> Option<u64> {
    let out = Command::new("fincore")
        .args(["--bytes", "--noheadings", "--output", "RES"])
        .arg(path)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "fincore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .expect("a byte count"),
    )
}

#[test]
fn appended_and_read_data_leaves_the_page_cache() {
    let dir = tempdir();
    let path = empty_file(dir.path(), "backing");
    let b = FileBacking::open(&path, FileOptions::default()).expect("open");
    let mut rng = SmallRng::seed_from_u64(4);
    let objects: Vec<Vec<u8>> = (0..2048).map(|_| random_bytes(&mut rng, 4096)).collect();
    let offsets = append_all(&b, &objects, &mut rng, 64);
    let Some(after_append) = resident_bytes(&path) else {
        println!("SKIPPED: fincore not found");
        return;
    };
    assert_eq!(std::fs::metadata(&path).expect("metadata").len(), 8 << 20);
    assert!(
        after_append <= 4096,
        "{after_append} bytes resident after appending 8 MiB"
    );
    for (&offset, o) in offsets.iter().zip(&objects) {
        assert!(read_back(&b, offset, o.len()) == *o);
    }
    let after_reads = resident_bytes(&path).expect("fincore");
    assert!(
        after_reads <= 4096,
        "{after_reads} bytes resident after reading 8 MiB"
    );
    // Object by object without the store's readahead: the kernel's own readahead must not
    // leave the pages after each object cached either.
    b.set_readahead(false);
    for (&offset, o) in offsets.iter().zip(&objects).take(256) {
        assert!(read_back(&b, offset, o.len()) == *o);
    }
    let after_plain = resident_bytes(&path).expect("fincore");
    assert!(
        after_plain <= 4096,
        "{after_plain} bytes resident after reading 1 MiB object by object"
    );
}

/// A segment kept by a few live objects holds only their pages on disk: once the others
/// are freed, the pages no live object lies on are punched out at once. Before, the file
/// kept every sealed segment's whole extent until its last object went (an adversarial run
/// saw 60 MiB on disk for 480 KiB live).
#[test]
fn freed_pages_of_kept_segments_leave_the_disk() {
    let dir = tempdir();
    let path = empty_file(dir.path(), "backing");
    let b = FileBacking::open(&path, small_segments(false)).expect("open");
    let mut rng = SmallRng::seed_from_u64(11);
    // 16 segments of 3000-byte objects.
    let objects: Vec<Vec<u8>> = (0..700).map(|_| random_bytes(&mut rng, 3000)).collect();
    let offsets = append_all(&b, &objects, &mut rng, 8);
    b.sync().unwrap();
    let on_disk = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
    let full = on_disk(&path);
    assert!(full >= 15 * SEG as u64, "{full} bytes on disk");
    // Every 20th object stays.
    for (i, (&offset, o)) in offsets.iter().zip(&objects).enumerate() {
        if i % 20 != 0 {
            b.free(offset, o.len());
        }
    }
    let kept = on_disk(&path);
    let s = b.stats();
    println!(
        "on disk: {full} bytes full, {kept} bytes with {} of them live",
        s.live_bytes
    );
    assert!(s.pages_punched > 0, "{s:?}");
    assert!(
        kept * 4 < full,
        "{kept} bytes on disk of {full}, {} live",
        s.live_bytes
    );
    for (&offset, o) in offsets.iter().zip(&objects).step_by(20) {
        assert!(read_back(&b, offset, o.len()) == *o, "object at {offset}");
    }
}

#[test]
fn a_full_filesystem_refuses_whole_appends_and_keeps_the_rest() {
    let dir = tempdir();
    let mount = match tmpfs::mount_tmpfs(dir.path(), "2M") {
        Ok(m) => m,
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    let path = empty_file(&mount.0, "backing");
    let b = FileBacking::open(&path, small_segments(true)).expect("open");
    let mut rng = SmallRng::seed_from_u64(5);
    let mut stored: Vec<(u64, Vec<u8>)> = Vec::new();
    let error = loop {
        assert!(stored.len() < 10_000, "2 MiB never filled up");
        let batch: Vec<Vec<u8>> = (0..16).map(|_| random_bytes(&mut rng, 3000)).collect();
        let refs: Vec<&[u8]> = batch.iter().map(|o| &o[..]).collect();
        let live = b.stats().live_bytes;
        match b.append(&refs) {
            Ok(offsets) => stored.extend(offsets.into_iter().zip(batch)),
            Err(e) => {
                assert_eq!(b.stats().live_bytes, live, "a failed append takes nothing");
                break e;
            }
        }
    };
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
    assert!(
        stored.len() * 3000 > 1 << 20,
        "only {} objects fit",
        stored.len()
    );
    assert_eq!(b.stats().write_errors, 1);
    for (offset, o) in &stored {
        assert!(read_back(&b, *offset, o.len()) == *o, "object at {offset}");
    }

    // Emptying the first two segments gives their memory back to the filesystem.
    let (freed, kept): (Vec<_>, Vec<_>) = stored
        .into_iter()
        .partition(|(off, _)| *off < 2 * SEG as u64);
    let punched = b.stats().segments_punched;
    for (offset, o) in &freed {
        b.free(*offset, o.len());
    }
    assert_eq!(b.stats().segments_punched, punched + 2);
    let batch: Vec<Vec<u8>> = (0..16).map(|_| random_bytes(&mut rng, 3000)).collect();
    let refs: Vec<&[u8]> = batch.iter().map(|o| &o[..]).collect();
    let offsets = b.append(&refs).expect("append after freeing");
    // The store left the segment its write failed in (where a block device's bad region
    // would fail it again) for the lowest free one.
    assert!(
        offsets.iter().all(|&o| o < 2 * SEG as u64),
        "appended at {offsets:?}"
    );
    for (offset, o) in offsets
        .iter()
        .zip(&batch)
        .chain(kept.iter().map(|(off, o)| (off, o)))
    {
        assert!(read_back(&b, *offset, o.len()) == *o, "object at {offset}");
    }
    drop(b);
    drop(mount);
}

#[test]
fn a_block_device_has_fixed_room_and_is_never_punched() {
    let dir = tempdir();
    let device = match loopdev::attach(&dir.path().join("image"), 8 * SEG) {
        Ok(device) => device,
        Err(why) => {
            println!("SKIPPED: {why}");
            return;
        }
    };
    // A block device held by someone else (as a mounted one is) is refused, and one the
    // store holds cannot be taken by anyone else: both open it exclusively.
    let exclusive = || {
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_EXCL)
            .open(&device.0)
    };
    let holder = exclusive().expect("an exclusive open of the fresh loop device");
    let busy = FileBacking::open(Path::new(&device.0), small_segments(true)).unwrap_err();
    assert_eq!(busy.raw_os_error(), Some(libc::EBUSY), "{busy}");
    drop(holder);
    let b = FileBacking::open(Path::new(&device.0), small_segments(true)).expect("open");
    let taken = exclusive().unwrap_err();
    assert_eq!(taken.raw_os_error(), Some(libc::EBUSY), "{taken}");
    let mut rng = SmallRng::seed_from_u64(9);
    let mut stored: Vec<(u64, Vec<u8>)> = Vec::new();
    let error = loop {
        assert!(stored.len() < 1000, "8 segments never filled up");
        let batch: Vec<Vec<u8>> = (0..10).map(|_| random_bytes(&mut rng, 3000)).collect();
        let refs: Vec<&[u8]> = batch.iter().map(|o| &o[..]).collect();
        match b.append(&refs) {
            Ok(offsets) => stored.extend(offsets.into_iter().zip(batch)),
            Err(e) => break e,
        }
    };
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
    // 43 objects of 3000 bytes fit in a segment; batches of 10 fill the 7 segments appends
    // may take but the last.
    assert!(stored.len() >= 6 * 43, "only {} objects fit", stored.len());
    assert!(stored.iter().all(|(off, _)| *off + 3000 <= 7 * SEG as u64));
    assert_eq!(b.stats().write_errors, 1);
    // The eighth is kept for objects moved out of sparse segments.
    let moved: Vec<Vec<u8>> = (0..10).map(|_| random_bytes(&mut rng, 3000)).collect();
    let refs: Vec<&[u8]> = moved.iter().map(|o| &o[..]).collect();
    let offsets = b
        .append_moved(&refs)
        .expect("moved objects take the kept segment");
    assert!(offsets.iter().all(|&o| o + 3000 <= 8 * SEG as u64));
    assert_eq!(b.stats().moved_bytes, 30_000);
    stored.extend(offsets.into_iter().zip(moved));
    for (offset, o) in &stored {
        assert!(read_back(&b, *offset, o.len()) == *o, "object at {offset}");
    }
    for (offset, o) in stored.iter().filter(|(off, _)| *off < SEG as u64) {
        b.free(*offset, o.len());
    }
    assert_eq!(b.stats().segments_punched, 0);
    let batch: Vec<Vec<u8>> = (0..10).map(|_| random_bytes(&mut rng, 3000)).collect();
    let refs: Vec<&[u8]> = batch.iter().map(|o| &o[..]).collect();
    let offsets = b.append(&refs).expect("append after freeing a segment");
    for (offset, o) in offsets.iter().zip(&batch) {
        assert!(read_back(&b, *offset, o.len()) == *o, "object at {offset}");
    }
    drop(b);
    drop(device);
}

#[test]
fn a_truncated_file_reads_as_an_error_not_as_zeroes() {
    for readahead in [true, false] {
        let dir = tempdir();
        let path = empty_file(dir.path(), "backing");
        let b = FileBacking::open(&path, small_segments(readahead)).expect("open");
        let mut rng = SmallRng::seed_from_u64(6);
        let objects: Vec<Vec<u8>> = (0..200).map(|_| random_bytes(&mut rng, 2000)).collect();
        let offsets = append_all(&b, &objects, &mut rng, 8);
        let cut = SEG as u64 + 10_000;
        std::fs::OpenOptions::new()
            .write(true)
            .open(&path)
            .and_then(|f| f.set_len(cut))
            .expect("truncate");
        // Those before the cut read back, those past it are an error.
        let check = |when: &str| {
            for (&offset, o) in offsets.iter().zip(&objects) {
                let mut out = vec![0; o.len()];
                let result = b.read(offset, &mut out);
                if offset + o.len() as u64 <= cut {
                    result.expect("an object before the cut");
                    assert!(out == *o);
                } else {
                    let e = result.expect_err(when);
                    assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "{e}");
                }
            }
        };
        check("an object past the cut");
        let past = offsets.iter().filter(|&&o| o + 2000 > cut).count() as u64;
        assert_eq!(b.stats().read_errors, past);
        // The store's next appends grow the file back over the cut (a hole, zeroes): the
        // objects that were past it still read as an error, never as those zeroes; the new
        // ones read back.
        let more: Vec<Vec<u8>> = (0..100).map(|_| random_bytes(&mut rng, 2000)).collect();
        let new_offsets = append_all(&b, &more, &mut rng, 8);
        let grown = std::fs::metadata(&path).unwrap().len();
        assert!(grown > cut, "the file grew back to {grown}");
        check("an object past the cut, after the file grew back");
        for (&offset, o) in new_offsets.iter().zip(&more) {
            assert!(read_back(&b, offset, o.len()) == *o, "at {offset}");
        }
        // Freeing the lost objects gives their segments back to later appends.
        for (&offset, o) in offsets.iter().zip(&objects) {
            b.free(offset, o.len());
        }
        let last: Vec<Vec<u8>> = (0..200).map(|_| random_bytes(&mut rng, 2000)).collect();
        for (&offset, o) in append_all(&b, &last, &mut rng, 8).iter().zip(&last) {
            assert!(read_back(&b, offset, o.len()) == *o, "object at {offset}");
        }
    }
}

#[test]
fn only_existing_regular_files_and_block_devices_are_accepted() {
    let dir = tempdir();
    let e = FileBacking::open(dir.path(), FileOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "{e}");
    let e = FileBacking::open(&dir.path().join("missing"), FileOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    let e = FileBacking::open(Path::new("/dev/null"), FileOptions::default()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "a character device: {e}");
    let path = empty_file(dir.path(), "backing");
    let tiny = FileOptions {
        segment_size: 64 * 1024,
        ..FileOptions::default()
    };
    let e = FileBacking::open(&path, tiny).unwrap_err();
    assert_eq!(
        e.kind(),
        ErrorKind::InvalidInput,
        "segments below the largest object: {e}"
    );

    // An existing file's contents are scratch.
    std::fs::write(&path, [7u8; 10_000]).expect("write");
    let b = FileBacking::open(&path, FileOptions::default()).expect("open");
    assert_eq!(std::fs::metadata(&path).expect("metadata").len(), 0);
    let e = b.append(&[b"ok", b""]).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput, "an empty object: {e}");
    let big = vec![1u8; MAX_OBJECT + 1];
    assert_eq!(
        b.append(&[&big]).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!((b.stats().write_errors, b.stats().live_bytes), (2, 0));
    assert_eq!(b.append(&[&big[1..]]).expect("the largest object"), [0]);
}

#[test]
fn reads_race_appends_and_frees_without_stale_bytes() {
    let dir = tempdir();
    let path = empty_file(dir.path(), "backing");
    let options = FileOptions {
        cache_windows: 64,
        readahead_window: 16 * 1024,
        ..small_segments(true)
    };
    let b = Arc::new(FileBacking::open(&path, options).expect("open"));
    // The live objects; a reader holds the read lock while it reads one, so it is not freed
    // under it, while appends (and the space they reuse) race with the reads.
    let live: Arc<RwLock<HashMap<u64, Vec<u8>>>> = Arc::default();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|t| {
            let (b, live, done) = (b.clone(), live.clone(), done.clone());
            std::thread::spawn(move || {
                let mut rng = SmallRng::seed_from_u64(100 + t);
                let mut checked = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let live = live.read().expect("lock");
                    let keys: Vec<u64> = live.keys().copied().take(64).collect();
                    for _ in 0..8 {
                        let Some(&offset) = keys.get(rng.gen_range(0..keys.len().max(1))) else {
                            break;
                        };
                        let o = &live[&offset];
                        assert!(read_back(&b, offset, o.len()) == *o, "object at {offset}");
                        checked += 1;
                    }
                }
                checked
            })
        })
        .collect();
    let mut rng = SmallRng::seed_from_u64(8);
    for _ in 0..1500 {
        let batch: Vec<Vec<u8>> = (0..rng.gen_range(1..8))
            .map(|_| {
                let len = rng.gen_range(500..4096);
                random_bytes(&mut rng, len)
            })
            .collect();
        let refs: Vec<&[u8]> = batch.iter().map(|o| &o[..]).collect();
        let offsets = b.append(&refs).expect("append");
        let mut live = live.write().expect("lock");
        live.extend(offsets.into_iter().zip(batch));
        while live.len() > 150 {
            let &victim = live.keys().next().expect("an object");
            let o = live.remove(&victim).expect("held");
            b.free(victim, o.len());
        }
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let checked: u64 = readers.into_iter().map(|r| r.join().expect("reader")).sum();
    assert!(checked > 100, "only {checked} reads");
    let s = b.stats();
    assert!(s.segments_punched > 10 && s.cache_hits > 0, "{s:?}");
    let held: u64 = live
        .read()
        .expect("lock")
        .values()
        .map(|o| o.len() as u64)
        .sum();
    assert_eq!(s.live_bytes, held);
}

#[test]
fn a_file_backs_one_store_at_a_time() {
    let dir = tempdir();
    let path = empty_file(dir.path(), "backing");
    let first = FileBacking::open(&path, FileOptions::default()).expect("open");
    let err = FileBacking::open(&path, FileOptions::default()).expect_err("second store");
    assert_eq!(err.kind(), ErrorKind::ResourceBusy, "{err}");
    // The device reports it as the kernel does a claimed backing device.
    let device = zram::Zram::new(zram::ZramConfig {
        disksize: 1 << 20,
        backing_dev: Some(path.clone()),
        ..zram::ZramConfig::default()
    });
    assert_eq!(device.expect_err("claimed").errno(), libc::EBUSY);
    drop(first);
    FileBacking::open(&path, FileOptions::default()).expect("free again once the first is gone");
}
