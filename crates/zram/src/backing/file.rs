//! [`FileBacking`]: written-back objects packed in a log in a regular file or a block
//! device (the kernel's `backing_dev`, which it treats as scratch: a regular file is
//! emptied on open).
//!
//! # Layout
//!
//! Not a 4 KiB block per page: the file is cut into segments of
//! [`FileOptions::segment_size`], and objects are appended back to back (no padding) into the
//! open segment; an object never straddles a segment boundary (the rest of a segment it does
//! not fit in is left unused, and the next segment opened). An object's offset in the file
//! is its name. A sealed segment with no live object left is punched out of a regular file
//! (`fallocate(PUNCH_HOLE | KEEP_SIZE)`) and put on the free list; appends take free
//! segments, the lowest first, before growing the file. A block device has
//! `size / segment_size` segments and refuses an append that needs more with `ENOSPC`; so
//! does a regular file that cannot be truncated (`ENOSYS`, as a FUSE-served disk image).
//! A segment is reused only once its last object is freed, so such a bounded store keeps
//! one segment back for cleaning (objects moved out of the sparse segments
//! [`Backing::sparse`] names, by [`Backing::append_moved`]). (`segments` keeps this
//! bookkeeping.)
//!
//! # I/O
//!
//! One append is one `pwrite` per run of objects that lie back to back (gathered into one
//! buffer), then `fdatasync`, then `posix_fadvise(DONTNEED)` on the pages written, so that
//! written-back data does not stay in the host's memory. Reads `pread`, then drop what they
//! read from the page cache likewise (the file is opened for random access, so the kernel
//! reads nothing ahead of its own). With [`FileOptions::readahead`], a read that misses
//! the store's own cache reads the window of [`FileOptions::readahead_window`] bytes that
//! starts at the object (clipped to its segment's used bytes: objects written back
//! together lie together, so a pass over them misses once per window) and keeps it in an
//! LRU of
//! [`FileOptions::cache_windows`] windows (`cache`, which also says how windows are
//! kept from going stale).
//!
//! # Locking
//!
//! The allocation lock (`segments`) is held only to reserve, release and look up space; the
//! cache lock only to look up, insert and invalidate windows. No I/O is done under either,
//! and neither is taken while the other is held. Reads from several threads run at once.

use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom};
use std::num::NonZeroU64;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use rustix::fs::{Advice, FallocateFlags};

use super::cache::Cache;
use super::segments::{Reservation, Segments};
use super::{Backing, BackingStats, MAX_OBJECT, MAX_OFFSET, Sparse, check_objects, os_error};
use crate::PAGE_SIZE;

/// Settings of a [`FileBacking`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileOptions {
    /// Read a whole window around an object that misses the cache, and keep the window
    /// (default on).
    pub readahead: bool,
    /// Bytes of a read-ahead window (default 256 KiB).
    pub readahead_window: usize,
    /// Windows kept (default 8); 0 keeps none, as if `readahead` were off.
    pub cache_windows: usize,
    /// Bytes of a segment (default 1 MiB): a multiple of 4 KiB, at least 128 KiB (the
    /// largest object).
    pub segment_size: usize,
}

impl Default for FileOptions {
    fn default() -> Self {
        Self {
            readahead: true,
            readahead_window: 256 * 1024,
            cache_windows: 8,
            segment_size: 1024 * 1024,
        }
    }
}

impl FileOptions {
    /// `InvalidInput` unless the settings are usable.
    fn check(&self) -> io::Result<()> {
        let invalid = |what: String| Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        if self.segment_size < MAX_OBJECT || !self.segment_size.is_multiple_of(PAGE_SIZE) {
            return invalid(format!(
                "segment_size {} must be a multiple of {PAGE_SIZE} of at least {MAX_OBJECT}",
                self.segment_size
            ));
        }
        if self.readahead && self.readahead_window == 0 {
            return invalid("readahead_window must not be 0".into());
        }
        Ok(())
    }
}

/// What the store lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A regular file: grows as needed, punched where segments are freed.
    File,
    /// A block device: a fixed number of segments, never punched.
    BlockDevice,
}

/// Counters of events, counted where they happen.
#[derive(Debug, Default)]
struct Counters {
    bytes_written: AtomicU64,
    bytes_read: AtomicU64,
    reads: AtomicU64,
    cache_hits: AtomicU64,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    segments_punched: AtomicU64,
    pages_punched: AtomicU64,
    moved_bytes: AtomicU64,
}

/// A [`Backing`] in a regular file or a block device (see the module's doc).
#[derive(Debug)]
pub struct FileBacking {
    file: File,
    kind: Kind,
    options: FileOptions,
    /// Readahead on read-back now (starts as `options.readahead`).
    readahead: std::sync::atomic::AtomicBool,
    segments: Mutex<Segments>,
    cache: Mutex<Cache>,
    counters: Counters,
    /// The end of the furthest bytes written (a regular file shorter than that was cut by
    /// someone else).
    written_end: AtomicU64,
}

impl FileBacking {
    /// Opens the existing regular file or block device at `path` as an empty store (a
    /// regular file is truncated to nothing; one that cannot be truncated keeps its size,
    /// which then bounds the store as a block device's does). `NotFound` if there is nothing there,
    /// `InvalidInput` for a directory or any other kind of file, or for bad `options`.
    pub fn open(path: &Path, options: FileOptions) -> io::Result<Self> {
        options.check()?;
        let kind = kind_of(&std::fs::metadata(path)?.file_type())?;
        // A block device is opened exclusively, as the kernel opens `backing_dev`: one that
        // is mounted or held by another program (another device node of the same disk
        // included) is `EBUSY` instead of written over. (Linux ignores `O_EXCL` without
        // `O_CREAT` on other files; regular files are locked below.)
        let exclusive = match kind {
            Kind::BlockDevice => libc::O_EXCL,
            Kind::File => 0,
        };
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(exclusive)
            .open(path)?;
        // One store per file: a second device (or a device re-made while a pass of the old
        // one still runs) would overwrite and punch the first one's objects.
        if let Err(e) =
            rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
        {
            return Err(if e == rustix::io::Errno::WOULDBLOCK {
                io::Error::new(
                    io::ErrorKind::ResourceBusy,
                    "it is the backing file of another device",
                )
            } else {
                e.into()
            });
        }
        // The path may have been replaced between the look and the open.
        if kind_of(&file.metadata()?.file_type())? != kind {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "it changed kind while being opened",
            ));
        }
        let segment_size = options.segment_size as u64;
        let capacity = match kind {
            Kind::File => match file.set_len(0) {
                // The process's file-size limit (`RLIMIT_FSIZE`: a unit's `LimitFSIZE=`, a
                // shell's `ulimit -f`) bounds the file: past it a write would end the process
                // by SIGXFSZ, or fail with `EFBIG` where that is ignored; within the whole
                // segments below it an append that finds no room is `ENOSPC`, as on a full
                // disk.
                Ok(()) => rustix::process::getrlimit(rustix::process::Resource::Fsize)
                    .current
                    .map(|limit| usize::try_from(limit / segment_size).unwrap_or(usize::MAX)),
                // A file that cannot be resized (a disk image served through FUSE, say) keeps
                // its size: its whole segments are the store's room, as a block device's.
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EOPNOTSUPP)) => {
                    let size = file.metadata()?.len();
                    Some(usize::try_from(size / segment_size).unwrap_or(usize::MAX))
                }
                Err(e) => return Err(e),
            },
            Kind::BlockDevice => {
                let size = file.seek(SeekFrom::End(0))?;
                Some(usize::try_from(size / segment_size).unwrap_or(usize::MAX))
            }
        };
        // Offsets stay below `MAX_OFFSET` (16 TiB), what a written-back slot keeps of one.
        let most = usize::try_from(MAX_OFFSET / segment_size).unwrap_or(usize::MAX);
        let capacity = Some(capacity.map_or(most, |c| c.min(most)));
        // The store reads ahead itself (or not, as set): the kernel's own readahead would
        // leave neighbouring bytes in the page cache after every read.
        let _advice_only = rustix::fs::fadvise(&file, 0, None, Advice::Random);
        Ok(Self {
            file,
            kind,
            options,
            readahead: std::sync::atomic::AtomicBool::new(options.readahead),
            segments: Mutex::new(Segments::new(segment_size, capacity)),
            cache: Mutex::new(Cache::new(options.cache_windows)),
            counters: Counters::default(),
            written_end: AtomicU64::new(0),
        })
    }

    /// The settings it was opened with.
    pub fn options(&self) -> FileOptions {
        self.options
    }

    /// Turns readahead on read-back on or off; off also empties the read-back cache, so
    /// every later read goes to the file.
    pub fn set_readahead(&self, on: bool) {
        self.readahead.store(on, Relaxed);
        if !on {
            self.cache.lock().invalidate(0, u64::MAX);
        }
    }

    /// Writes the runs of a reservation and syncs them.
    fn write(&self, objects: &[&[u8]], res: &Reservation) -> io::Result<()> {
        let mut gathered = Vec::new();
        for run in &res.runs {
            let parts = &objects[run.first..run.first + run.count];
            let bytes = if let [one] = parts {
                one
            } else {
                gathered.clear();
                parts.iter().for_each(|p| gathered.extend_from_slice(p));
                &gathered[..]
            };
            self.write_all_at(bytes, run.offset)?;
        }
        rustix::fs::fdatasync(&self.file)?;
        Ok(())
    }

    /// `pwrite` until all of `bytes` is written; a write of nothing is an error.
    fn write_all_at(&self, mut bytes: &[u8], mut offset: u64) -> io::Result<()> {
        while !bytes.is_empty() {
            match self.file.write_at(bytes, offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.counters.bytes_written.fetch_add(n as u64, Relaxed);
                    bytes = &bytes[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// `pread` until `out` is full or the file ends; returns the bytes read.
    fn read_at_most(&self, out: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut got = 0;
        while got < out.len() {
            match self.file.read_at(&mut out[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => {
                    self.counters.bytes_read.fetch_add(n as u64, Relaxed);
                    got += n;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(got)
    }

    /// Drops the pages of `[offset, offset + len)` from the page cache (whole pages: a page
    /// shared with a neighbouring object goes too, which is what we want of it as well).
    /// Advice only: its failure changes nothing stored.
    fn drop_pages(&self, offset: u64, len: u64) {
        let page = PAGE_SIZE as u64;
        let start = offset / page * page;
        let end = (offset + len).div_ceil(page) * page;
        if let Some(len) = NonZeroU64::new(end - start) {
            let _advice_only = rustix::fs::fadvise(&self.file, start, Some(len), Advice::DontNeed);
        }
    }

    /// Before an append: a regular file shorter than what was written to it was cut by
    /// someone else. The objects past the cut are marked lost before this append can grow
    /// the file back over them (as a hole, which would read as zeroes).
    fn notice_a_cut(&self) -> io::Result<()> {
        let written = self.written_end.load(Relaxed);
        if self.kind != Kind::File || written == 0 {
            return Ok(());
        }
        let len = self.file.metadata()?.len();
        if len < written {
            self.written_end.store(len, Relaxed);
            let punch = self.segments.lock().cut(len);
            self.cache.lock().invalidate(len, u64::MAX);
            self.punch(punch);
        }
        Ok(())
    }

    /// Punches the segments `segs` out of a regular file, and puts them on the free list.
    fn punch(&self, segs: Vec<usize>) {
        let size = self.options.segment_size as u64;
        for i in segs {
            let start = i as u64 * size;
            if self.kind == Kind::File {
                let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
                // Without hole punching (EOPNOTSUPP) or on any failure the segment keeps its
                // blocks but is reused all the same.
                if rustix::fs::fallocate(&self.file, flags, start, size).is_ok() {
                    self.counters.segments_punched.fetch_add(1, Relaxed);
                }
            }
            self.cache.lock().invalidate(start, start + size);
            self.segments.lock().punched(i);
        }
    }

    /// Reads the object at `offset` through the window cache.
    fn read_cached(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let generation = {
            let mut cache = self.cache.lock();
            if cache.get(offset, out) {
                self.counters.cache_hits.fetch_add(1, Relaxed);
                return Ok(());
            }
            cache.generation()
        };
        let len = out.len() as u64;
        let end = offset + len;
        let window = self.options.readahead_window as u64;
        let span = self.segments.lock().used_span(offset);
        let (start, stop) = match span {
            Some((_, used_end)) => (offset, (offset + window.max(len)).min(used_end).max(end)),
            // Not an object the store holds (the caller's bug): read just the bytes asked.
            None => (offset, end),
        };
        let mut data = vec![0; (stop - start) as usize];
        let got = self.read_at_most(&mut data, start)?;
        self.drop_pages(start, got as u64);
        let at = (offset - start) as usize;
        if got < at + out.len() {
            return Err(short_read(offset, out.len()));
        }
        out.copy_from_slice(&data[at..at + out.len()]);
        data.truncate(got);
        self.cache.lock().insert(generation, start, data);
        Ok(())
    }

    /// Reads exactly the object at `offset`.
    fn read_direct(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let got = self.read_at_most(out, offset)?;
        self.drop_pages(offset, got as u64);
        if got < out.len() {
            return Err(short_read(offset, out.len()));
        }
        Ok(())
    }
}

impl FileBacking {
    /// [`Backing::append`], or [`Backing::append_moved`] when `moving`.
    fn append_objects(&self, objects: &[&[u8]], moving: bool) -> io::Result<Vec<u64>> {
        let fail = |e| {
            self.counters.write_errors.fetch_add(1, Relaxed);
            Err(e)
        };
        if let Err(e) = check_objects(objects) {
            return fail(e);
        }
        if objects.is_empty() {
            return Ok(Vec::new());
        }
        if let Err(e) = self.notice_a_cut() {
            return fail(e);
        }
        let lens: Vec<usize> = objects.iter().map(|o| o.len()).collect();
        let Some(mut res) = self.segments.lock().reserve(&lens, moving) else {
            return fail(os_error(libc::ENOSPC));
        };
        self.punch(std::mem::take(&mut res.punch));
        if let Err(e) = self.write(objects, &res) {
            let punch = {
                let mut segments = self.segments.lock();
                let mut punch = segments.unreserve(&res, &lens);
                punch.extend(segments.abandon_open());
                punch
            };
            self.punch(punch);
            return fail(e);
        }
        for run in &res.runs {
            self.drop_pages(run.offset, run.len);
            self.written_end.fetch_max(run.offset + run.len, Relaxed);
        }
        let mut cache = self.cache.lock();
        for run in &res.runs {
            cache.invalidate(run.offset, run.offset + run.len);
        }
        drop(cache);
        if moving {
            let bytes: u64 = res.runs.iter().map(|run| run.len).sum();
            self.counters.moved_bytes.fetch_add(bytes, Relaxed);
        }
        Ok(res.offsets)
    }
}

impl Backing for FileBacking {
    fn append(&self, objects: &[&[u8]]) -> io::Result<Vec<u64>> {
        self.append_objects(objects, false)
    }

    fn append_moved(&self, objects: &[&[u8]]) -> io::Result<Vec<u64>> {
        self.append_objects(objects, true)
    }

    fn sparse(&self) -> Vec<Sparse> {
        self.segments.lock().sparse()
    }

    fn live_in(&self, range: std::ops::Range<u64>) -> Option<u64> {
        self.segments.lock().live_in(range)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.counters.reads.fetch_add(1, Relaxed);
        if out.is_empty() {
            return Ok(());
        }
        let result = if self.segments.lock().lost(offset, out.len() as u64) {
            Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "another program cut the backing file short inside the object of {} bytes \
                     at {offset}",
                    out.len()
                ),
            ))
        } else if self.readahead.load(Relaxed) && self.options.cache_windows > 0 {
            self.read_cached(offset, out)
        } else {
            self.read_direct(offset, out)
        };
        if result.is_err() {
            self.counters.read_errors.fetch_add(1, Relaxed);
        }
        result
    }

    fn free(&self, offset: u64, len: usize) {
        let segment = {
            let mut segments = self.segments.lock();
            let freed = segments.release(offset, len);
            if self.kind == Kind::File {
                // Under the lock: the pages' segment takes no new object meanwhile (it is
                // sealed), and cannot become free and be reused under the punch.
                let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
                for (start, len) in freed.pages {
                    if rustix::fs::fallocate(&self.file, flags, start, len).is_ok() {
                        let pages = len / PAGE_SIZE as u64;
                        self.counters.pages_punched.fetch_add(pages, Relaxed);
                    }
                }
            }
            freed.segment
        };
        self.cache.lock().invalidate(offset, offset + len as u64);
        self.punch(segment.into_iter().collect());
    }

    fn sync(&self) -> io::Result<()> {
        rustix::fs::fdatasync(&self.file)?;
        Ok(())
    }

    fn stats(&self) -> BackingStats {
        let (live_bytes, file_bytes) = {
            let segments = self.segments.lock();
            (segments.live_bytes(), segments.file_bytes())
        };
        let c = &self.counters;
        BackingStats {
            live_bytes,
            file_bytes,
            bytes_written: c.bytes_written.load(Relaxed),
            bytes_read: c.bytes_read.load(Relaxed),
            reads: c.reads.load(Relaxed),
            cache_hits: c.cache_hits.load(Relaxed),
            read_errors: c.read_errors.load(Relaxed),
            write_errors: c.write_errors.load(Relaxed),
            segments_punched: c.segments_punched.load(Relaxed),
            pages_punched: c.pages_punched.load(Relaxed),
            moved_bytes: c.moved_bytes.load(Relaxed),
        }
    }
}

/// A regular file or a block device; `InvalidInput` for anything else.
fn kind_of(file_type: &std::fs::FileType) -> io::Result<Kind> {
    if file_type.is_file() {
        Ok(Kind::File)
    } else if file_type.is_block_device() {
        Ok(Kind::BlockDevice)
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file or a block device",
        ))
    }
}

/// The error of a read that found the file ending inside the object.
fn short_read(offset: u64, len: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("the backing file ends inside the object of {len} bytes at {offset}"),
    )
}
