//! One NBD server over any number of listeners: [`Service`] takes connections through
//! `crate::accept` and `crate::table` (limits and timeouts from [`ServerConfig`]), runs each one's
//! handshake and transmission, and holds the byte budget all connections share.

use std::io;
use std::net::Shutdown;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tracing::{debug, warn};

use super::budget::Budget;
use super::pool::BufPool;
use super::tls::Tls;
use super::{ServerConfig, handshake, transmission};
use crate::accept::{self, Handler};
use crate::export::ExportSet;
use crate::listen::Listener;
use crate::stream::{Conn, is_disconnect, is_timeout};
use crate::table::{Rules, Slot, Table};
use crate::tally::Event;

/// An NBD server: its exports, settings, live connections and total byte budget.
#[derive(Debug)]
pub struct Service {
    exports: Arc<ExportSet>,
    config: ServerConfig,
    tls: Option<Tls>,
    table: Arc<Table>,
    budget: Budget,
    /// Spare buffers of all connections.
    pool: BufPool,
}

/// What a server holds now, and what it has turned away.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections negotiating.
    pub negotiating: usize,
    /// Connections in transmission.
    pub serving: usize,
    /// Bytes of read and write buffers in flight, over all connections.
    pub in_flight_bytes: u64,
    /// Requests waiting for room in the total budget.
    pub waiting_requests: usize,
    /// Connections refused because every one was busy.
    pub refused: u64,
    /// Connections closed to make room for a new one.
    pub evicted: u64,
    /// Connections closed because their handshake did not end in time.
    pub timed_out: u64,
    /// Connections closed because a reply was not taken or a request not sent in time.
    pub stalled: u64,
}

impl Service {
    /// A server of `exports`, not yet listening.
    pub fn new(exports: Arc<ExportSet>, config: ServerConfig) -> Arc<Self> {
        Self::with_tls(exports, config, None)
    }

    /// A server of `exports` that offers TLS (`NBD_OPT_STARTTLS`), or requires it.
    pub fn with_tls(exports: Arc<ExportSet>, config: ServerConfig, tls: Option<Tls>) -> Arc<Self> {
        let table = Table::new(Rules {
            name: "nbd",
            max_connections: config.max_connections,
            max_starting: config.max_handshakes,
            idle: config.idle_timeout.limit(),
            io: config.io_timeout.limit(),
        });
        let budget = Budget::new(config.max_in_flight.bytes());
        Arc::new(Self {
            exports,
            config,
            tls,
            table,
            budget,
            pool: transmission::spare_buffers(),
        })
    }

    /// Serves NBD on `listeners` until `shutdown` becomes true (checked at least every
    /// ~20 ms), then closes the listeners and the connections and returns.
    pub fn serve(
        self: &Arc<Self>,
        listeners: Vec<Listener>,
        shutdown: &AtomicBool,
    ) -> io::Result<()> {
        accept::serve(listeners, &self.table, self, shutdown)
    }

    /// The server's connections, for the metrics.
    pub(crate) fn table(&self) -> &Arc<Table> {
        &self.table
    }

    /// Connections and bytes held now, and connections turned away so far.
    pub fn stats(&self) -> Stats {
        let c = self.table.counts();
        let used = self.budget.used();
        Stats {
            negotiating: c.starting,
            serving: c.serving,
            in_flight_bytes: used.bytes,
            waiting_requests: used.waiting,
            refused: c.refused,
            evicted: c.evicted,
            timed_out: c.timed_out,
            stalled: c.stalled,
        }
    }
}

impl Handler for Service {
    /// One connection: handshake, then transmission.
    fn handle<C: Conn>(&self, mut conn: C, slot: &Slot) {
        let peer = slot.peer.as_str();
        debug!(peer, "nbd: connection opened");
        let mut session = match handshake::negotiate(
            &mut conn,
            &self.exports,
            &self.config,
            self.tls.as_ref(),
            peer,
        ) {
            Ok(Some(s)) => s,
            Ok(None) => {
                conn.close(Shutdown::Both);
                debug!(peer, "nbd: connection closed during the handshake");
                return;
            }
            Err(e) => {
                if is_timeout(&e) {
                    slot.note(Event::TimedOut);
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
        slot.activity.serving();
        let served = match session.plain.take() {
            Some(plain) => {
                transmission::serve(plain, session, &self.config, &self.budget, &self.pool, slot)
            }
            None => {
                transmission::serve(conn, session, &self.config, &self.budget, &self.pool, slot)
            }
        };
        match served {
            Ok(()) => debug!(peer, "nbd: connection closed"),
            Err(e) if is_disconnect(&e) => debug!(peer, error = %e, "nbd: connection closed"),
            Err(e) => warn!(peer, error = %e, "nbd: connection failed"),
        }
    }
}
