//! Closed, refused and timed-out connections, counted and logged: the first warning at
//! once, the rest summed up in one line per [`LOG_EVERY`], so a flood of connections
//! cannot flood the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::warn;

/// Events after the first of an interval are summed up in one warning per interval.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// What the table logs and counts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    /// Every connection busy: a newcomer was closed at once.
    Refused,
    /// Closed to make room for a newcomer.
    Evicted,
    /// Its handshake or request did not arrive in time.
    TimedOut,
    /// A reply was not taken, or a request not sent, in time.
    Stalled,
    /// `accept` failed (out of descriptors or memory).
    AcceptFailed,
}

const EVENTS: usize = 5;

impl Event {
    fn what(self) -> &'static str {
        match self {
            Self::Refused => "refused (every connection busy)",
            Self::Evicted => "closed to make room for a new one",
            Self::TimedOut => "closed: handshake or request not received in time",
            Self::Stalled => "closed: a reply not read or a request not sent in time",
            Self::AcceptFailed => "not accepted (out of descriptors or memory)",
        }
    }
}

/// Counts of events, and the rate limit of their warnings.
#[derive(Debug)]
pub(crate) struct Tally {
    name: &'static str,
    totals: [AtomicU64; EVENTS],
    /// Events not yet logged, and when the current interval began.
    pending: Mutex<([u64; EVENTS], Option<Instant>)>,
}

impl Tally {
    /// A tally for the log lines of `name` (`nbd`, `control`, `metrics`).
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            totals: Default::default(),
            pending: Mutex::new(([0; EVENTS], None)),
        }
    }

    /// How many `event`s there were.
    pub fn total(&self, event: Event) -> u64 {
        self.totals[event as usize].load(Ordering::Relaxed)
    }

    /// Counts an event of connection `peer`, and logs it if it is the first of an
    /// interval.
    pub fn note(&self, event: Event, peer: &str) {
        self.totals[event as usize].fetch_add(1, Ordering::Relaxed);
        let mut pending = self.pending.lock();
        let (counts, since) = &mut *pending;
        if since.is_some_and(|t| t.elapsed() < LOG_EVERY) {
            counts[event as usize] += 1;
            return;
        }
        self.summary(counts);
        *since = Some(Instant::now());
        warn!(
            peer,
            "{}: connection {}; more are summed up every {}s",
            self.name,
            event.what(),
            LOG_EVERY.as_secs()
        );
    }

    /// Logs what is pending once its interval is over.
    pub fn flush(&self) {
        let mut pending = self.pending.lock();
        let (counts, since) = &mut *pending;
        if since.is_some_and(|t| t.elapsed() >= LOG_EVERY) {
            *since = self.summary(counts).then(Instant::now);
        }
    }

    /// Logs what is pending now (on shutdown).
    pub fn flush_now(&self) {
        self.summary(&mut self.pending.lock().0);
    }

    /// One line for the pending counts (if any), which are then zero; true if it logged.
    fn summary(&self, counts: &mut [u64; EVENTS]) -> bool {
        if counts.iter().all(|&n| n == 0) {
            return false;
        }
        let all = [
            Event::Refused,
            Event::Evicted,
            Event::TimedOut,
            Event::Stalled,
            Event::AcceptFailed,
        ];
        let parts: Vec<String> = all
            .iter()
            .filter(|e| counts[**e as usize] > 0)
            .map(|e| format!("{} {}", counts[*e as usize], e.what()))
            .collect();
        warn!(
            "{}: in the last {}s, connections {}",
            self.name,
            LOG_EVERY.as_secs(),
            parts.join("; ")
        );
        *counts = [0; EVENTS];
        true
    }
}
