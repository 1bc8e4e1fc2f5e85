//! The live connections of a server, over all its listeners: who gets in when it is full,
//! and the reaper that closes connections past their time.
//!
//! A connection is *starting* (an NBD handshake, a control or metrics request not yet read
//! whole), then *serving*, then *closing* (shut down by the table; its thread is ending).
//! When one arrives:
//!
//! 1. if [`Rules::max_starting`] connections are starting, the oldest of them is closed to
//!    make room (a silent client cannot keep newcomers out);
//! 2. else, if [`Rules::max_connections`] are open, the oldest starting one is closed, or
//!    else the serving one idle the longest (nothing in flight, nothing being sent or
//!    received); only when every connection is busy is the newcomer refused.
//!
//! The reaper ([`Table::tick`], run by the accept loop) closes a serving connection that
//! has been idle for [`Rules::idle`], or whose current transfer (a reply being written, a
//! request being read) has lasted [`Rules::io`]. Starting connections keep their own
//! deadline (they read with `crate::stream`'s deadline-bounded calls). Closing, refusing
//! and timing out go to the [`Tally`].
//!
//! Locks: the table's entries, then the tally's counts; neither is held while a
//! connection's thread runs.

use std::collections::HashMap;
use std::net::Shutdown;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::{debug, info, warn};

use crate::stream::Conn;
use crate::tally::{Event, Tally};

/// How long connections get to finish on shutdown, per stage.
const GRACE: Duration = Duration::from_secs(2);

/// How many connections a listener keeps and for how long.
#[derive(Debug, Clone)]
pub(crate) struct Rules {
    /// The name in log lines and thread names: `nbd`, `control`, `metrics`.
    pub name: &'static str,
    /// Connections open at once.
    pub max_connections: usize,
    /// Connections starting at once (at most `max_connections`).
    pub max_starting: usize,
    /// A serving connection with nothing in flight for this long is closed.
    pub idle: Option<Duration>,
    /// A reply not taken, or a request not sent, within this long closes its connection.
    pub io: Option<Duration>,
}

impl Rules {
    /// A small request/answer endpoint (control, metrics): at most `cap` connections, each
    /// keeping its own deadlines (no idle or I/O rule).
    pub fn endpoint(name: &'static str, cap: usize) -> Self {
        Self {
            name,
            max_connections: cap,
            max_starting: cap,
            idle: None,
            io: None,
        }
    }
}

const STARTING: u8 = 0;
const SERVING: u8 = 1;
const CLOSING: u8 = 2;

/// What one connection is doing, for the table to judge; updated by its threads. Times are
/// milliseconds since the table's epoch plus one (0: not happening).
#[derive(Debug)]
pub(crate) struct Activity {
    epoch: Instant,
    opened: u64,
    phase: AtomicU8,
    /// When the last request ended (or serving began).
    last: AtomicU64,
    /// Requests read and not yet answered.
    in_flight: AtomicU64,
    /// Since when a request (header or payload) has been arriving.
    receiving: AtomicU64,
    /// Since when a reply has been going out.
    sending: AtomicU64,
    /// The table's count of connections with a request in flight.
    busy: Arc<AtomicUsize>,
}

impl Drop for Activity {
    fn drop(&mut self) {
        if *self.in_flight.get_mut() > 0 {
            self.busy.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Activity {
    fn now(&self) -> u64 {
        stamp(self.epoch)
    }

    /// The connection starts serving (its handshake or its request is done).
    pub fn serving(&self) {
        self.last.store(self.now(), Ordering::Relaxed);
        let _ = self
            .phase
            .compare_exchange(STARTING, SERVING, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// An endpoint's request was read whole: the connection is busy answering it.
    pub fn answering(&self) {
        self.serving();
        self.begin();
    }

    /// A request was read; it is in flight until [`Activity::end`].
    pub fn begin(&self) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.busy.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A request was answered.
    pub fn end(&self) {
        self.last.store(self.now(), Ordering::Relaxed);
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.busy.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Connections of the table with a request in flight (this one among them when it
    /// has one).
    pub fn busy_connections(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// A request starts (`true`) or finishes (`false`) arriving.
    pub fn receiving(&self, on: bool) {
        self.receiving
            .store(if on { self.now() } else { 0 }, Ordering::Relaxed);
    }

    /// A reply starts (`true`) or finishes (`false`) going out.
    pub fn sending(&self, on: bool) {
        self.sending
            .store(if on { self.now() } else { 0 }, Ordering::Relaxed);
    }

    /// Serving with nothing in flight: since when, or `None` when busy or not serving.
    fn idle_since(&self) -> Option<u64> {
        let quiet = self.phase.load(Ordering::Acquire) == SERVING
            && self.in_flight.load(Ordering::Acquire) == 0
            && self.receiving.load(Ordering::Relaxed) == 0
            && self.sending.load(Ordering::Relaxed) == 0;
        quiet.then(|| self.last.load(Ordering::Relaxed))
    }

    /// The oldest transfer under way, if any.
    fn transfer_since(&self) -> Option<u64> {
        [&self.receiving, &self.sending]
            .into_iter()
            .map(|t| t.load(Ordering::Relaxed))
            .filter(|&t| t != 0)
            .min()
    }
}

/// Milliseconds since `epoch`, plus one so that 0 can mean "never".
fn stamp(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_millis())
        .unwrap_or(u64::MAX - 1)
        .saturating_add(1)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A live connection in the table.
struct Entry {
    peer: String,
    close: Box<dyn Fn(Shutdown) + Send + Sync>,
    activity: Arc<Activity>,
}

impl Entry {
    fn shut(&self) {
        self.activity.phase.store(CLOSING, Ordering::Release);
        (self.close)(Shutdown::Both);
    }
}

/// Figures of a table, for tests and statistics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub starting: usize,
    pub serving: usize,
    pub accepted: u64,
    pub refused: u64,
    pub evicted: u64,
    pub timed_out: u64,
    pub stalled: u64,
}

/// The live connections of one server (over all its listeners).
pub(crate) struct Table {
    rules: Rules,
    epoch: Instant,
    entries: Mutex<HashMap<u64, Entry>>,
    next_id: AtomicU64,
    /// Connections admitted so far.
    accepted: AtomicU64,
    /// Connection threads not yet ended (closing ones too).
    live: AtomicUsize,
    /// Connections with a request in flight.
    busy: Arc<AtomicUsize>,
    tally: Tally,
}

impl std::fmt::Debug for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("rules", &self.rules)
            .field("live", &self.live)
            .finish_non_exhaustive()
    }
}

impl Table {
    pub fn new(rules: Rules) -> Arc<Self> {
        let rules = Rules {
            max_connections: rules.max_connections.max(1),
            max_starting: rules.max_starting.clamp(1, rules.max_connections.max(1)),
            ..rules
        };
        Arc::new(Self {
            tally: Tally::new(rules.name),
            rules,
            epoch: Instant::now(),
            entries: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            accepted: AtomicU64::new(0),
            live: AtomicUsize::new(0),
            busy: Arc::default(),
        })
    }

    pub fn counts(&self) -> Counts {
        let entries = self.entries.lock();
        let in_phase = |p| {
            entries
                .values()
                .filter(|e| e.activity.phase.load(Ordering::Acquire) == p)
                .count()
        };
        let total = |e: Event| self.tally.total(e);
        Counts {
            starting: in_phase(STARTING),
            serving: in_phase(SERVING),
            accepted: self.accepted.load(Ordering::Relaxed),
            refused: total(Event::Refused),
            evicted: total(Event::Evicted),
            timed_out: total(Event::TimedOut),
            stalled: total(Event::Stalled),
        }
    }

    /// The name in log lines and thread names.
    pub fn name(&self) -> &'static str {
        self.rules.name
    }

    /// Counts and (rate-limited) logs an event.
    pub fn note(&self, event: Event, peer: &str) {
        self.tally.note(event, peer);
    }

    /// Closes what is past its time and logs what is due; run often.
    pub fn tick(&self) {
        self.reap();
        self.tally.flush();
    }

    /// Takes a new connection in, making room by the rules (module docs); `None`: refused.
    pub fn admit<C: Conn>(self: &Arc<Self>, conn: &C, peer: String) -> Option<Slot> {
        let handle = match conn.duplicate() {
            Ok(h) => h,
            Err(e) => {
                self.tally
                    .note(Event::AcceptFailed, &format!("{peer}: {e}"));
                return None;
            }
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let peer = format!("{peer}#{id}");
        let mut entries = self.entries.lock();
        let phase = |e: &Entry| e.activity.phase.load(Ordering::Acquire);
        let open: Vec<(&u64, &Entry)> = entries
            .iter()
            .filter(|(_, e)| phase(e) != CLOSING)
            .collect();
        let oldest_starting = open
            .iter()
            .filter(|(_, e)| phase(e) == STARTING)
            .min_by_key(|(id, e)| (e.activity.opened, **id))
            .map(|(id, _)| **id);
        let starting = open.iter().filter(|(_, e)| phase(e) == STARTING).count();
        let victim = if starting >= self.rules.max_starting {
            oldest_starting
        } else if open.len() >= self.rules.max_connections {
            oldest_starting.or_else(|| {
                // Stamps are in milliseconds and the entries in no order: of sessions
                // stamped in the same millisecond, the one opened first.
                open.iter()
                    .filter_map(|(id, e)| Some((**id, e.activity.idle_since()?)))
                    .min_by_key(|&(id, since)| (since, id))
                    .map(|(id, _)| id)
            })
        } else {
            None
        };
        let full = starting >= self.rules.max_starting || open.len() >= self.rules.max_connections;
        drop(open);
        if full {
            match victim.and_then(|id| entries.get(&id)) {
                Some(e) => {
                    e.shut();
                    self.tally.note(Event::Evicted, &e.peer);
                }
                None => {
                    self.tally.note(Event::Refused, &peer);
                    return None;
                }
            }
        }
        let activity = Arc::new(Activity {
            epoch: self.epoch,
            opened: stamp(self.epoch),
            phase: AtomicU8::new(STARTING),
            last: AtomicU64::new(stamp(self.epoch)),
            in_flight: AtomicU64::new(0),
            receiving: AtomicU64::new(0),
            sending: AtomicU64::new(0),
            busy: Arc::clone(&self.busy),
        });
        entries.insert(
            id,
            Entry {
                peer: peer.clone(),
                close: Box::new(move |how| handle.close(how)),
                activity: Arc::clone(&activity),
            },
        );
        self.live.fetch_add(1, Ordering::AcqRel);
        self.accepted.fetch_add(1, Ordering::Relaxed);
        Some(Slot {
            table: Arc::clone(self),
            id,
            peer,
            activity,
        })
    }

    /// Closes serving connections idle or stalled past the rules' limits.
    fn reap(&self) {
        if self.rules.idle.is_none() && self.rules.io.is_none() {
            return;
        }
        let now = stamp(self.epoch);
        let past = |since: u64, limit: Option<Duration>| {
            limit.is_some_and(|l| now.saturating_sub(since) > millis(l))
        };
        let entries = self.entries.lock();
        for e in entries.values() {
            if e.activity.phase.load(Ordering::Acquire) != SERVING {
                continue;
            }
            if e.activity
                .transfer_since()
                .is_some_and(|t| past(t, self.rules.io))
            {
                e.shut();
                self.tally.note(Event::Stalled, &e.peer);
            } else if e
                .activity
                .idle_since()
                .is_some_and(|t| past(t, self.rules.idle))
            {
                e.shut();
                debug!(peer = e.peer, "{}: idle connection closed", self.rules.name);
            }
        }
    }

    fn close_all(&self, how: Shutdown) {
        for e in self.entries.lock().values() {
            (e.close)(how);
        }
    }

    /// Waits until no connection thread is left or `limit` passes; true if none is left.
    fn wait_idle(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        while self.live.load(Ordering::Acquire) > 0 {
            if Instant::now() >= until {
                return false;
            }
            thread::sleep(Duration::from_millis(10));
        }
        true
    }

    /// On shutdown: ends input (readers stop, answers in progress go out), then, after a
    /// grace period, whatever is left.
    pub fn shut_down(&self) {
        self.tally.flush_now();
        let live = self.live.load(Ordering::Acquire);
        if live > 0 {
            info!(
                connections = live,
                "{}: shutting down; closing connections", self.rules.name
            );
        }
        self.close_all(Shutdown::Read);
        if !self.wait_idle(GRACE) {
            self.close_all(Shutdown::Both);
            if !self.wait_idle(GRACE) {
                warn!("{}: some connections did not end in time", self.rules.name);
            }
        }
    }
}

/// A connection's place in the table, held by its thread; leaves the table when dropped,
/// however the thread ends.
#[derive(Debug)]
pub(crate) struct Slot {
    table: Arc<Table>,
    /// The connection's number.
    pub id: u64,
    /// The peer's printable name, with the connection's number.
    pub peer: String,
    /// What the connection is doing.
    pub activity: Arc<Activity>,
}

impl Slot {
    /// Counts and (rate-limited) logs an event of this connection.
    pub fn note(&self, event: Event) {
        self.table.tally.note(event, &self.peer);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.table.entries.lock().remove(&self.id);
        self.table.live.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_with_requests_in_flight_are_counted_once_each() {
        let table = Table::new(Rules::endpoint("test", 8));
        let (a, _a) = std::os::unix::net::UnixStream::pair().unwrap();
        let (b, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let a = table.admit(&a, "a".into()).unwrap();
        let b = table.admit(&b, "b".into()).unwrap();
        let busy = || a.activity.busy_connections();
        assert_eq!(busy(), 0);
        a.activity.begin();
        a.activity.begin();
        assert_eq!(busy(), 1, "two requests of one connection");
        b.activity.begin();
        assert_eq!(busy(), 2);
        a.activity.end();
        assert_eq!(busy(), 2, "a still has one in flight");
        a.activity.end();
        assert_eq!(busy(), 1);
        // A connection that ends with requests in flight is not counted afterwards.
        drop(b);
        assert_eq!(busy(), 0);
    }
}
