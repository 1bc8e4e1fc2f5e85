//! What `chmod`, `chown` and `touch` set, kept per file as kernfs keeps it for sysfs files:
//! the permission bits (setuid, setgid and sticky included), the owner, the group and the
//! three times. A file nobody changed has its defaults; the table holds an entry per file
//! changed, and files are a fixed set, so it stays small.
//!
//! The mode is honoured: the kernel checks it for every caller but root (the tree is
//! mounted with `default_permissions`), and an attribute file's open checks it for root
//! too, as kernfs does.

use std::collections::HashMap;
use std::time::SystemTime;

use fuser::TimeOrNow;
use parking_lot::Mutex;

/// The settable part of a file's attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Permission bits, `0o7777` at most.
    pub perm: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Last access.
    pub atime: SystemTime,
    /// Last change of the contents.
    pub mtime: SystemTime,
    /// Last change of the attributes.
    pub ctime: SystemTime,
}

impl Meta {
    /// The settable part of `attr`.
    pub fn of(attr: &fuser::FileAttr) -> Self {
        Self {
            perm: attr.perm,
            uid: attr.uid,
            gid: attr.gid,
            atime: attr.atime,
            mtime: attr.mtime,
            ctime: attr.ctime,
        }
    }
}

/// One `setattr`'s changes (all optional).
#[derive(Debug, Clone, Copy, Default)]
pub struct Change {
    /// New mode (the file-type bits are ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New access time.
    pub atime: Option<TimeOrNow>,
    /// New modification time.
    pub mtime: Option<TimeOrNow>,
}

impl Change {
    /// Does it change anything?
    pub fn is_empty(&self) -> bool {
        self.mode.is_none()
            && self.uid.is_none()
            && self.gid.is_none()
            && self.atime.is_none()
            && self.mtime.is_none()
    }
}

/// The changed files' metadata, by inode.
#[derive(Debug, Default)]
pub struct MetaTable {
    changed: Mutex<HashMap<u64, Meta>>,
}

impl MetaTable {
    /// The metadata of `ino`: what was set, else `default`.
    pub fn get(&self, ino: u64, default: Meta) -> Meta {
        self.changed.lock().get(&ino).copied().unwrap_or(default)
    }

    /// Applies `change` to `ino` (starting from `default` if it was never changed); the
    /// change time becomes now, as any attribute change makes it.
    pub fn apply(&self, ino: u64, default: Meta, change: Change) {
        let now = SystemTime::now();
        let time = |t: TimeOrNow| match t {
            TimeOrNow::SpecificTime(t) => t,
            TimeOrNow::Now => now,
        };
        let mut changed = self.changed.lock();
        let m = changed.entry(ino).or_insert(default);
        if let Some(mode) = change.mode {
            m.perm = (mode & 0o7777) as u16;
        }
        m.uid = change.uid.unwrap_or(m.uid);
        m.gid = change.gid.unwrap_or(m.gid);
        m.atime = change.atime.map_or(m.atime, time);
        m.mtime = change.mtime.map_or(m.mtime, time);
        m.ctime = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_kept_per_file() {
        let t = MetaTable::default();
        let epoch = SystemTime::UNIX_EPOCH;
        let default = Meta {
            perm: 0o200,
            uid: 0,
            gid: 0,
            atime: epoch,
            mtime: epoch,
            ctime: epoch,
        };
        assert_eq!(t.get(5, default), default);
        t.apply(
            5,
            default,
            Change {
                mode: Some(0o104_755),
                ..Change::default()
            },
        );
        let five = std::time::Duration::from_secs(5);
        t.apply(
            5,
            default,
            Change {
                uid: Some(1),
                mtime: Some(TimeOrNow::SpecificTime(epoch + five)),
                ..Change::default()
            },
        );
        let m = t.get(5, default);
        assert_eq!((m.perm, m.uid, m.gid), (0o4755, 1, 0));
        assert_eq!((m.atime, m.mtime), (epoch, epoch + five));
        assert!(m.ctime > epoch);
        assert_eq!(t.get(6, default), default, "another file is untouched");
        assert!(Change::default().is_empty());
    }
}
