//! Shared objects a post-processing pass meets (seed 004: after `fold`, or with `dedup`,
//! several slots may name one stored object through different handles): what the pass did
//! with each, so that the slots sharing an object are worked on once — recompression
//! encodes the object once, writeback writes it once.
//!
//! # Representation
//!
//! A map from a *key* — the object's id ([`Pool::object_id`]) and whatever else the pass's
//! result depends on (the stream's length, …) — to the pass's *record* for it. Each entry
//! holds a *pin*: one more handle to the object, taken when the entry is made, so that the
//! object lives as long as the entry and its id names no other object meanwhile (the id of
//! a freed object may be given to a new one).
//!
//! A pin does not hold against `fold`, which may point the pin's handle at an identical
//! object and free the one it named: a lookup therefore checks that the pin still names
//! the key's id, and closes the entry when it does not. (Anything the pin names then holds
//! the same bytes, so no record is ever wrong for a slot that finds it; the check only
//! keeps a recycled id from finding a record.)
//!
//! # Rules
//!
//! - Only objects that are shared when met are recorded (more than one handle).
//! - An entry is *closed* when its pin is its object's last handle (no slot can meet the
//!   object again), when its pin no longer names the key's id, and when the pass ends:
//!   the pin is freed (with the object, if it was the last handle) and the record handed to
//!   the pass ([`Seen::take_closed`]) to let go of what it holds.

use std::collections::HashMap;
use std::hash::Hash;

use zsmalloc::{Backend, Handle};

use crate::error::Result;

/// An entry: the pin, its stream's length, the record.
#[derive(Debug)]
struct Entry<T> {
    pin: Handle,
    len: usize,
    record: T,
}

/// The shared objects a pass met, keyed by (object id, `K`), with a record `T` each.
#[derive(Debug)]
pub(crate) struct Seen<'a, K: Hash + Eq + Copy, T: Copy> {
    pool: &'a dyn Backend,
    map: HashMap<(u64, K), Entry<T>>,
    closed: Vec<T>,
}

impl<'a, K: Hash + Eq + Copy, T: Copy> Seen<'a, K, T> {
    /// Nothing seen yet.
    pub(crate) fn new(pool: &'a dyn Backend) -> Self {
        Self {
            pool,
            map: HashMap::new(),
            closed: Vec::new(),
        }
    }

    /// The id of the object `head` names when more than one handle names it.
    pub(crate) fn shared_id(&self, head: Handle) -> Result<Option<u64>> {
        if self.pool.refs(head)? > 1 {
            Ok(Some(self.pool.object_id(head)?))
        } else {
            Ok(None)
        }
    }

    /// The record of `key`, if its object is still the one the key's id names.
    pub(crate) fn get(&mut self, key: (u64, K)) -> Option<T> {
        let entry = self.map.get(&key)?;
        if self.pool.object_id(entry.pin).is_ok_and(|id| id == key.0) {
            return Some(entry.record);
        }
        self.close(key);
        None
    }

    /// Records `record` under `key`, pinning the object (of a `len`-byte stream) that
    /// `head` names, or replaces the record when `key` has an entry. False when the object
    /// could not be pinned: nothing is recorded then.
    pub(crate) fn record(&mut self, key: (u64, K), head: Handle, len: usize, record: T) -> bool {
        if self.update(key, record) {
            return true;
        }
        match self.pool.share(head) {
            Ok(pin) => {
                self.map.insert(key, Entry { pin, len, record });
                true
            }
            Err(_) => false,
        }
    }

    /// Replaces the record of `key`, if it has an entry (whether it had one).
    pub(crate) fn update(&mut self, key: (u64, K), record: T) -> bool {
        match self.map.get_mut(&key) {
            Some(entry) => {
                entry.record = record;
                true
            }
            None => false,
        }
    }

    /// Closes the entry of `key` when its pin is the only handle left to its object.
    pub(crate) fn close_if_alone(&mut self, key: (u64, K)) {
        let alone = self
            .map
            .get(&key)
            .is_some_and(|e| self.pool.refs(e.pin).is_ok_and(|n| n <= 1));
        if alone {
            self.close(key);
        }
    }

    /// Closes every entry.
    pub(crate) fn close_all(&mut self) {
        let keys: Vec<_> = self.map.keys().copied().collect();
        for key in keys {
            self.close(key);
        }
    }

    /// The records of the entries closed since the last call.
    pub(crate) fn take_closed(&mut self) -> Vec<T> {
        std::mem::take(&mut self.closed)
    }

    /// Closes the entry of `key`, if it has one.
    pub(crate) fn close(&mut self, key: (u64, K)) {
        if let Some(e) = self.map.remove(&key) {
            crate::chain::free(self.pool, e.pin, e.len);
            self.closed.push(e.record);
        }
    }
}

impl<K: Hash + Eq + Copy, T: Copy> Drop for Seen<'_, K, T> {
    fn drop(&mut self) {
        self.close_all();
    }
}
