//! The FUSE export: a folder per device with `disk` (a regular file of disksize bytes) beside
//! the kernel's attribute files ([`crate::sysfs`]), so `echo 1 > DIR/zram0/compact` and
//! `cat DIR/zram0/mm_stat` work as on `/sys/block/zram0`.
//!
//! Inodes: 1 is the root; device `i` has its folder at `16 (i + 1)`, its `disk` at the next
//! number and its attributes after that. Every file is opened in direct-I/O mode so that
//! nothing is cached twice: the disk's data stays compressed in zramd, not in the page cache.
//!
//! `disk` supports read, write, fsync and `fallocate`: punch-hole frees the whole pages of the
//! range and zeroes its partial edges (the range reads back as zeroes), zero-range is
//! write-zeroes, plain allocation inside the disk succeeds (nothing to allocate). An open
//! `disk` holds the device open, so `reset` answers `EBUSY` meanwhile, as the kernel's does.
//!
//! After a crash the mount point is left behind ("Transport endpoint is not connected"):
//! `zramd serve --fuse DIR` detaches such a stale mount itself; by hand,
//! `fusermount3 -u DIR` or `umount -l DIR`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenAccMode, OpenFlags, ReplyAttr, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, WriteFlags,
};
use parking_lot::RwLock;

use crate::device::Opened;
use crate::export::{ExportSet, Op};
use crate::sysfs::{self, ATTRS};

const TTL: Duration = Duration::from_secs(1);
const ROOT: u64 = 1;
const PER_DEVICE: u64 = 16;
const DISK: u64 = 1;

/// What an inode names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    Root,
    Dir(usize),
    Disk(usize),
    Attr(usize, usize),
}

fn node(ino: u64) -> Option<Node> {
    if ino == ROOT {
        return Some(Node::Root);
    }
    let dev = usize::try_from(ino / PER_DEVICE).ok()?.checked_sub(1)?;
    match ino % PER_DEVICE {
        0 => Some(Node::Dir(dev)),
        DISK => Some(Node::Disk(dev)),
        k if ((k - 2) as usize) < ATTRS.len() => Some(Node::Attr(dev, (k - 2) as usize)),
        _ => None,
    }
}

fn inode(n: Node) -> u64 {
    match n {
        Node::Root => ROOT,
        Node::Dir(d) => (d as u64 + 1) * PER_DEVICE,
        Node::Disk(d) => (d as u64 + 1) * PER_DEVICE + DISK,
        Node::Attr(d, a) => (d as u64 + 1) * PER_DEVICE + 2 + a as u64,
    }
}

/// The filesystem.
#[derive(Debug)]
pub struct ZramFs {
    exports: Arc<ExportSet>,
    /// Open `disk` files by file handle; requests look up, open/release change.
    open_disks: RwLock<HashMap<u64, Opened>>,
    next_fh: AtomicU64,
    uid: u32,
    gid: u32,
    started: SystemTime,
}

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
}

/// The errno for a device error on the `disk` file: the device's own.
fn io_errno(e: &zram::Error) -> Errno {
    errno(e.errno())
}

impl ZramFs {
    /// A filesystem over these exports, owned by the calling user.
    pub fn new(exports: Arc<ExportSet>) -> Self {
        let (uid, gid) = ids();
        Self {
            exports,
            open_disks: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            uid,
            gid,
            started: SystemTime::now(),
        }
    }

    fn export(&self, i: usize) -> Option<&Arc<crate::export::Export>> {
        self.exports.iter().nth(i)
    }

    fn attr_of(&self, n: Node) -> Option<FileAttr> {
        let (kind, perm, size, nlink) = match n {
            Node::Root => (
                FileType::Directory,
                0o755,
                0,
                2 + self.exports.iter().count() as u32,
            ),
            Node::Dir(d) => {
                self.export(d)?;
                (FileType::Directory, 0o755, 0, 2)
            }
            Node::Disk(d) => {
                let e = self.export(d)?;
                let size = e.device.zram().map_or(0, |z| z.disksize());
                let perm = if e.read_only { 0o444 } else { 0o644 };
                (FileType::RegularFile, perm, size, 1)
            }
            Node::Attr(d, a) => {
                self.export(d)?;
                (FileType::RegularFile, ATTRS[a].mode, 4096, 1)
            }
        };
        let blocks = match n {
            Node::Disk(d) => self
                .export(d)
                .and_then(|e| e.device.zram())
                .map_or(0, |z| z.mm_stat().mem_used_total / 512),
            _ => 0,
        };
        Some(FileAttr {
            ino: INodeNo(inode(n)),
            size,
            blocks,
            atime: self.started,
            mtime: self.started,
            ctime: self.started,
            crtime: self.started,
            kind,
            perm,
            nlink,
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    fn disk(&self, fh: FileHandle) -> Option<Arc<zram::Zram>> {
        // The Opened guard stays in the table; hand out the device itself for the request.
        self.open_disks.read().get(&fh.0).map(|o| o.arc())
    }
}

fn ids() -> (u32, u32) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(2))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("Uid:"), field("Gid:"))
}

impl Filesystem for ZramFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        let found = match node(parent.0) {
            Some(Node::Root) => self
                .exports
                .iter()
                .position(|e| e.name == name)
                .map(Node::Dir),
            Some(Node::Dir(d)) if name == "disk" => Some(Node::Disk(d)),
            Some(Node::Dir(d)) => ATTRS
                .iter()
                .position(|a| a.name == name)
                .map(|a| Node::Attr(d, a)),
            _ => None,
        };
        match found.and_then(|n| self.attr_of(n)) {
            Some(attr) => reply.entry(&TTL, &attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match node(ino.0).and_then(|n| self.attr_of(n)) {
            Some(attr) => reply.attr(&TTL, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<fuser::TimeOrNow>,
        _mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let Some(attr) = node(ino.0).and_then(|n| self.attr_of(n)) else {
            return reply.error(Errno::ENOENT);
        };
        match (node(ino.0), size) {
            // A disk cannot change size; truncating to its own size (as `>` redirections of
            // attribute files do, for attributes) is a no-op.
            (Some(Node::Disk(_)), Some(s)) if s != attr.size => reply.error(errno(libc::EPERM)),
            _ => reply.attr(&TTL, &attr),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let wants_write = !matches!(flags.acc_mode(), OpenAccMode::O_RDONLY);
        let wants_read = !matches!(flags.acc_mode(), OpenAccMode::O_WRONLY);
        match node(ino.0) {
            Some(Node::Disk(d)) => {
                let Some(e) = self.export(d) else {
                    return reply.error(Errno::ENOENT);
                };
                if wants_write && e.read_only {
                    return reply.error(errno(libc::EROFS));
                }
                let Some(opened) = e.device.open() else {
                    return reply.error(errno(libc::ENXIO));
                };
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                self.open_disks.write().insert(fh, opened);
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO);
            }
            Some(Node::Attr(d, a)) => {
                if self.export(d).is_none() {
                    return reply.error(Errno::ENOENT);
                }
                let attr = ATTRS[a];
                if (wants_write && !attr.writable()) || (wants_read && !attr.readable()) {
                    return reply.error(errno(libc::EACCES));
                }
                reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO);
            }
            Some(_) => reply.error(errno(libc::EISDIR)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match node(ino.0) {
            Some(Node::Disk(d)) => {
                let (Some(e), Some(dev)) = (self.export(d), self.disk(fh)) else {
                    return reply.error(errno(libc::EBADF));
                };
                let end = (offset.saturating_add(u64::from(size))).min(dev.disksize());
                let len = end.saturating_sub(offset) as usize;
                let mut buf = vec![0u8; len];
                let start = std::time::Instant::now();
                let r = dev.read(offset, &mut buf);
                e.stats
                    .record(Op::Read, len as u64, start.elapsed(), r.is_ok());
                match r {
                    Ok(()) => reply.data(&buf),
                    Err(err) => reply.error(io_errno(&err)),
                }
            }
            Some(Node::Attr(d, a)) => {
                let Some(e) = self.export(d) else {
                    return reply.error(Errno::ENOENT);
                };
                match sysfs::read(&e.device, ATTRS[a].name) {
                    Ok(text) => {
                        let bytes = text.as_bytes();
                        let from = (offset as usize).min(bytes.len());
                        let to = from.saturating_add(size as usize).min(bytes.len());
                        reply.data(&bytes[from..to]);
                    }
                    Err(code) => reply.error(errno(code)),
                }
            }
            _ => reply.error(errno(libc::EISDIR)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        match node(ino.0) {
            Some(Node::Disk(d)) => {
                let (Some(e), Some(dev)) = (self.export(d), self.disk(fh)) else {
                    return reply.error(errno(libc::EBADF));
                };
                if e.read_only {
                    return reply.error(errno(libc::EROFS));
                }
                let start = std::time::Instant::now();
                let r = dev.write(offset, data);
                e.stats
                    .record(Op::Write, data.len() as u64, start.elapsed(), r.is_ok());
                match r {
                    Ok(()) => reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX)),
                    Err(err) => reply.error(io_errno(&err)),
                }
            }
            Some(Node::Attr(d, a)) => {
                let Some(e) = self.export(d) else {
                    return reply.error(Errno::ENOENT);
                };
                if offset != 0 {
                    return reply.error(errno(libc::EINVAL));
                }
                match sysfs::write(&e.device, ATTRS[a].name, data) {
                    Ok(()) => reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX)),
                    Err(code) => reply.error(errno(code)),
                }
            }
            _ => reply.error(errno(libc::EISDIR)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        if let (Some(Node::Disk(_)), Some(dev)) = (node(ino.0), self.disk(fh))
            && let Err(e) = dev.flush()
        {
            return reply.error(io_errno(&e));
        }
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.open_disks.write().remove(&fh.0);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let mut entries: Vec<(u64, FileType, String)> = Vec::new();
        match node(ino.0) {
            Some(Node::Root) => {
                entries.push((ROOT, FileType::Directory, ".".into()));
                entries.push((ROOT, FileType::Directory, "..".into()));
                for (i, e) in self.exports.iter().enumerate() {
                    entries.push((inode(Node::Dir(i)), FileType::Directory, e.name.clone()));
                }
            }
            Some(Node::Dir(d)) if self.export(d).is_some() => {
                entries.push((inode(Node::Dir(d)), FileType::Directory, ".".into()));
                entries.push((ROOT, FileType::Directory, "..".into()));
                entries.push((inode(Node::Disk(d)), FileType::RegularFile, "disk".into()));
                for (a, attr) in ATTRS.iter().enumerate() {
                    entries.push((
                        inode(Node::Attr(d, a)),
                        FileType::RegularFile,
                        attr.name.into(),
                    ));
                }
            }
            _ => return reply.error(errno(libc::ENOTDIR)),
        }
        for (i, (n, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(n), i as u64 + 1, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: fuser::ReplyXattr,
    ) {
        reply.error(errno(libc::ENODATA));
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: fuser::ReplyXattr) {
        reply.size(0);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let total: u64 = self
            .exports
            .iter()
            .filter_map(|e| e.device.zram())
            .map(|z| z.disksize() / 4096)
            .sum();
        reply.statfs(total, total, total, 0, 0, 4096, 255, 4096);
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let (Some(Node::Disk(d)), Some(dev)) = (node(ino.0), self.disk(fh)) else {
            return reply.error(errno(libc::EOPNOTSUPP));
        };
        let Some(e) = self.export(d) else {
            return reply.error(Errno::ENOENT);
        };
        if e.read_only {
            return reply.error(errno(libc::EROFS));
        }
        let start = std::time::Instant::now();
        let keep = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let r = if mode & libc::FALLOC_FL_PUNCH_HOLE != 0 && keep {
            Some((Op::Trim, dev.write_zeroes(offset, length)))
        } else if mode & libc::FALLOC_FL_ZERO_RANGE != 0 {
            Some((Op::WriteZeroes, dev.write_zeroes(offset, length)))
        } else if mode & !libc::FALLOC_FL_KEEP_SIZE == 0 {
            // Allocation: every byte of the disk is always there.
            match offset.checked_add(length) {
                Some(end) if end <= dev.disksize() => None,
                _ => return reply.error(errno(libc::EFBIG)),
            }
        } else {
            return reply.error(errno(libc::EOPNOTSUPP));
        };
        match r {
            None => reply.ok(),
            Some((op, result)) => {
                e.stats.record(op, length, start.elapsed(), result.is_ok());
                match result {
                    Ok(()) => reply.ok(),
                    Err(err) => reply.error(io_errno(&err)),
                }
            }
        }
    }
}

/// Detaches a stale FUSE mount (left by a crashed server) at `dir`, if there is one.
pub fn clear_stale_mount(dir: &Path) {
    if let Err(e) = std::fs::metadata(dir)
        && e.raw_os_error() == Some(libc::ENOTCONN)
    {
        tracing::warn!("{} is a stale FUSE mount; detaching it", dir.display());
        let detached = std::process::Command::new("fusermount3")
            .args(["-u", "-z"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !detached {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(dir)
                .status();
        }
    }
}

/// Mounts the exports at `dir`; the mount lasts until the returned session is dropped or
/// unmounted.
pub fn mount(exports: Arc<ExportSet>, dir: &Path) -> std::io::Result<fuser::BackgroundSession> {
    clear_stale_mount(dir);
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("zramd".into()),
        fuser::MountOption::Subtype("zramd".into()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
    ];
    config.n_threads = Some(
        std::thread::available_parallelism()
            .map_or(2, usize::from)
            .max(2),
    );
    fuser::spawn_mount(ZramFs::new(exports), dir, &config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inode_numbers_round_trip() {
        for n in [
            Node::Root,
            Node::Dir(0),
            Node::Disk(0),
            Node::Attr(0, 0),
            Node::Attr(3, ATTRS.len() - 1),
        ] {
            assert_eq!(node(inode(n)), Some(n));
        }
        assert_eq!(node(0), None);
        assert_eq!(node(PER_DEVICE + 2 + ATTRS.len() as u64), None);
    }
}
