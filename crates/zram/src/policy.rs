//! Automatic post-processing (beyond the kernel): a per-device policy that recompresses
//! and writes back cold slots by itself, in rounds on a background thread.
//!
//! A round:
//! 1. takes the idle age for this round: the configured age when memory is plentiful,
//!    shrinking linearly toward `min_age` as `mem_used_total` grows toward `mem_limit`
//!    (the AOSP memory daemon's rule: long ages when memory is plentiful, short ones under
//!    pressure; with no `mem_limit` the configured age holds);
//! 2. with `recompress_age`, recompresses the slots not accessed for that (scaled) age
//!    with the secondary algorithm of `recompress_priority` (the lowest one when unset);
//! 3. with `writeback_age` and a backing file, while `mem_used_total` is above
//!    `writeback_watermark`, writes back slots not accessed for that age in the order
//!    huge and idle, idle, huge, within `writeback_round` per round and `writeback_day`
//!    per day (pages, as `bd_stat` counts them).
//!
//! 4. compacts the pool when a step moved anything (the freed objects leave zspages
//!    partly empty).
//!
//! The policy selects by access time, not by the `IDLE` marks, so it leaves an operator's
//! own `idle` markings alone. Every step is logged, counted ([`PolicyStats`]) and shown
//! by front ends; a step that meets a manual writeback or recompression (`EAGAIN`) or a
//! failing file is counted as an error and retried next round.

use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use serde::{Deserialize, Serialize};

use crate::PAGE_SIZE;
use crate::error::{Error, Result};
use crate::pp::{Mode, RecompressRequest, WritebackRequest};
use crate::size::Size;
use crate::store::Store;

/// A device's policy. Off unless `enabled`; written as `key=value` words (`on`/`off`
/// alone switch it), read back in the same form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Policy {
    /// Rounds run at all.
    pub enabled: bool,
    /// Seconds between rounds.
    pub interval: u64,
    /// Recompress slots not accessed for this many seconds (none: no recompression).
    pub recompress_age: Option<u64>,
    /// The secondary algorithm's priority (none: the lowest configured).
    pub recompress_priority: Option<u8>,
    /// Write back slots not accessed for this many seconds (none: no writeback).
    pub writeback_age: Option<u64>,
    /// Write back only while `mem_used_total` is above this (0: always).
    pub writeback_watermark: Size,
    /// Bytes of pages written back per round at most.
    pub writeback_round: Size,
    /// Bytes of pages written back per day at most.
    pub writeback_day: Size,
    /// The shortest idle age memory pressure can bring the ages down to, in seconds.
    pub min_age: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            enabled: false,
            interval: 60,
            recompress_age: None,
            recompress_priority: None,
            writeback_age: None,
            writeback_watermark: Size(0),
            writeback_round: Size(64 << 20),
            writeback_day: Size(1 << 30),
            min_age: 60,
        }
    }
}

impl Policy {
    /// Applies `key=value` words (and `on`/`off`) over this policy; on error nothing changes.
    pub fn apply(&mut self, text: &str) -> Result<()> {
        let mut p = self.clone();
        let bad = |w: &str| Error::InvalidArgument(w.to_owned());
        let secs = |v: &str, w: &str| v.parse::<u64>().map_err(|_| bad(w));
        let opt = |v: &str, w: &str| match v {
            "off" | "none" => Ok(None),
            _ => secs(v, w).map(Some),
        };
        let size = |v: &str, w: &str| v.parse::<Size>().map_err(|_| bad(w));
        for w in text.split_whitespace() {
            let (k, v) = w.split_once('=').unwrap_or((w, ""));
            match (k, v) {
                ("on", "") => p.enabled = true,
                ("off", "") => p.enabled = false,
                ("enabled", v) => {
                    p.enabled = match v {
                        "1" | "on" | "true" => true,
                        "0" | "off" | "false" => false,
                        _ => return Err(bad(w)),
                    }
                }
                ("interval", v) => p.interval = secs(v, w)?,
                ("recompress_age", v) => p.recompress_age = opt(v, w)?,
                ("recompress_priority", v) => {
                    p.recompress_priority = match opt(v, w)? {
                        None => None,
                        Some(n @ 1..=3) => Some(n as u8),
                        Some(_) => return Err(bad(w)),
                    }
                }
                ("writeback_age", v) => p.writeback_age = opt(v, w)?,
                ("writeback_watermark", v) => p.writeback_watermark = size(v, w)?,
                ("writeback_round", v) => p.writeback_round = size(v, w)?,
                ("writeback_day", v) => p.writeback_day = size(v, w)?,
                ("min_age", v) => p.min_age = secs(v, w)?,
                _ => return Err(bad(w)),
            }
        }
        p.check()?;
        *self = p;
        Ok(())
    }

    /// Refuses a 0-second interval and a recompression priority outside 1..=3 (however the
    /// policy was made: words, or a config file's table).
    pub fn check(&self) -> Result<()> {
        if self.interval == 0 {
            return Err(Error::InvalidArgument(
                "policy interval=0 (rounds need at least 1 second between them)".into(),
            ));
        }
        if self
            .recompress_priority
            .is_some_and(|n| !(1..=3).contains(&n))
        {
            return Err(Error::InvalidArgument(format!(
                "policy recompress_priority={} (1..=3)",
                self.recompress_priority.unwrap_or(0)
            )));
        }
        Ok(())
    }

    /// The age to use this round for a configured `age`, at `used` bytes of `limit` (0:
    /// none).
    pub fn scaled_age(&self, age: u64, used: u64, limit: u64) -> u64 {
        if limit == 0 || age <= self.min_age {
            return age;
        }
        let pressure = (used as f64 / limit as f64).min(1.0);
        let span = (age - self.min_age) as f64;
        self.min_age + (span * (1.0 - pressure)).round() as u64
    }
}

impl std::str::FromStr for Policy {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        let mut p = Policy::default();
        p.apply(s)?;
        Ok(p)
    }
}

impl std::fmt::Display for Policy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let opt = |v: Option<u64>| v.map_or_else(|| "off".to_owned(), |n| n.to_string());
        write!(
            f,
            "enabled={} interval={} recompress_age={} recompress_priority={} writeback_age={} \
             writeback_watermark={} writeback_round={} writeback_day={} min_age={}",
            u8::from(self.enabled),
            self.interval,
            opt(self.recompress_age),
            opt(self.recompress_priority.map(u64::from)),
            opt(self.writeback_age),
            self.writeback_watermark.bytes(),
            self.writeback_round.bytes(),
            self.writeback_day.bytes(),
            self.min_age,
        )
    }
}

/// What the policy has done since the device started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PolicyStats {
    /// Rounds run.
    pub rounds: u64,
    /// Slots recompressed.
    pub recompressed: u64,
    /// Stream bytes recompression saved.
    pub recompress_saved_bytes: u64,
    /// Pages written back.
    pub written_back_pages: u64,
    /// Bytes written to the backing file.
    pub written_back_bytes: u64,
    /// Steps that failed (busy, file errors).
    pub errors: u64,
    /// Pages the compaction after its steps gave back.
    pub pages_compacted: u64,
    /// Pages written back in the current day.
    pub day_pages: u64,
    /// The idle ages of the last round (recompression, writeback), seconds.
    pub last_ages: (Option<u64>, Option<u64>),
    /// What the last round did, in words.
    pub last_round: String,
}

/// The policy state a device and its thread share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    policy: Mutex<Policy>,
    stats: Mutex<PolicyStats>,
    day_start: Mutex<Option<Instant>>,
    wake: Condvar,
    stop: Mutex<bool>,
    /// Held through a round: a manual round and the thread's take turns.
    round: Mutex<()>,
}

const DAY: Duration = Duration::from_secs(24 * 3600);

impl Shared {
    pub(crate) fn new(policy: Policy) -> Arc<Self> {
        Arc::new(Self {
            policy: Mutex::new(policy),
            ..Self::default()
        })
    }

    pub(crate) fn policy(&self) -> Policy {
        self.policy.lock().clone()
    }

    pub(crate) fn set(&self, policy: Policy) {
        *self.policy.lock() = policy;
        let _stop = self.stop.lock();
        self.wake.notify_all();
    }

    pub(crate) fn stats(&self) -> PolicyStats {
        self.stats.lock().clone()
    }

    /// Runs one round now, whatever `enabled` says.
    pub(crate) fn round(&self, store: &Store) -> PolicyStats {
        let _turn = self.round.lock();
        let p = self.policy();
        let mut words = Vec::new();
        let used = store.pool().total_pages() as u64 * PAGE_SIZE as u64;
        let limit = store.mem_limit();
        let now = u64::from(store.now());
        let mut st = self.stats.lock().clone();
        let before = st.recompressed + st.written_back_pages;
        st.rounds += 1;
        st.last_ages = (None, None);
        if let Some(age) = p.recompress_age {
            let age = p.scaled_age(age, used, limit);
            st.last_ages.0 = Some(age);
            if let Some(cut) = now.checked_sub(age) {
                let req = RecompressRequest {
                    mode: Some(Mode::IdleSince(cut as u32)),
                    priority: p.recompress_priority,
                    ..RecompressRequest::default()
                };
                match crate::recompress::recompress(store, &req) {
                    Ok(r) => {
                        st.recompressed += r.recompressed;
                        st.recompress_saved_bytes += r.saved_bytes;
                        words.push(format!(
                            "recompressed {} of {} slots idle {age}s (saved {} bytes)",
                            r.recompressed, r.attempts, r.saved_bytes
                        ));
                    }
                    Err(e) => {
                        st.errors += 1;
                        words.push(format!("recompression failed: {e}"));
                    }
                }
            }
        }
        if let (Some(age), true) = (p.writeback_age, store.backing().is_some()) {
            let age = p.scaled_age(age, used, limit);
            st.last_ages.1 = Some(age);
            self.writeback_round(store, &p, age, now, &mut st, &mut words);
        }
        if st.recompressed + st.written_back_pages > before {
            // Objects left zspages half empty: give the pages back, as an operator runs
            // `compact` after `recompress` or `writeback`.
            let pages = store.pool().compact();
            st.pages_compacted += pages as u64;
            words.push(format!("compacted {pages} pages"));
        }
        if words.is_empty() {
            words.push("nothing to do".into());
        }
        st.last_round = words.join("; ");
        tracing::info!(target: "zram::policy", "policy round: {}", st.last_round);
        *self.stats.lock() = st.clone();
        st
    }

    fn writeback_round(
        &self,
        store: &Store,
        p: &Policy,
        age: u64,
        now: u64,
        st: &mut PolicyStats,
        words: &mut Vec<String>,
    ) {
        {
            let mut day = self.day_start.lock();
            if day.is_none_or(|d| d.elapsed() >= DAY) {
                *day = Some(Instant::now());
                st.day_pages = 0;
            }
        }
        let page = PAGE_SIZE as u64;
        let day_left = (p.writeback_day.bytes() / page).saturating_sub(st.day_pages);
        let mut budget = (p.writeback_round.bytes() / page).min(day_left);
        let Some(cut) = now.checked_sub(age).map(|c| c as u32) else {
            return;
        };
        for mode in [Mode::HugeIdleSince(cut), Mode::IdleSince(cut), Mode::Huge] {
            let used = store.pool().total_pages() as u64 * page;
            if used <= p.writeback_watermark.bytes() || budget == 0 {
                break;
            }
            let req = WritebackRequest {
                max_pages: budget,
                ..WritebackRequest::mode(mode)
            };
            match crate::writeback::writeback(store, &req) {
                Ok(r) => {
                    budget -= r.pages.min(budget);
                    st.day_pages += r.pages;
                    st.written_back_pages += r.pages;
                    st.written_back_bytes += r.bytes;
                    if r.pages > 0 {
                        words.push(format!(
                            "wrote back {} pages ({} bytes) of {mode:?}",
                            r.pages, r.bytes
                        ));
                    }
                }
                Err(e) => {
                    st.errors += 1;
                    words.push(format!("writeback failed: {e}"));
                    break;
                }
            }
        }
    }
}

/// The background thread running a device's policy.
#[derive(Debug)]
pub(crate) struct PolicyThread {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl PolicyThread {
    /// Starts the thread; it holds the store weakly and ends with the device.
    pub(crate) fn start(store: Weak<Store>, shared: Arc<Shared>) -> Self {
        let theirs = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("zram-policy".into())
            .spawn(move || run(&store, &theirs))
            .ok();
        Self { shared, thread }
    }
}

fn run(store: &Weak<Store>, shared: &Shared) {
    loop {
        let p = shared.policy();
        {
            let mut stop = shared.stop.lock();
            if *stop {
                return;
            }
            let wait = if p.enabled { p.interval.max(1) } else { 3600 };
            shared.wake.wait_for(&mut stop, Duration::from_secs(wait));
            if *stop {
                return;
            }
        }
        let p = shared.policy();
        if !p.enabled {
            continue;
        }
        let Some(store) = store.upgrade() else {
            return;
        };
        shared.round(&store);
    }
}

impl Drop for PolicyThread {
    fn drop(&mut self) {
        *self.shared.stop.lock() = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_read_and_print_as_words() {
        let mut p: Policy = "on writeback_age=7200 writeback_watermark=512M recompress_age=600"
            .parse()
            .unwrap();
        assert!(p.enabled);
        assert_eq!(p.writeback_age, Some(7200));
        assert_eq!(p.writeback_watermark, Size(512 << 20));
        let back: Policy = p.to_string().parse().unwrap();
        assert_eq!(back, p);
        p.apply("recompress_age=off interval=5").unwrap();
        assert_eq!((p.recompress_age, p.interval), (None, 5));
        for bad in [
            "enabled=2",
            "interval=x",
            "recompress_priority=4",
            "recompress_priority=0",
            "interval=0",
            "cold=1",
            "writeback_round=lots",
        ] {
            let before = p.clone();
            assert_eq!(p.apply(bad).unwrap_err().errno(), libc::EINVAL, "{bad}");
            assert_eq!(p, before, "a refused write changes nothing");
        }
        let t: Policy =
            toml::from_str("enabled = true\nwriteback_age = 60\nwriteback_day = \"2G\"\n").unwrap();
        assert_eq!(t.writeback_day, Size(2 << 30));
        assert!(toml::from_str::<Policy>("wrtieback_age = 60\n").is_err());
        // A config file's table is checked as words are.
        for table in [
            "interval = 0\n",
            "recompress_priority = 0\n",
            "recompress_priority = 9\n",
        ] {
            let t: Policy = toml::from_str(table).unwrap();
            assert_eq!(t.check().unwrap_err().errno(), libc::EINVAL, "{table}");
            let config = crate::ZramConfig {
                policy: t.clone(),
                ..crate::ZramConfig::default()
            };
            assert!(crate::Zram::new(config).is_err(), "{table}");
            let zram = crate::Zram::new(crate::ZramConfig::default()).unwrap();
            assert!(zram.set_policy(t).is_err(), "{table}");
        }
    }

    #[test]
    fn ages_shrink_under_pressure() {
        let p = Policy {
            min_age: 100,
            ..Policy::default()
        };
        assert_eq!(p.scaled_age(3700, 0, 0), 3700, "no limit: the age holds");
        assert_eq!(p.scaled_age(3700, 0, 1000), 3700);
        assert_eq!(p.scaled_age(3700, 500, 1000), 1900);
        assert_eq!(p.scaled_age(3700, 1000, 1000), 100);
        assert_eq!(p.scaled_age(3700, 5000, 1000), 100);
        assert_eq!(p.scaled_age(50, 900, 1000), 50, "below min_age: unchanged");
    }
}
