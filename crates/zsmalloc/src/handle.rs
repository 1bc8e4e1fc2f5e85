//! Handles: the stable names of objects, and the per-shard table that maps them to places.
//!
//! A [`Handle`] is a `u64` (widths: the `*_BITS` constants below; shifts derive from them):
//!
//! ```text
//!  63   59 58       47 46        28 27         0
//! [ magic ][  shard   ][ generation ][   entry   ]
//!   5 bits   12 bits      19 bits       28 bits
//! ```
//!
//! - `magic` is [`HANDLE_MAGIC`], so zero or a small integer is never a valid handle;
//! - `shard` is the position of the object's class shard (size class × shard) in the pool;
//!   objects never leave it (compaction moves them within it), so a handle names it for
//!   life;
//! - `entry` indexes the shard's [`HandleTable`]; `generation` is the entry's generation when
//!   the handle was issued: freeing bumps it, so a stale or double-freed handle is detected.
//!   Freed entries are reused oldest first, so a stale handle could only come back to life
//!   after 2^19 reuses of its entry, each after every other free entry was reused.
//!
//! An entry of the table is also a `u64`, either *live* or *free*:
//!
//! ```text
//!         63   62        44 43          12 11      0
//! live: [ 1 ][ generation ][   zspage id  ][ object ]
//!        1 bit   19 bits       32 bits       12 bits
//! free: [ 0 ][ generation ][ 0 ][ next free entry  ]
//!                          16 bits    28 bits
//! ```
//!
//! A live entry names the zspage (its id in the shard) and the object index in it where the
//! object is now; a free entry keeps the generation the next handle issued for it gets, and
//! links the free entries oldest first.

use crate::class::{MAX_CHAIN_SIZE, MIN_ALLOC_SIZE};
use crate::sys::PAGE_SIZE;

/// `(1 << bits) - 1`.
const fn mask(bits: u32) -> u64 {
    (1 << bits) - 1
}

// The handle word.
const MAGIC_BITS: u32 = 5;
const SHARD_BITS: u32 = 12;
const GEN_BITS: u32 = 19;
const ENTRY_BITS: u32 = 28;
const _: () = assert!(MAGIC_BITS + SHARD_BITS + GEN_BITS + ENTRY_BITS == 64);
const ENTRY_SHIFT: u32 = 0;
const GEN_SHIFT: u32 = ENTRY_SHIFT + ENTRY_BITS;
const SHARD_SHIFT: u32 = GEN_SHIFT + GEN_BITS;
const MAGIC_SHIFT: u32 = SHARD_SHIFT + SHARD_BITS;
const GEN_MASK: u64 = mask(GEN_BITS);
const ENTRY_MASK: u64 = mask(ENTRY_BITS);

/// Top bits of every handle.
const HANDLE_MAGIC: u64 = 0b10101;
const _: () = assert!(HANDLE_MAGIC <= mask(MAGIC_BITS));
/// Most class shards a pool can have (size classes × shards per class).
pub(crate) const MAX_CLASS_SHARDS: usize = 1 << SHARD_BITS;
/// "No entry": the end of the free list, and one past the largest entry index.
const NO_ENTRY: u32 = ENTRY_MASK as u32;

// The table-entry word; its generation has the handle's `GEN_BITS`.
const LIVE_BITS: u32 = 1;
const ZSPAGE_BITS: u32 = 32;
const OBJ_BITS: u32 = 12;
const _: () = assert!(LIVE_BITS + GEN_BITS + ZSPAGE_BITS + OBJ_BITS == 64);
const OBJ_SHIFT: u32 = 0;
const ZSPAGE_SHIFT: u32 = OBJ_SHIFT + OBJ_BITS;
const WORD_GEN_SHIFT: u32 = ZSPAGE_SHIFT + ZSPAGE_BITS;
const LIVE_SHIFT: u32 = WORD_GEN_SHIFT + GEN_BITS;
const LIVE: u64 = 1 << LIVE_SHIFT;
/// A free entry's link to the next free entry, below its generation.
const NEXT_SHIFT: u32 = 0;
const _: () = assert!(NEXT_SHIFT + ENTRY_BITS <= WORD_GEN_SHIFT);
// Every object index of the longest zspage of the smallest objects fits, and so does every
// zspage id (`Location::zspage` is a `u32`).
const _: () = assert!(MAX_CHAIN_SIZE * PAGE_SIZE / MIN_ALLOC_SIZE <= 1 << OBJ_BITS);
const _: () = assert!(ZSPAGE_BITS == u32::BITS);

/// The stable name of an object in a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(u64);

impl Handle {
    /// Packs the fields (the one encoder).
    pub(crate) fn encode(shard: usize, generation: u64, entry: u32) -> Self {
        debug_assert!(shard < MAX_CLASS_SHARDS && generation <= GEN_MASK && entry < NO_ENTRY);
        Self(
            (HANDLE_MAGIC << MAGIC_SHIFT)
                | ((shard as u64) << SHARD_SHIFT)
                | (generation << GEN_SHIFT)
                | (u64::from(entry) << ENTRY_SHIFT),
        )
    }

    /// Unpacks `(shard, generation, entry)` (the one decoder), or `None` when the magic is
    /// wrong.
    pub(crate) fn decode(self) -> Option<(usize, u64, u32)> {
        if !is_handle_word(self.0) {
            return None;
        }
        let shard = ((self.0 >> SHARD_SHIFT) & mask(SHARD_BITS)) as usize;
        let generation = (self.0 >> GEN_SHIFT) & GEN_MASK;
        let entry = ((self.0 >> ENTRY_SHIFT) & ENTRY_MASK) as u32;
        Some((shard, generation, entry))
    }

    /// The raw value, e.g. to keep it in a table.
    pub fn to_raw(self) -> u64 {
        self.0
    }

    /// A handle from a raw value; validity is checked when it is used.
    pub fn from_raw(raw: u64) -> Self {
        Self(raw)
    }
}

impl std::fmt::Display for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#018x}", self.0)
    }
}

/// Does this word carry the handle magic (an allocated object's header does)?
pub(crate) fn is_handle_word(word: u64) -> bool {
    word >> MAGIC_SHIFT == HANDLE_MAGIC
}

/// Where an object lives inside its class shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    pub zspage: u32,
    pub obj: u16,
}

/// A live entry word (the one encoder of live entries).
fn live_word(generation: u64, loc: Location) -> u64 {
    LIVE | (generation << WORD_GEN_SHIFT)
        | (u64::from(loc.zspage) << ZSPAGE_SHIFT)
        | (u64::from(loc.obj) << OBJ_SHIFT)
}

/// A free entry word (the one encoder of free entries).
fn free_word(generation: u64, next: u32) -> u64 {
    (generation << WORD_GEN_SHIFT) | (u64::from(next) << NEXT_SHIFT)
}

fn is_live(word: u64) -> bool {
    word & LIVE != 0
}

fn word_generation(word: u64) -> u64 {
    (word >> WORD_GEN_SHIFT) & GEN_MASK
}

fn word_location(word: u64) -> Location {
    Location {
        zspage: ((word >> ZSPAGE_SHIFT) & mask(ZSPAGE_BITS)) as u32,
        obj: ((word >> OBJ_SHIFT) & mask(OBJ_BITS)) as u16,
    }
}

fn word_next(word: u64) -> u32 {
    ((word >> NEXT_SHIFT) & ENTRY_MASK) as u32
}

/// Per-shard map from handle-table entries to locations, with a free list of entries.
#[derive(Debug)]
pub(crate) struct HandleTable {
    words: Vec<u64>,
    free_head: u32,
    free_tail: u32,
    live: usize,
}

impl HandleTable {
    pub fn new() -> Self {
        Self {
            words: Vec::new(),
            free_head: NO_ENTRY,
            free_tail: NO_ENTRY,
            live: 0,
        }
    }

    /// Takes an entry for a new object at `loc`; returns `(entry, generation)`, or `None`
    /// when the table has no entry left (2^28 - 1 live objects).
    pub fn alloc(&mut self, loc: Location) -> Option<(u32, u64)> {
        let entry = if self.free_head == NO_ENTRY {
            let entry = u32::try_from(self.words.len())
                .ok()
                .filter(|&e| e != NO_ENTRY)?;
            self.words.push(free_word(0, NO_ENTRY));
            entry
        } else {
            let entry = self.free_head;
            self.free_head = word_next(self.words[entry as usize]);
            if self.free_head == NO_ENTRY {
                self.free_tail = NO_ENTRY;
            }
            entry
        };
        let generation = word_generation(self.words[entry as usize]);
        self.words[entry as usize] = live_word(generation, loc);
        self.live += 1;
        Some((entry, generation))
    }

    /// The location of a live handle's object, or `None` if the handle is stale.
    pub fn get(&self, entry: u32, generation: u64) -> Option<Location> {
        match self.words.get(entry as usize) {
            Some(&w) if is_live(w) && word_generation(w) == generation => Some(word_location(w)),
            _ => None,
        }
    }

    /// Points a live entry at a new location (compaction).
    pub fn relocate(&mut self, entry: u32, loc: Location) {
        let w = self.words[entry as usize];
        debug_assert!(is_live(w));
        self.words[entry as usize] = live_word(word_generation(w), loc);
    }

    /// Releases a live entry; its generation moves on so the handle goes stale. Returns
    /// where the object was, or `None` if the handle is stale.
    pub fn free(&mut self, entry: u32, generation: u64) -> Option<Location> {
        let loc = self.get(entry, generation)?;
        let next_gen = (generation + 1) & GEN_MASK;
        self.words[entry as usize] = free_word(next_gen, NO_ENTRY);
        if self.free_tail == NO_ENTRY {
            self.free_head = entry;
        } else {
            let tail = &mut self.words[self.free_tail as usize];
            *tail = free_word(word_generation(*tail), entry);
        }
        self.free_tail = entry;
        self.live -= 1;
        Some(loc)
    }

    /// Entries the table has (live or free).
    pub fn entries(&self) -> usize {
        self.words.len()
    }

    /// Where the object of a live entry is (the caller knows the entry is live).
    pub fn location(&self, entry: u32) -> Location {
        let w = self.words[entry as usize];
        debug_assert!(is_live(w));
        word_location(w)
    }

    /// Live handles.
    pub fn live(&self) -> usize {
        self.live
    }

    /// `(entry, generation, location)` of every live handle.
    pub fn iter_live(&self) -> impl Iterator<Item = (u32, u64, Location)> + '_ {
        self.words
            .iter()
            .enumerate()
            .filter(|&(_, &w)| is_live(w))
            .map(|(i, &w)| (i as u32, word_generation(w), word_location(w)))
    }

    /// Bytes of memory the table holds.
    pub fn metadata_bytes(&self) -> usize {
        self.words.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_roundtrip() {
        let h = Handle::encode(MAX_CLASS_SHARDS - 1, GEN_MASK, NO_ENTRY - 1);
        assert_eq!(
            h.decode(),
            Some((MAX_CLASS_SHARDS - 1, GEN_MASK, NO_ENTRY - 1))
        );
        assert_eq!(h.to_raw() >> MAGIC_SHIFT, HANDLE_MAGIC);
        assert_eq!(Handle::from_raw(0).decode(), None);
        assert_eq!(Handle::from_raw(12345).decode(), None);
    }

    #[test]
    fn entry_words_roundtrip() {
        let loc = Location {
            zspage: u32::MAX,
            obj: (1 << OBJ_BITS) - 1,
        };
        let w = live_word(GEN_MASK, loc);
        assert!(is_live(w));
        assert_eq!((word_generation(w), word_location(w)), (GEN_MASK, loc));
        let w = free_word(GEN_MASK, NO_ENTRY - 1);
        assert!(!is_live(w));
        assert_eq!((word_generation(w), word_next(w)), (GEN_MASK, NO_ENTRY - 1));
    }

    #[test]
    fn freed_entries_go_stale_and_are_reused_with_new_generation() {
        let mut t = HandleTable::new();
        let loc = Location { zspage: 3, obj: 9 };
        let (entry, generation) = t.alloc(loc).unwrap();
        assert_eq!(t.get(entry, generation), Some(loc));
        assert_eq!(t.free(entry, generation), Some(loc));
        assert_eq!(t.free(entry, generation), None);
        let (entry2, generation2) = t.alloc(loc).unwrap();
        assert_eq!(entry2, entry);
        assert_ne!(generation2, generation);
        assert_eq!(t.get(entry, generation), None);
    }
}
