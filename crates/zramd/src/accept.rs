//! Accepting connections, for the NBD server and the control and metrics endpoints alike:
//! one loop over listeners of both kinds, a thread per connection, each admitted (or
//! refused) by the server's [`Table`], which the loop also lets close what is past its time.

use std::io;
use std::net::Shutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tracing::warn;

use crate::listen::{Acceptor, Listener};
use crate::stream::Conn;
use crate::table::{Slot, Table};
use crate::tally::Event;

/// Longest wait between accept attempts while no connection comes (and so the delay before
/// shutdown is seen and the table's timeouts are checked); a connection that comes ends
/// the wait at once (`listen::wait_for_connection`).
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// What a server does with a connection.
pub(crate) trait Handler: Send + Sync + 'static {
    /// Serves one connection (on its own thread) until it ends.
    fn handle<C: Conn>(&self, conn: C, slot: &Slot);
    /// Tells a refused connection why, before it is closed (by default: nothing).
    fn refuse<C: Conn>(&self, _conn: &mut C) {}
}

/// Accept errors that concern one connection or a passing shortage, not the listener.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::Interrupted
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) || matches!(
        e.raw_os_error(),
        Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM | libc::EPROTO)
    )
}

/// Accepts one waiting connection, if any, and starts its thread; `Ok(true)` if one came.
fn take<A: Acceptor, H: Handler>(
    acceptor: &A,
    table: &Arc<Table>,
    handler: &Arc<H>,
    threads: &mut Vec<JoinHandle<()>>,
) -> io::Result<bool> {
    let (mut conn, peer) = match acceptor.accept_conn() {
        Ok(c) => c,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
        Err(e) if transient(&e) => {
            table.note(Event::AcceptFailed, &e.to_string());
            // Out of descriptors or memory: back off rather than spin on the backlog.
            thread::sleep(POLL * 10);
            return Ok(false);
        }
        Err(e) => return Err(e),
    };
    let Some(slot) = table.admit(&conn, peer) else {
        handler.refuse(&mut conn);
        conn.close(Shutdown::Both);
        return Ok(true);
    };
    let handler = Arc::clone(handler);
    let spawned = thread::Builder::new()
        .name(format!("{}-conn-{}", table.name(), slot.id))
        .spawn(move || handler.handle(conn, &slot));
    match spawned {
        Ok(t) => threads.push(t),
        // The closure (and with it the slot and the connection) was dropped.
        Err(e) => warn!(error = %e, "{}: cannot start a connection thread", table.name()),
    }
    Ok(true)
}

/// Serves connections from `listeners` with `handler` until `shutdown` becomes true
/// (checked at least every [`POLL`]), then closes the listeners and the connections and
/// returns. A listener that fails is closed and the others go on; the error is returned
/// at the end.
pub(crate) fn serve<H: Handler>(
    mut listeners: Vec<Listener>,
    table: &Arc<Table>,
    handler: &Arc<H>,
    shutdown: &AtomicBool,
) -> io::Result<()> {
    for l in &listeners {
        l.set_nonblocking()?;
    }
    let name = table.name();
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    let mut result = Ok(());
    while !shutdown.load(Ordering::Relaxed) && !listeners.is_empty() {
        let mut accepted = false;
        let mut i = 0;
        while i < listeners.len() {
            let taken = match &listeners[i] {
                Listener::Tcp(l) => take(l, table, handler, &mut threads),
                Listener::Unix(l) => take(l, table, handler, &mut threads),
            };
            match taken {
                Ok(got) => {
                    accepted |= got;
                    i += 1;
                }
                Err(e) => {
                    warn!(error = %e, "{name}: listener failed; closing it");
                    listeners.remove(i);
                    result = Err(e);
                }
            }
        }
        table.tick();
        threads.retain(|t| !t.is_finished());
        if !accepted {
            // Waits for a connection rather than sleeping: a client opening connections one
            // after another (nbdcopy -C N) would wait up to `POLL` for each.
            crate::listen::wait_for_connection(&listeners, POLL);
        }
    }
    drop(listeners);
    table.shut_down();
    for t in threads {
        if t.is_finished() {
            let _ = t.join();
        }
    }
    result
}
