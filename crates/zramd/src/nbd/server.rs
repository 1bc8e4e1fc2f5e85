//! Listening: the accept loop, one thread per connection, the connection limit and an
//! orderly shutdown.
//!
//! The listener is polled (non-blocking accept, short sleeps) so the shutdown flag is seen
//! within [`POLL`]. On shutdown the listener closes, every connection's read side is shut
//! (readers see end of input, workers finish and send what was in flight), and after a
//! grace period whatever is left is shut down both ways.

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use super::ServerConfig;
use super::conn::{Conn, is_disconnect};
use super::{handshake, transmission};
use crate::export::ExportSet;

/// Longest sleep between accept attempts (and so the delay before shutdown is seen).
pub(crate) const POLL: Duration = Duration::from_millis(20);
/// How long connections get to finish their requests on shutdown, per stage.
const GRACE: Duration = Duration::from_secs(2);

/// A listening socket.
trait Acceptor {
    type Conn: Conn;
    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()>;
    /// Accepts one connection, made blocking, with a printable peer name.
    fn accept_conn(&self) -> io::Result<(Self::Conn, String)>;
}

impl Acceptor for TcpListener {
    type Conn = TcpStream;

    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        TcpListener::set_nonblocking(self, nonblocking)
    }

    fn accept_conn(&self) -> io::Result<(TcpStream, String)> {
        let (s, addr) = self.accept()?;
        s.set_nonblocking(false)?;
        // proto.md: both sides should turn off Nagle's algorithm.
        s.set_nodelay(true)?;
        Ok((s, addr.to_string()))
    }
}

impl Acceptor for UnixListener {
    type Conn = UnixStream;

    fn set_nonblocking(&self, nonblocking: bool) -> io::Result<()> {
        UnixListener::set_nonblocking(self, nonblocking)
    }

    fn accept_conn(&self) -> io::Result<(UnixStream, String)> {
        let (s, _) = self.accept()?;
        s.set_nonblocking(false)?;
        Ok((s, "unix".to_owned()))
    }
}

/// Serves NBD on a TCP listener until `shutdown` becomes true (checked at least every
/// ~20 ms), then closes the listener and the connections and returns.
pub fn serve_tcp(
    listener: TcpListener,
    exports: Arc<ExportSet>,
    config: ServerConfig,
    shutdown: Arc<AtomicBool>,
) -> io::Result<()> {
    serve(listener, exports, config, shutdown)
}

/// Serves NBD on a unix-socket listener until `shutdown` becomes true (checked at least
/// every ~20 ms), then closes the listener and the connections and returns.
pub fn serve_unix(
    listener: UnixListener,
    exports: Arc<ExportSet>,
    config: ServerConfig,
    shutdown: Arc<AtomicBool>,
) -> io::Result<()> {
    serve(listener, exports, config, shutdown)
}

/// The live connections, by id: handles to shut them down with.
struct Registry<C> {
    conns: Mutex<HashMap<u64, C>>,
    active: AtomicUsize,
}

impl<C: Conn> Registry<C> {
    fn close_all(&self, how: Shutdown) {
        let conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        for c in conns.values() {
            c.close(how);
        }
    }

    /// Waits until no connection is left or `limit` passes; true if none is left.
    fn wait_idle(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.active.load(Ordering::Acquire) > 0 {
            if Instant::now() >= until {
                return false;
            }
            thread::sleep(Duration::from_millis(10));
        }
        true
    }
}

/// Leaves the registry when the connection's thread ends, however it ends.
struct Registered<C: Conn> {
    registry: Arc<Registry<C>>,
    id: u64,
}

impl<C: Conn> Drop for Registered<C> {
    fn drop(&mut self) {
        self.registry
            .conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.id);
        self.registry.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Accept errors that concern one connection or a passing shortage, not the listener.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock
            | io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EPROTO)
    )
}

fn serve<A: Acceptor>(
    acceptor: A,
    exports: Arc<ExportSet>,
    config: ServerConfig,
    shutdown: Arc<AtomicBool>,
) -> io::Result<()> {
    acceptor.set_nonblocking(true)?;
    let registry = Arc::new(Registry::<A::Conn> {
        conns: Mutex::new(HashMap::new()),
        active: AtomicUsize::new(0),
    });
    let config = Arc::new(config);
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    let mut next_id = 0u64;
    let mut result = Ok(());
    while !shutdown.load(Ordering::Relaxed) {
        let (conn, peer) = match acceptor.accept_conn() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                thread::sleep(POLL);
                continue;
            }
            Err(e) if transient(&e) => {
                warn!(error = %e, "nbd: accept failed; retrying");
                // Out of descriptors or memory: back off rather than spin on the backlog.
                thread::sleep(POLL * 10);
                continue;
            }
            Err(e) => {
                warn!(error = %e, "nbd: listener failed; stopping");
                result = Err(e);
                break;
            }
        };
        threads.retain(|t| !t.is_finished());
        if registry.active.load(Ordering::Acquire) >= config.max_connections {
            warn!(
                peer,
                limit = config.max_connections,
                "nbd: too many connections; refusing"
            );
            conn.close(Shutdown::Both);
            continue;
        }
        let id = next_id;
        next_id += 1;
        let peer = format!("{peer}#{id}");
        match conn.duplicate() {
            Ok(handle) => {
                registry
                    .conns
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(id, handle);
            }
            Err(e) => {
                warn!(peer, error = %e, "nbd: cannot track the connection; refusing");
                continue;
            }
        }
        registry.active.fetch_add(1, Ordering::AcqRel);
        let guard = Registered {
            registry: Arc::clone(&registry),
            id,
        };
        let exports = Arc::clone(&exports);
        let config = Arc::clone(&config);
        let spawned = thread::Builder::new()
            .name(format!("nbd-conn-{id}"))
            .spawn(move || {
                let _guard = guard;
                connection(conn, &exports, &config, &peer);
            });
        match spawned {
            Ok(t) => threads.push(t),
            // The closure (and with it the guard and the connection) was dropped.
            Err(e) => warn!(error = %e, "nbd: cannot start a connection thread"),
        }
    }
    drop(acceptor);
    let live = registry.active.load(Ordering::Acquire);
    if live > 0 {
        info!(
            connections = live,
            "nbd: shutting down; closing connections"
        );
    }
    registry.close_all(Shutdown::Read);
    if !registry.wait_idle(GRACE) {
        registry.close_all(Shutdown::Both);
        if !registry.wait_idle(GRACE) {
            warn!("nbd: some connections did not end in time");
        }
    }
    for t in threads {
        if t.is_finished() {
            let _ = t.join();
        }
    }
    result
}

/// One connection: handshake, then transmission.
fn connection<C: Conn>(mut conn: C, exports: &ExportSet, config: &ServerConfig, peer: &str) {
    debug!(peer, "nbd: connection opened");
    let session = match handshake::negotiate(&mut conn, exports, config, peer) {
        Ok(Some(s)) => s,
        Ok(None) => {
            conn.close(Shutdown::Both);
            debug!(peer, "nbd: connection closed during the handshake");
            return;
        }
        Err(e) => {
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) {
                warn!(peer, "nbd: handshake timed out; closing");
            } else if is_disconnect(&e) {
                debug!(peer, error = %e, "nbd: client left during the handshake");
            } else {
                warn!(peer, error = %e, "nbd: handshake failed");
            }
            conn.close(Shutdown::Both);
            return;
        }
    };
    debug!(
        peer,
        export = %session.export.name,
        structured = session.structured,
        block_status = session.block_status,
        "nbd: transmission"
    );
    match transmission::serve(conn, session, config, peer) {
        Ok(()) => debug!(peer, "nbd: connection closed"),
        Err(e) if is_disconnect(&e) => debug!(peer, error = %e, "nbd: connection closed"),
        Err(e) => warn!(peer, error = %e, "nbd: connection failed"),
    }
}
