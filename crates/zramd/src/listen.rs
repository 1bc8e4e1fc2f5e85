//! Listening sockets: the two kinds a server accepts on, and unix sockets made safely.
//!
//! A unix socket path is only ever replaced when it is a stale socket (one nobody answers
//! on); a live socket, a regular file or anything else there is an error and is left alone.
//! The socket gets its mode (and group) before it listens: it is bound, changed, and only
//! then made to listen, so no client can connect while the umask's mode is on it (a connect
//! before `listen` is refused). Unix sockets are `0600` unless `--socket-mode` and
//! `--socket-group` widen them; the control socket is always `0600`.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;

use anyhow::{Context as _, bail};
use serde::{Deserialize, Serialize};

/// A listening socket of either kind.
#[derive(Debug)]
pub enum Listener {
    /// A TCP address.
    Tcp(TcpListener),
    /// A unix socket.
    Unix(UnixListener),
}

impl Listener {
    /// Makes `accept` return at once when nobody is waiting.
    pub(crate) fn set_nonblocking(&self) -> io::Result<()> {
        match self {
            Self::Tcp(l) => l.set_nonblocking(true),
            Self::Unix(l) => l.set_nonblocking(true),
        }
    }
}

impl std::os::fd::AsFd for Listener {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        match self {
            Self::Tcp(l) => l.as_fd(),
            Self::Unix(l) => l.as_fd(),
        }
    }
}

/// Waits until a connection is waiting on one of `listeners`, `timeout` has passed or a
/// signal came, whichever is first. If the wait itself fails, or a listener reports an
/// error or a hang-up (which `accept` may not clear, so that the caller would spin), sleeps
/// `timeout` instead.
pub(crate) fn wait_for_connection(listeners: &[Listener], timeout: std::time::Duration) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds: Vec<PollFd<'_>> = listeners
        .iter()
        .map(|l| PollFd::new(l, PollFlags::IN))
        .collect();
    let Ok(limit) = Timespec::try_from(timeout) else {
        std::thread::sleep(timeout);
        return;
    };
    let faulty = PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL;
    match poll(&mut fds, Some(&limit)) {
        Ok(_) if fds.iter().any(|f| f.revents().intersects(faulty)) => {
            std::thread::sleep(timeout);
        }
        Ok(_) | Err(rustix::io::Errno::INTR) => {}
        Err(_) => std::thread::sleep(timeout),
    }
}

/// A listening socket of one kind: accepts connections made blocking, with a printable
/// name of the peer.
pub(crate) trait Acceptor {
    type Conn: crate::stream::Conn;
    fn accept_conn(&self) -> io::Result<(Self::Conn, String)>;
}

impl Acceptor for TcpListener {
    type Conn = TcpStream;

    fn accept_conn(&self) -> io::Result<(TcpStream, String)> {
        let (s, addr) = self.accept()?;
        s.set_nonblocking(false)?;
        // NBD's proto.md: both sides should turn off Nagle's algorithm; the small endpoints
        // write each answer whole, so it costs them nothing.
        s.set_nodelay(true)?;
        Ok((s, addr.to_string()))
    }
}

impl Acceptor for UnixListener {
    type Conn = UnixStream;

    fn accept_conn(&self) -> io::Result<(UnixStream, String)> {
        let (s, _) = self.accept()?;
        s.set_nonblocking(false)?;
        let peer = match rustix::net::sockopt::socket_peercred(&s) {
            Ok(cred) => format!(
                "unix uid {} pid {}",
                cred.uid.as_raw(),
                cred.pid.as_raw_pid()
            ),
            Err(_) => "unix".to_owned(),
        };
        Ok((s, peer))
    }
}

/// Permission bits of a unix socket, written in octal (`0600`, `660`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Mode(pub u32);

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let digits = s.trim().trim_start_matches("0o");
        match u32::from_str_radix(digits, 8) {
            Ok(bits) if bits <= 0o777 && !digits.is_empty() => Ok(Self(bits)),
            _ => Err(format!(
                "invalid socket mode {s:?} (octal permission bits, e.g. 0600 or 0660)"
            )),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:04o}", self.0)
    }
}

impl TryFrom<String> for Mode {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<Mode> for String {
    fn from(m: Mode) -> Self {
        m.to_string()
    }
}

/// Who may connect to the NBD unix sockets. The same fields serve the command line and a
/// config file's top level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, clap::Args)]
#[serde(default)]
pub struct SocketAccess {
    /// Mode of the NBD unix sockets (octal); the default lets only this user in. The
    /// control socket is always 0600.
    #[arg(long, default_value_t = SocketAccess::PRIVATE.socket_mode)]
    pub socket_mode: Mode,
    /// Group of the NBD unix sockets (a name from /etc/group, or a number), for a mode that
    /// lets the group in.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_group: Option<String>,
}

impl SocketAccess {
    /// This user only: mode 0600, the process's group.
    pub const PRIVATE: Self = Self {
        socket_mode: Mode(0o600),
        socket_group: None,
    };
}

impl Default for SocketAccess {
    fn default() -> Self {
        Self::PRIVATE
    }
}

/// The id of group `name` (a number, or a name in `/etc/group`).
fn group_id(name: &str) -> anyhow::Result<u32> {
    let gid = match name.parse::<u32>() {
        Ok(gid) => gid,
        Err(_) => {
            let groups = std::fs::read_to_string("/etc/group").context("read /etc/group")?;
            groups
                .lines()
                .map(|l| l.split(':').collect::<Vec<_>>())
                .find(|f| f.len() >= 3 && f[0] == name)
                .and_then(|f| f[2].parse().ok())
                .with_context(|| format!("no group named {name:?} in /etc/group"))?
        }
    };
    // chown(2) takes (gid_t)-1 as "leave the group": it names no group.
    anyhow::ensure!(gid != u32::MAX, "group id {gid} names no group");
    Ok(gid)
}

/// Clears the way for a socket at `path`: nothing there, or a stale socket (removed). A
/// socket someone answers on, or anything that is not a socket, is an error.
fn clear_stale(path: &Path) -> anyhow::Result<()> {
    let meta = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e).with_context(|| format!("look at {}", path.display())),
        Ok(m) => m,
    };
    if !meta.file_type().is_socket() {
        bail!(
            "{} exists and is not a socket; not replacing it",
            path.display()
        );
    }
    match UnixStream::connect(path) {
        Ok(_) => bail!("{} is in use by a running server", path.display()),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)
            .with_context(|| format!("remove the stale socket {}", path.display())),
        Err(e) => Err(e).with_context(|| {
            format!(
                "{} is a socket that cannot be checked; not replacing it",
                path.display()
            )
        }),
    }
}

/// Binds a unix socket at `path` with `access`'s mode and group, replacing only a stale
/// socket, and listens on it.
pub fn bind_unix(path: &Path, access: &SocketAccess) -> anyhow::Result<UnixListener> {
    let gid = access.socket_group.as_deref().map(group_id).transpose()?;
    clear_stale(path)?;
    let addr = rustix::net::SocketAddrUnix::new(path)
        .with_context(|| format!("socket path {}", path.display()))?;
    let fd = rustix::net::socket_with(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::STREAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .context("make a unix socket")?;
    rustix::net::bind(&fd, &addr).with_context(|| format!("bind {}", path.display()))?;
    // Bound, not listening: nobody can connect until the mode is right.
    let ready =
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(access.socket_mode.0))
            .with_context(|| format!("set the mode of {}", path.display()))
            .and_then(|()| match gid {
                Some(gid) => std::os::unix::fs::chown(path, None, Some(gid))
                    .with_context(|| format!("give {} to group {gid}", path.display())),
                None => Ok(()),
            })
            .and_then(|()| {
                rustix::net::listen(&fd, 128)
                    .with_context(|| format!("listen on {}", path.display()))
            });
    if let Err(e) = ready {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    Ok(UnixListener::from(fd))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal_permission_bits() {
        assert_eq!("0600".parse::<Mode>().unwrap(), Mode(0o600));
        assert_eq!("660".parse::<Mode>().unwrap(), Mode(0o660));
        assert_eq!("0o640".parse::<Mode>().unwrap(), Mode(0o640));
        assert_eq!(Mode(0o660).to_string(), "0660");
        for bad in ["", "0999", "4755", "rw", "0o"] {
            assert!(bad.parse::<Mode>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn groups_by_name_or_number() {
        assert_eq!(group_id("0").unwrap(), 0);
        assert_eq!(group_id("root").unwrap(), 0);
        assert!(group_id("no-such-group-here").is_err());
        let err = group_id("4294967295").unwrap_err().to_string();
        assert!(err.contains("names no group"), "{err}");
    }

    /// `wait_for_connection` returns once a connection is waiting, long before its
    /// timeout (an hour); the wait is run on a thread and given a minute (bounded).
    #[test]
    fn a_waiting_connection_ends_the_wait() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let unix = UnixListener::bind(&path).unwrap();
        let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = tcp.local_addr().unwrap();
        let listeners = vec![Listener::Tcp(tcp), Listener::Unix(unix)];
        for l in &listeners {
            l.set_nonblocking().unwrap();
        }
        let hour = std::time::Duration::from_secs(3600);
        for unix_side in [true, false] {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::scope(|s| {
                let listeners = &listeners;
                s.spawn(move || {
                    wait_for_connection(listeners, hour);
                    let _ = tx.send(());
                });
                // Kept open until the wait has ended.
                let _client: Box<dyn std::any::Any> = if unix_side {
                    Box::new(UnixStream::connect(&path).unwrap())
                } else {
                    Box::new(TcpStream::connect(addr).unwrap())
                };
                rx.recv_timeout(std::time::Duration::from_secs(60))
                    .expect("the wait did not end when a connection came");
            });
            // Take the connection, so the next round waits again.
            let taken = match &listeners[usize::from(unix_side)] {
                Listener::Tcp(l) => l.accept_conn().map(|_| ()),
                Listener::Unix(l) => l.accept_conn().map(|_| ()),
            };
            taken.unwrap();
        }
    }
}
