//! The file system: the root folder, a folder per device with `disk` and the attribute
//! files, and sysfs's answers for what the tree does not allow, with the errnos a kernel's
//! `/sys/block/zramN` gives root: creating a file `EACCES`; `mkdir`, `unlink`, `rmdir`,
//! `rename`, `symlink`, `link` and `mknod` of anything but a regular file `EPERM`.
//!
//! Beside the devices, the `zram-control` folder holds the kernel's `hot_add` (reading it
//! adds a device and says its number) and `hot_remove` (writing a number removes that
//! device), as `/sys/class/zram-control` ([`crate::hotplug`]). Devices come and go while
//! the tree is mounted; their inode numbers are made of ids never reused.
//!
//! Every file is opened in direct-I/O mode so that nothing is cached twice: the disk's data
//! stays compressed in zramd, not in the page cache. An open `disk` holds the device open,
//! so `reset` answers `EBUSY` meanwhile, as the kernel's does. Opening an attribute file
//! checks its mode even for root, as kernfs does.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenAccMode, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, WriteFlags,
};
use parking_lot::RwLock;

use super::attr::{Texts, Writers};
use super::disk;
use super::inode::{Node, ROOT, inode, node, ttl_of};
use super::meta::{Change, Meta, MetaTable};
use crate::device::Opened;
use crate::export::{Export, ExportSet};
use crate::hotplug;
use crate::sysfs::ATTRS;

/// The folder of `hot_add` and `hot_remove`, as `/sys/class/zram-control`.
pub const CONTROL_DIR: &str = "zram-control";

/// The filesystem.
#[derive(Debug)]
pub struct ZramFs {
    exports: Arc<ExportSet>,
    /// Open `disk` files by file handle, each with its export (looked up once, at open);
    /// requests look up, open/release change.
    open_disks: RwLock<HashMap<u64, (Arc<Export>, Opened)>>,
    next_fh: AtomicU64,
    /// Modes, owners and times set by `chmod`, `chown` and `touch`.
    meta: MetaTable,
    /// Attribute writes running now.
    attr_writers: Writers,
    /// The texts open attribute files show.
    attr_texts: Texts,
    uid: u32,
    gid: u32,
    started: SystemTime,
}

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
}

impl ZramFs {
    /// A filesystem over these exports, owned by the calling user.
    pub fn new(exports: Arc<ExportSet>) -> Self {
        let (uid, gid) = ids();
        Self {
            exports,
            open_disks: RwLock::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            meta: MetaTable::default(),
            attr_writers: Writers::default(),
            attr_texts: Texts::default(),
            uid,
            gid,
            started: SystemTime::now(),
        }
    }

    fn export(&self, id: u64) -> Option<Arc<Export>> {
        self.exports.by_id(id)
    }

    fn attr_of(&self, n: Node) -> Option<FileAttr> {
        let (kind, perm, size, nlink) = match n {
            Node::Root => (
                FileType::Directory,
                0o755,
                0,
                3 + self.exports.iter().count() as u32,
            ),
            Node::Control => (FileType::Directory, 0o755, 0, 2),
            // Reading hot_add changes the system: root's alone, as the kernel's.
            Node::HotAdd => (FileType::RegularFile, 0o400, 4096, 1),
            Node::HotRemove => (FileType::RegularFile, 0o200, 4096, 1),
            Node::Dir(d) => {
                self.export(d)?;
                (FileType::Directory, 0o755, 0, 2)
            }
            Node::Disk(d) => {
                let e = self.export(d)?;
                let size = e.device.zram().map_or(0, |z| z.disksize());
                // The data is the owner's alone, as a block device's (the tree may be
                // mounted for every user to see: `allow_other`).
                let perm = if e.read_only { 0o400 } else { 0o600 };
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
        let meta = self.meta.get(
            inode(n),
            Meta {
                perm,
                uid: self.uid,
                gid: self.gid,
                atime: self.started,
                mtime: self.started,
                ctime: self.started,
            },
        );
        Some(FileAttr {
            ino: INodeNo(inode(n)),
            size,
            blocks,
            atime: meta.atime,
            mtime: meta.mtime,
            ctime: meta.ctime,
            crtime: self.started,
            kind,
            perm: meta.perm,
            nlink,
            uid: meta.uid,
            gid: meta.gid,
            rdev: 0,
            blksize: 4096,
            flags: 0,
        })
    }

    /// An open `disk` file's export and device. The Opened guard stays in the table; the
    /// request gets the device itself.
    fn disk(&self, fh: FileHandle) -> Option<(Arc<Export>, Arc<zram::Zram>)> {
        let disks = self.open_disks.read();
        disks.get(&fh.0).map(|(e, o)| (Arc::clone(e), o.arc()))
    }
}

/// The effective user and group this process runs as.
fn ids() -> (u32, u32) {
    (
        rustix::process::geteuid().as_raw(),
        rustix::process::getegid().as_raw(),
    )
}

impl Filesystem for ZramFs {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        disk::kernel_config(config);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        let found = match node(parent.0) {
            Some(Node::Root) if name == CONTROL_DIR => Some(Node::Control),
            Some(Node::Root) => self
                .exports
                .with_ids()
                .into_iter()
                .find(|(_, e)| e.name == name)
                .map(|(id, _)| Node::Dir(id)),
            Some(Node::Control) if name == "hot_add" => Some(Node::HotAdd),
            Some(Node::Control) if name == "hot_remove" => Some(Node::HotRemove),
            Some(Node::Dir(d)) if name == "disk" => Some(Node::Disk(d)),
            Some(Node::Dir(d)) => ATTRS
                .iter()
                .position(|a| a.name == name)
                .map(|a| Node::Attr(d, a)),
            _ => None,
        };
        match found.and_then(|n| Some((ttl_of(n), self.attr_of(n)?))) {
            Some((ttl, attr)) => reply.entry(&ttl, &attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match node(ino.0).and_then(|n| Some((ttl_of(n), self.attr_of(n)?))) {
            Some((ttl, attr)) => reply.attr(&ttl, &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let Some((n, attr)) = node(ino.0).and_then(|n| Some((n, self.attr_of(n)?))) else {
            return reply.error(Errno::ENOENT);
        };
        // A disk cannot change size; truncating to its own size (as `>` redirections of
        // attribute files do, for attributes) is a no-op.
        if let (Node::Disk(_), Some(s)) = (n, size)
            && s != attr.size
        {
            return reply.error(errno(libc::EPERM));
        }
        // Mode, owner and times are kept, as kernfs keeps them (the kernel has checked who
        // may change them: the tree is mounted with default_permissions).
        let change = Change {
            mode,
            uid,
            gid,
            atime,
            mtime,
        };
        if change.is_empty() {
            return reply.attr(&ttl_of(n), &attr);
        }
        self.meta.apply(ino.0, Meta::of(&attr), change);
        match self.attr_of(n) {
            Some(attr) => reply.attr(&ttl_of(n), &attr),
            None => reply.error(Errno::ENOENT),
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
                self.open_disks.write().insert(fh, (e, opened));
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO);
            }
            Some(n @ (Node::Attr(..) | Node::HotAdd | Node::HotRemove)) => {
                // kernfs checks the file's mode bits for every caller, root too.
                let Some(attr) = self.attr_of(n) else {
                    return reply.error(Errno::ENOENT);
                };
                if (wants_write && attr.perm & 0o222 == 0) || (wants_read && attr.perm & 0o444 == 0)
                {
                    return reply.error(errno(libc::EACCES));
                }
                let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
                reply.opened(FileHandle(fh), FopenFlags::FOPEN_DIRECT_IO);
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
        let r = match node(ino.0) {
            Some(Node::Disk(_)) => match self.disk(fh) {
                Some((e, dev)) => {
                    return disk::read_with(&e, &dev, offset, size, |r| match r {
                        Ok(data) => reply.data(data),
                        Err(code) => reply.error(errno(code)),
                    });
                }
                _ => Err(libc::EBADF),
            },
            Some(Node::Attr(d, a)) => match self.export(d) {
                Some(e) => self.attr_texts.read(&e.device, a, fh.0, offset, size),
                None => Err(libc::ENOENT),
            },
            Some(Node::HotAdd) => self.attr_texts.read_with(fh.0, offset, size, || {
                Ok(format!("{}\n", hotplug::add(&self.exports).0))
            }),
            Some(Node::HotRemove) => Err(libc::EIO),
            _ => Err(libc::EISDIR),
        };
        match r {
            Ok(data) => reply.data(&data),
            Err(code) => reply.error(errno(code)),
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
            Some(Node::Disk(_)) => match self.disk(fh) {
                Some((e, dev)) => match disk::write(&e, &dev, offset, data) {
                    Ok(n) => reply.written(n),
                    Err(code) => reply.error(errno(code)),
                },
                _ => reply.error(errno(libc::EBADF)),
            },
            Some(Node::Attr(d, a)) => match self.export(d) {
                Some(e) => self.attr_writers.write(&e.device, a, data, reply),
                None => reply.error(Errno::ENOENT),
            },
            Some(Node::HotRemove) => {
                let exports = Arc::clone(&self.exports);
                self.attr_writers
                    .spawn("hot_remove", data, reply, move |text| {
                        hotplug::remove_store(&exports, text)
                    });
            }
            Some(Node::HotAdd) => reply.error(errno(libc::EIO)),
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
        if let (Some(Node::Disk(_)), Some((_, dev))) = (node(ino.0), self.disk(fh))
            && let Err(e) = dev.flush()
        {
            return reply.error(errno(e.errno()));
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
        self.attr_texts.release(fh.0);
        reply.ok();
    }

    // What sysfs refuses, with the errnos a kernel's /sys/block/zramN gives root.

    fn create(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        reply.error(errno(libc::EACCES));
    }

    fn mknod(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // A regular file is a create (EACCES without one), anything else EPERM.
        let regular = matches!(mode & libc::S_IFMT, 0 | libc::S_IFREG);
        reply.error(errno(if regular { libc::EACCES } else { libc::EPERM }));
    }

    fn mkdir(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        reply.error(errno(libc::EPERM));
    }

    fn unlink(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(errno(libc::EPERM));
    }

    fn rmdir(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEmpty) {
        reply.error(errno(libc::EPERM));
    }

    fn symlink(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _link_name: &OsStr,
        _target: &Path,
        reply: ReplyEntry,
    ) {
        reply.error(errno(libc::EPERM));
    }

    fn rename(
        &self,
        _req: &Request,
        _parent: INodeNo,
        _name: &OsStr,
        _newparent: INodeNo,
        _newname: &OsStr,
        _flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        reply.error(errno(libc::EPERM));
    }

    fn link(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _newparent: INodeNo,
        _newname: &OsStr,
        reply: ReplyEntry,
    ) {
        reply.error(errno(libc::EPERM));
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
                entries.push((
                    inode(Node::Control),
                    FileType::Directory,
                    CONTROL_DIR.into(),
                ));
                for (id, e) in self.exports.with_ids() {
                    entries.push((inode(Node::Dir(id)), FileType::Directory, e.name.clone()));
                }
            }
            Some(Node::Control) => {
                entries.push((inode(Node::Control), FileType::Directory, ".".into()));
                entries.push((ROOT, FileType::Directory, "..".into()));
                for n in [Node::HotAdd, Node::HotRemove] {
                    let name = if n == Node::HotAdd {
                        "hot_add"
                    } else {
                        "hot_remove"
                    };
                    entries.push((inode(n), FileType::RegularFile, name.into()));
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
            // A removed device's folder, read through a descriptor opened before: gone.
            Some(Node::Dir(_)) => return reply.error(errno(libc::ENOENT)),
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
        let (Some(Node::Disk(_)), Some((e, dev))) = (node(ino.0), self.disk(fh)) else {
            return reply.error(errno(libc::EOPNOTSUPP));
        };
        match disk::fallocate(&e, &dev, offset, length, mode) {
            Ok(()) => reply.ok(),
            Err(code) => reply.error(errno(code)),
        }
    }
}
