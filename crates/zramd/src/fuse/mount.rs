//! Mounting and unmounting the tree.
//!
//! Before mounting, the directory is checked. A dead FUSE mount left by a crashed server
//! (`ENOTCONN`) is detached and the directory reused. A directory anything else is mounted
//! on (another server's live tree, or any file system) is refused: mounting over it would
//! hide it, and the other server would go on serving nobody.
//!
//! Unmounting never waits for a process that holds a file of the tree open: first a plain
//! unmount, which succeeds when nothing is held and ends the session; if the tree is busy, a
//! lazy one (`MNT_DETACH`): the directory is free at once, and whoever holds a file keeps it
//! until they close it or this process exits (from then on it reads `ENOTCONN`).

use std::ffi::OsString;
use std::io;
use std::os::unix::ffi::OsStringExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use super::fs::{CONTROL_DIR, ZramFs};
use crate::export::ExportSet;

/// The tree, mounted.
#[derive(Debug)]
pub struct Mounted {
    session: fuser::BackgroundSession,
    dir: PathBuf,
}

/// Mounts the exports at `dir` (refused if something is mounted there, or if a device is
/// named as the `zram-control` folder; a dead FUSE mount is detached first). The tree lasts until [`Mounted::unmount`], or until the returned
/// value is dropped (then fuser unmounts it, if nothing holds it).
pub fn mount(exports: Arc<ExportSet>, dir: &Path) -> io::Result<Mounted> {
    if exports.get(CONTROL_DIR).is_some() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a device named {CONTROL_DIR} would be hidden by the tree's {CONTROL_DIR} folder; rename it"
            ),
        ));
    }
    prepare(dir)?;
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName("zramd".into()),
        fuser::MountOption::Subtype("zramd".into()),
        fuser::MountOption::NoDev,
        fuser::MountOption::NoSuid,
        // The kernel checks modes and owners for every caller, as for any file system.
        fuser::MountOption::DefaultPermissions,
    ];
    // Every user may read what the modes allow, as in sysfs, where the system lets us.
    match allow_other() {
        Ok(()) => config.acl = fuser::SessionACL::All,
        Err(why) => tracing::info!(
            "the FUSE tree at {} is for this user alone: {why}",
            dir.display()
        ),
    }
    config.n_threads = Some(session_threads());
    let session = fuser::spawn_mount(ZramFs::new(exports), dir, &config)?;
    Ok(Mounted {
        session,
        dir: dir.to_owned(),
    })
}

/// May the tree be mounted for every user (`allow_other`)? Root may; another user only
/// where `/etc/fuse.conf` says `user_allow_other`. `Err` says why not.
fn allow_other() -> Result<(), String> {
    if rustix::process::geteuid().is_root() {
        return Ok(());
    }
    let conf = std::fs::read_to_string("/etc/fuse.conf").unwrap_or_default();
    match user_allow_other(&conf) {
        true => Ok(()),
        false => Err("/etc/fuse.conf has no user_allow_other line".into()),
    }
}

/// Does a fuse.conf text allow non-root users `allow_other`?
fn user_allow_other(conf: &str) -> bool {
    conf.lines()
        .any(|l| l.split('#').next().unwrap_or_default().trim() == "user_allow_other")
}

/// The threads answering the tree's requests: one per CPU, at least two.
pub fn session_threads() -> usize {
    std::thread::available_parallelism()
        .map_or(2, usize::from)
        .max(2)
}

impl Mounted {
    /// Unmounts: plainly when nothing holds the tree (the session ends and is joined), else
    /// lazily, without waiting for the holders.
    pub fn unmount(self) {
        let Self { session, dir } = self;
        match unmount_dir(&dir, false) {
            Ok(()) => {
                if let Err(e) = session.join() {
                    tracing::warn!("the FUSE session at {}: {e}", dir.display());
                }
            }
            // Someone unmounted the tree already: the session has ended with it.
            Err(_) if mounted_on(&dir).is_none() => {
                tracing::info!("{} was unmounted from outside", dir.display());
                drop(session);
            }
            Err(why) => {
                tracing::warn!(
                    "{} is in use ({why}); detaching it lazily: it is gone for new users, \
                     and those holding a file of it keep it until they close it",
                    dir.display()
                );
                // The session's threads stay for the holders; dropping it lets them run.
                drop(session);
                if mounted_on(&dir).is_some()
                    && let Err(why) = unmount_dir(&dir, true)
                {
                    tracing::warn!("cannot detach {}: {why}", dir.display());
                }
            }
        }
    }
}

/// Readies `dir` for a mount: detaches a dead FUSE mount, refuses a live mount point. A
/// FUSE mount is dead when listing it is `ENOTCONN` (a listing always asks the server; a
/// `stat` may be answered from the kernel's cache for a while after the server is gone).
fn prepare(dir: &Path) -> io::Result<()> {
    if let Err(e) = std::fs::read_dir(dir)
        && e.raw_os_error() == Some(libc::ENOTCONN)
    {
        tracing::warn!(
            "{} is a dead FUSE mount (its server is gone); detaching it",
            dir.display()
        );
        unmount_dir(dir, true).map_err(|why| {
            io::Error::other(format!(
                "cannot detach the dead FUSE mount at {}: {why}",
                dir.display()
            ))
        })?;
    }
    match mounted_on(dir) {
        Some(fstype) => Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!(
                "{} is already a mount point ({fstype}): another zramd may be serving it; \
                 stop that server or unmount the directory (fusermount3 -u {0}), or choose \
                 another directory",
                dir.display()
            ),
        )),
        None => Ok(()),
    }
}

/// The type of the file system mounted on `dir` (the topmost, if several are), from
/// `/proc/self/mountinfo`. The path is compared as given (made absolute) first, then with
/// its links resolved, which looks at the directory itself.
fn mounted_on(dir: &Path) -> Option<String> {
    let info = std::fs::read("/proc/self/mountinfo").ok()?;
    let mounts: Vec<(PathBuf, String)> = info
        .split(|&b| b == b'\n')
        .filter_map(|line| {
            let line = String::from_utf8_lossy(line);
            let (left, right) = line.split_once(" - ")?;
            let point = unescape(left.split(' ').nth(4)?);
            Some((point, right.split(' ').next()?.to_owned()))
        })
        .collect();
    let find = |path: &Path| {
        mounts
            .iter()
            .rev()
            .find(|(point, _)| point == path)
            .map(|(_, fstype)| fstype.clone())
    };
    let absolute = std::path::absolute(dir).ok()?;
    find(&absolute).or_else(|| find(&std::fs::canonicalize(dir).ok()?))
}

/// A mount point as mountinfo writes it, with `\ooo` octal escapes for blanks and `\`.
fn unescape(field: &str) -> PathBuf {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let code = b.get(i + 1..i + 4).and_then(|d| {
            d.iter()
                .all(|c| (b'0'..=b'7').contains(c))
                .then(|| d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0')))
        });
        match (b[i], code.and_then(|c| u8::try_from(c).ok())) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    PathBuf::from(OsString::from_vec(out))
}

/// Unmounts `dir` with `fusermount3 -u` (lazily: `-z`), or with `umount` (`-l`) where
/// fusermount3 is not installed (root mounts without it). `Err` says why not.
fn unmount_dir(dir: &Path, lazy: bool) -> Result<(), String> {
    let run = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
    };
    let fusermount: &[&str] = if lazy {
        &["-u", "-z", "--"]
    } else {
        &["-u", "--"]
    };
    let out = match run("fusermount3", fusermount) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            run("umount", if lazy { &["-l"] } else { &[] })
        }
        other => other,
    }
    .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fuse_conf_is_read_for_user_allow_other() {
        assert!(user_allow_other("# comment\nuser_allow_other\n"));
        assert!(user_allow_other("  user_allow_other  # yes\n"));
        assert!(!user_allow_other("#user_allow_other\nmount_max = 1000\n"));
        assert!(!user_allow_other(""));
    }

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(unescape("/tmp/a\\040b"), Path::new("/tmp/a b"));
        assert_eq!(unescape("/x\\134y\\011"), Path::new("/x\\y\t"));
        assert_eq!(unescape("/plain"), Path::new("/plain"));
        assert_eq!(unescape("/odd\\9"), Path::new("/odd\\9"));
        assert_eq!(mounted_on(Path::new("/proc")).as_deref(), Some("proc"));
    }
}
