//! What running as a service needs: the signals that stop `zramd serve` (SIGINT, SIGTERM
//! and SIGHUP; a SIGHUP stops the server cleanly, it does not reload the config) and the
//! service manager's notices (systemd's notify protocol, `Type=notify`): `READY=1` once
//! every endpoint is bound, `STOPPING=1` when a stop begins.
//!
//! The protocol is one datagram of `KEY=VALUE` lines to the unix socket named by
//! `$NOTIFY_SOCKET` (a path, or an abstract name written with a leading `@`); no C library
//! is needed. The variable is left set: `zramd serve` starts no programs that could
//! inherit it, and systemd's default `NotifyAccess=main` ignores any other process.

use std::io;
use std::os::linux::net::SocketAddrExt as _;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context as _;

/// The service manager's notify socket, from `$NOTIFY_SOCKET`.
#[derive(Debug)]
pub struct Notifier {
    addr: SocketAddr,
    socket: UnixDatagram,
}

/// The address `$NOTIFY_SOCKET` names: an absolute path, or `@name` for an abstract socket.
pub fn notify_addr(value: &str) -> io::Result<SocketAddr> {
    match value.strip_prefix('@') {
        Some(name) if !name.is_empty() => SocketAddr::from_abstract_name(name.as_bytes()),
        _ if value.starts_with('/') => SocketAddr::from_pathname(value),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("NOTIFY_SOCKET={value:?} is neither an absolute path nor @name"),
        )),
    }
}

impl Notifier {
    /// The notifier `$NOTIFY_SOCKET` names; `None` when it is unset (not started by a
    /// service manager) or names no unix socket we can send to (logged).
    pub fn from_env() -> Option<Self> {
        let value = std::env::var("NOTIFY_SOCKET").ok()?;
        let made = notify_addr(&value).and_then(|addr| {
            Ok(Self {
                addr,
                socket: UnixDatagram::unbound()?,
            })
        });
        match made {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!("no readiness notices: {e}");
                None
            }
        }
    }

    /// Sends one notice (`KEY=VALUE` lines) as one datagram.
    pub fn send(&self, notice: &str) -> io::Result<()> {
        let sent = self.socket.send_to_addr(notice.as_bytes(), &self.addr)?;
        if sent != notice.len() {
            return Err(io::Error::other("notice truncated"));
        }
        Ok(())
    }

    /// Sends a notice; a failure is logged, as the service runs on regardless.
    fn tell(&self, notice: &str) {
        if let Err(e) = self.send(notice) {
            tracing::warn!("notify the service manager: {e}");
        }
    }
}

/// A serving process's side of the service: the stop signals and the notices.
#[derive(Debug)]
pub struct Daemon {
    notifier: Option<Notifier>,
    hangup: Arc<AtomicBool>,
}

impl Daemon {
    /// Makes SIGINT, SIGTERM and SIGHUP set `shutdown`, and finds the notify socket.
    pub fn install(shutdown: &Arc<AtomicBool>) -> anyhow::Result<Self> {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let hangup = Arc::new(AtomicBool::new(false));
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            signal_hook::flag::register(sig, Arc::clone(shutdown))
                .context("install signal handler")?;
        }
        signal_hook::flag::register(SIGHUP, Arc::clone(&hangup))
            .context("install signal handler")?;
        Ok(Self {
            notifier: Notifier::from_env(),
            hangup,
        })
    }

    /// Every endpoint is bound and served: tells the service manager (`READY=1`, with
    /// `status` as its status line).
    pub fn ready(&self, status: &str) {
        if let Some(n) = &self.notifier {
            let status = status.replace('\n', " ");
            n.tell(&format!(
                "READY=1\nSTATUS={status}\nMAINPID={}\n",
                std::process::id()
            ));
        }
    }

    /// A stop begins: tells the service manager (`STOPPING=1`) and says why in the log.
    pub fn stopping(&self) {
        if self.hangup.load(Ordering::Relaxed) {
            tracing::info!("SIGHUP: stopping (zramd does not reload its config)");
        }
        if let Some(n) = &self.notifier {
            n.tell("STOPPING=1\nSTATUS=stopping\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next datagram `receiver` gets (a hang guard of 10 s).
    fn received(receiver: &UnixDatagram) -> Vec<u8> {
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut buf = [0; 64];
        let len = receiver.recv(&mut buf).unwrap();
        buf[..len].to_vec()
    }

    #[test]
    fn notify_addresses() {
        let abs = notify_addr("@zramd-test").unwrap();
        assert_eq!(abs.as_abstract_name(), Some(&b"zramd-test"[..]));
        let path = notify_addr("/run/systemd/notify").unwrap();
        assert_eq!(
            path.as_pathname(),
            Some(std::path::Path::new("/run/systemd/notify"))
        );
        for bad in ["", "@", "relative/path", "vsock:2:1234"] {
            assert!(notify_addr(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_notice_is_one_datagram() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let receiver = UnixDatagram::bind(&path).unwrap();
        let n = Notifier {
            addr: notify_addr(path.to_str().unwrap()).unwrap(),
            socket: UnixDatagram::unbound().unwrap(),
        };
        n.send("READY=1\nSTATUS=x\n").unwrap();
        assert_eq!(received(&receiver), b"READY=1\nSTATUS=x\n");
    }

    #[test]
    fn abstract_notify_socket() {
        let name = format!("zramd-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let receiver = UnixDatagram::bind_addr(&addr).unwrap();
        let n = Notifier {
            addr: notify_addr(&format!("@{name}")).unwrap(),
            socket: UnixDatagram::unbound().unwrap(),
        };
        n.send("STOPPING=1\n").unwrap();
        assert_eq!(received(&receiver), b"STOPPING=1\n");
    }
}
