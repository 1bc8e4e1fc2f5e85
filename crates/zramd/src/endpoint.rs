//! The small request/answer endpoints (control, metrics): one request per connection, read
//! whole within [`REQUEST_DEADLINE`] and at most the endpoint's longest request, one answer
//! written within [`ANSWER_DEADLINE`], then the connection closes. At most
//! [`Endpoint::MAX_CONNECTIONS`] at once; when full, the oldest connection still sending
//! its request makes way, else the one answered longest ago (the server waits a while for
//! an answered peer to close: `stream::answer_and_close`), so neither silent clients nor
//! answered ones that hold on keep anyone out (`crate::table`). A request too long or too
//! slow, and a connection refused because all are busy answering, get an error answer.

use std::io;
use std::net::Shutdown;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use crate::accept::{self, Handler};
use crate::listen::Listener;
use crate::stream::{Conn, answer_and_close, deadline_in, is_timeout, read_until_by, write_all_by};
use crate::table::{Rules, Slot, Table};
use crate::tally::Event;

/// Time a client has to send its whole request, from connecting.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(5);
/// Time an answer has to go out.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(10);

/// Why a connection gets no proper answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unanswered {
    /// The request is longer than the endpoint's longest.
    TooLong,
    /// The request did not arrive whole within [`REQUEST_DEADLINE`].
    TooSlow,
    /// Every connection is busy answering.
    Busy,
}

/// An endpoint: what ends a request, and the answers.
pub(crate) trait Endpoint: Send + Sync + 'static {
    /// The name in log lines and thread names.
    const NAME: &'static str;
    /// Connections served at once.
    const MAX_CONNECTIONS: usize;
    /// What ends a request, any of these (`\n`; an empty line).
    const ENDS: &'static [&'static [u8]];
    /// Longest request, in bytes.
    const MAX_REQUEST: usize;
    /// The answer to a request read whole.
    fn answer(&self, request: &[u8]) -> Vec<u8>;
    /// The answer when there is none to give.
    fn unanswered(&self, why: Unanswered) -> Vec<u8>;
}

/// An endpoint's connections.
#[derive(Debug)]
struct Served<E>(E);

impl<E: Endpoint> Handler for Served<E> {
    fn handle<C: Conn>(&self, mut conn: C, slot: &Slot) {
        let read = read_until_by(
            &mut conn,
            E::ENDS,
            E::MAX_REQUEST,
            deadline_in(REQUEST_DEADLINE),
        );
        let answering = read.is_ok();
        let answer = match read {
            Ok(request) => {
                slot.activity.answering();
                self.0.answer(&request)
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                self.0.unanswered(Unanswered::TooLong)
            }
            Err(e) if is_timeout(&e) => {
                slot.note(Event::TimedOut);
                self.0.unanswered(Unanswered::TooSlow)
            }
            Err(e) => {
                tracing::debug!(peer = slot.peer, "{} connection: {e}", E::NAME);
                conn.close(Shutdown::Both);
                return;
            }
        };
        // Once the answer is out the connection is idle: a peer that neither reads nor
        // closes holds its place only until a newcomer needs it. (One whose request was
        // refused never left the table's first phase, where the same holds.)
        answer_and_close(&mut conn, &answer, deadline_in(ANSWER_DEADLINE), || {
            if answering {
                slot.activity.end();
            }
        });
    }

    fn refuse<C: Conn>(&self, conn: &mut C) {
        let busy = self.0.unanswered(Unanswered::Busy);
        let _ = write_all_by(conn, &busy, deadline_in(accept::POLL));
    }
}

/// A connection table by the endpoint's rules.
pub(crate) fn table<E: Endpoint>() -> Arc<Table> {
    Table::new(Rules::endpoint(E::NAME, E::MAX_CONNECTIONS))
}

/// Serves `endpoint` on `listener` until `shutdown` is set.
pub(crate) fn serve<E: Endpoint>(
    listener: Listener,
    endpoint: E,
    shutdown: &AtomicBool,
) -> io::Result<()> {
    serve_in(listener, endpoint, &table::<E>(), shutdown)
}

/// [`serve`] with connections kept in `table` (made by [`table`]; the caller may watch
/// its counts).
pub(crate) fn serve_in<E: Endpoint>(
    listener: Listener,
    endpoint: E,
    table: &Arc<Table>,
    shutdown: &AtomicBool,
) -> io::Result<()> {
    accept::serve(vec![listener], table, &Arc::new(Served(endpoint)), shutdown)
}
