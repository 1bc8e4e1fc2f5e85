//! The FUSE export: a folder per device with `disk` (a regular file of disksize bytes) beside
//! the kernel's attribute files ([`crate::sysfs`]), so `echo 1 > DIR/zram0/compact` and
//! `cat DIR/zram0/mm_stat` work as on `/sys/block/zram0`, and a `zram-control` folder with
//! `hot_add` and `hot_remove`, as `/sys/class/zram-control`.
//!
//! - `fs`: the file system ([`ZramFs`]): the tree, and sysfs's errnos for what it does not
//!   allow (creating, removing, renaming, linking);
//! - `inode`: inode numbers;
//! - `disk`: the `disk` file's I/O, with a block device's rules at its end;
//! - `attr`: the attribute files' I/O, with sysfs's rules; writes on threads of their own;
//! - `meta`: the mode, owner and times `chmod`, `chown` and `touch` set, kept per file as
//!   kernfs keeps them;
//! - `mount`: [`mount`] and [`Mounted::unmount`]: a directory something is mounted on is
//!   refused, a crashed server's dead mount is detached and reused, and shutdown never
//!   waits for a process holding a file open.
//!
//! Threads: fuser's session threads answer requests; an attribute write runs on a thread of
//! its own (a bounded number at once), so a slow one (a dictionary read from a slow file
//! system, a compaction) never holds a session thread. Locks: the open-disk table, the
//! metadata table and each device's own locks, none held while another is taken.

mod attr;
mod disk;
mod fs;
mod inode;
mod meta;
mod mount;

pub use fs::{CONTROL_DIR, ZramFs};
pub use mount::{Mounted, mount, session_threads};
