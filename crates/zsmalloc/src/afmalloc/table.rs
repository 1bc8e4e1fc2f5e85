//! Handles and the handle table of one afmalloc heap.
//!
//! # Representation
//!
//! A handle (a [`Handle`]'s `u64`):
//!
//! ```text
//!  63      54 53   50 49          28 27         0
//! [  magic   ][ heap ][ generation  ][   entry   ]
//!    10 bits   4 bits     22 bits       28 bits
//! ```
//!
//! A table entry (one `u64` per object), by its two top bits:
//!
//! ```text
//!           63  62 61        40 39   36 35 34  32 31                 0
//! single: [ 1 ][1][ generation ][ order ][0][slack][ chunk location   ]
//! record: [ 1 ][0][ generation ][   size (12 bits)  ][ record (28 bits) ]
//! free:   [ 0 ][0][ generation ][        0          ][ next free entry  ]
//! ```
//!
//! - *single*: the object takes one chunk (its size rounded up to 8 is a power of two):
//!   the word is the chunk's place itself (cache `order`, location), and its size is
//!   `8 << order` minus `slack` (0..=7). No record: the tagged handle of the seed.
//! - *record*: any other object; `size` is its size in bytes (below 4096) and `record`
//!   the offset of its record in the heap's record store (`records.rs`): one `u32`
//!   location per chunk.
//! - *free*: the generation the next handle for this entry gets, and the next free entry
//!   (oldest first).
//!
//! # Rules
//!
//! A handle names a live object when its magic is right, its heap exists, its entry is
//! live and its generation is the entry's. Freeing bumps the generation (mod 2^22) and
//! entries are reused oldest first, so a stale handle is refused until its entry has been
//! reused 2^22 times. Compaction may trim the free entries past the last live one
//! ([`Table::trim`]): a handle past the end is refused, and an entry made again starts at
//! a generation above every handle given out for the one trimmed, so its stale handles
//! stay refused for at least 2^21 reuses. Nothing here trusts a handle's bits beyond
//! these checks.

use super::blocks::Blocks;
use crate::handle::Handle;

const fn mask(bits: u32) -> u64 {
    (1 << bits) - 1
}

// The handle.
const ENTRY_BITS: u32 = 28;
const GEN_BITS: u32 = 22;
const HEAP_BITS: u32 = 4;
const MAGIC_BITS: u32 = 10;
const _: () = assert!(ENTRY_BITS + GEN_BITS + HEAP_BITS + MAGIC_BITS == 64);
const GEN_SHIFT: u32 = ENTRY_BITS;
const HEAP_SHIFT: u32 = GEN_SHIFT + GEN_BITS;
const MAGIC_SHIFT: u32 = HEAP_SHIFT + HEAP_BITS;
const MAGIC: u64 = 0b10_1001_1011;
const _: () = assert!(MAGIC <= mask(MAGIC_BITS));
const GEN_MASK: u64 = mask(GEN_BITS);
/// Most heaps an allocator has.
pub(super) const MAX_HEAPS: usize = 1 << HEAP_BITS;
/// End of the free list, and one past the largest entry.
const NO_ENTRY: u32 = mask(ENTRY_BITS) as u32;

// The entry word.
const LIVE: u64 = 1 << 63;
const SINGLE: u64 = 1 << 62;
const WORD_GEN_SHIFT: u32 = 40;
const ORDER_SHIFT: u32 = 36;
const SLACK_SHIFT: u32 = 32;
const SIZE_SHIFT: u32 = 28;
const SIZE_BITS: u32 = 12;
const _: () = assert!(WORD_GEN_SHIFT + GEN_BITS == 62);
const _: () = assert!(SIZE_SHIFT + SIZE_BITS == WORD_GEN_SHIFT);
/// Record offsets are below this.
pub(super) const MAX_RECORD: usize = 1 << ENTRY_BITS;

/// Packs a handle.
pub(super) fn encode(heap: usize, generation: u64, entry: u32) -> Handle {
    Handle::from_raw(
        (MAGIC << MAGIC_SHIFT)
            | ((heap as u64) << HEAP_SHIFT)
            | ((generation & GEN_MASK) << GEN_SHIFT)
            | u64::from(entry),
    )
}

/// Unpacks `(heap, generation, entry)`, or `None` when the magic is wrong.
pub(super) fn decode(handle: Handle) -> Option<(usize, u64, u32)> {
    let raw = handle.to_raw();
    if raw >> MAGIC_SHIFT != MAGIC {
        return None;
    }
    let heap = ((raw >> HEAP_SHIFT) & mask(HEAP_BITS)) as usize;
    let generation = (raw >> GEN_SHIFT) & GEN_MASK;
    let entry = (raw & mask(ENTRY_BITS)) as u32;
    Some((heap, generation, entry))
}

/// A live entry's object: where its bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Object {
    /// One chunk of cache `order` at `loc`; the object has `size` bytes.
    Single { order: usize, size: usize, loc: u32 },
    /// `size` bytes in the chunks the record at `record` lists.
    Record { size: usize, record: u32 },
}

impl Object {
    /// The object's size in bytes.
    pub fn size(self) -> usize {
        match self {
            Object::Single { size, .. } | Object::Record { size, .. } => size,
        }
    }
}

fn live_word(generation: u64, object: Object) -> u64 {
    let body = match object {
        Object::Single { order, size, loc } => {
            let slack = (8usize << order) - size;
            debug_assert!(order < 16 && slack < 8);
            SINGLE
                | ((order as u64) << ORDER_SHIFT)
                | ((slack as u64) << SLACK_SHIFT)
                | u64::from(loc)
        }
        Object::Record { size, record } => {
            debug_assert!(size < 1 << SIZE_BITS && (record as usize) < MAX_RECORD);
            ((size as u64) << SIZE_SHIFT) | u64::from(record)
        }
    };
    LIVE | (generation << WORD_GEN_SHIFT) | body
}

fn free_word(generation: u64, next: u32) -> u64 {
    (generation << WORD_GEN_SHIFT) | u64::from(next)
}

fn word_generation(word: u64) -> u64 {
    (word >> WORD_GEN_SHIFT) & GEN_MASK
}

fn word_object(word: u64) -> Option<Object> {
    if word & LIVE == 0 {
        return None;
    }
    Some(if word & SINGLE != 0 {
        let order = ((word >> ORDER_SHIFT) & 0xF) as usize;
        let slack = ((word >> SLACK_SHIFT) & 0x7) as usize;
        Object::Single {
            order,
            size: (8 << order) - slack,
            loc: word as u32,
        }
    } else {
        Object::Record {
            size: ((word >> SIZE_SHIFT) & mask(SIZE_BITS)) as usize,
            record: (word & mask(ENTRY_BITS)) as u32,
        }
    })
}

/// Compaction trims the table only while the generations it would forget are at most
/// this, so that an entry made again, which starts at the largest generation forgotten,
/// refuses the stale handles of the one trimmed for at least `2^22 - TRIM_GEN_LIMIT`
/// reuses.
const TRIM_GEN_LIMIT: u64 = 1 << (GEN_BITS - 1);

/// A heap's handle table: one word per entry, free entries linked oldest first.
#[derive(Debug)]
pub(super) struct Table {
    words: Blocks<u64>,
    free_head: u32,
    free_tail: u32,
    live: usize,
    /// The generation an entry gets when the table grows: above every generation of a
    /// handle ever given out for an entry at or past the table's end (`trim`).
    regrow_gen: u64,
    /// Some entry's generation wrapped round (then `trim` never trims again).
    wrapped: bool,
}

impl Table {
    pub fn new() -> Self {
        Self {
            words: Blocks::new(),
            free_head: NO_ENTRY,
            free_tail: NO_ENTRY,
            live: 0,
            regrow_gen: 0,
            wrapped: false,
        }
    }

    /// Takes an entry for `object`; `(entry, generation)`, or `None` when the table is full.
    pub fn alloc(&mut self, object: Object) -> Option<(u32, u64)> {
        let entry = if self.free_head == NO_ENTRY {
            let entry = u32::try_from(self.words.len())
                .ok()
                .filter(|&e| e != NO_ENTRY)?;
            self.words.push(free_word(self.regrow_gen, NO_ENTRY));
            entry
        } else {
            let entry = self.free_head;
            let next = (*self.words.get(entry as usize) & mask(ENTRY_BITS)) as u32;
            self.free_head = next;
            if next == NO_ENTRY {
                self.free_tail = NO_ENTRY;
            }
            entry
        };
        let word = self.words.get_mut(entry as usize);
        let generation = word_generation(*word);
        *word = live_word(generation, object);
        self.live += 1;
        Some((entry, generation))
    }

    /// The object a handle's `(entry, generation)` names, if it is live.
    pub fn get(&self, entry: u32, generation: u64) -> Option<Object> {
        if entry as usize >= self.words.len() {
            return None;
        }
        let word = *self.words.get(entry as usize);
        if word_generation(word) != generation {
            return None;
        }
        word_object(word)
    }

    /// The object at `entry`, if live (whatever its generation).
    pub fn object(&self, entry: usize) -> Option<Object> {
        word_object(*self.words.get(entry))
    }

    /// Points a live entry at its object's new place (compaction).
    pub fn relocate(&mut self, entry: usize, object: Object) {
        let word = self.words.get_mut(entry);
        *word = live_word(word_generation(*word), object);
    }

    /// Frees a live entry, bumping its generation and queueing it last for reuse.
    pub fn free(&mut self, entry: u32) {
        let word = self.words.get_mut(entry as usize);
        let generation = (word_generation(*word) + 1) & GEN_MASK;
        *word = free_word(generation, NO_ENTRY);
        self.wrapped |= generation == 0;
        if self.free_tail == NO_ENTRY {
            self.free_head = entry;
        } else {
            let tail = self.words.get_mut(self.free_tail as usize);
            *tail = free_word(word_generation(*tail), entry);
        }
        self.free_tail = entry;
        self.live -= 1;
    }

    /// Drops the free entries past the last live one, when that frees a block and no
    /// generation is lost that a stale handle could meet again soon: the table's
    /// generations never wrapped and those forgotten are at most `TRIM_GEN_LIMIT`. Entries
    /// made again start at the largest generation forgotten (`regrow_gen`), which is above
    /// every handle given out for them, so a stale handle of a trimmed entry is refused
    /// (past the end, then by generation for at least 2^21 reuses). Returns the blocks
    /// dropped.
    pub fn trim(&mut self) -> usize {
        if self.wrapped {
            return 0;
        }
        let mut end = self.words.len();
        let mut forgotten = self.regrow_gen;
        while end > 0 {
            let word = *self.words.get(end - 1);
            if word & LIVE != 0 {
                break;
            }
            forgotten = forgotten.max(word_generation(word));
            end -= 1;
        }
        if Blocks::<u64>::blocks_for(end) == self.words.blocks() || forgotten > TRIM_GEN_LIMIT {
            return 0;
        }
        // Unlink the entries from `end`, keeping the others' order (oldest first).
        let (mut head, mut tail) = (NO_ENTRY, NO_ENTRY);
        let mut e = self.free_head;
        let mut steps = 0;
        while e != NO_ENTRY && (e as usize) < self.words.len() && steps <= self.words.len() {
            let next = (*self.words.get(e as usize) & mask(ENTRY_BITS)) as u32;
            if (e as usize) < end {
                let word = self.words.get_mut(e as usize);
                *word = free_word(word_generation(*word), NO_ENTRY);
                if tail == NO_ENTRY {
                    head = e;
                } else {
                    let last = self.words.get_mut(tail as usize);
                    *last = free_word(word_generation(*last), e);
                }
                tail = e;
            }
            e = next;
            steps += 1;
        }
        self.free_head = head;
        self.free_tail = tail;
        self.regrow_gen = forgotten;
        self.words.truncate(end)
    }

    /// Checks the trimming state: `regrow_gen` within the limit, the entries in exactly
    /// the blocks they need.
    pub fn check_trim(&self) -> Result<(), String> {
        if self.regrow_gen > TRIM_GEN_LIMIT {
            return Err(format!("table: regrow generation {}", self.regrow_gen));
        }
        if !self.words.is_tight() {
            return Err("table: blocks disagree with its length".into());
        }
        Ok(())
    }

    /// Entries (live and free).
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Live entries.
    pub fn live(&self) -> usize {
        self.live
    }

    /// Free entries on the free list, walked from its head.
    pub fn free_listed(&self) -> usize {
        let mut n = 0;
        let mut e = self.free_head;
        while e != NO_ENTRY && n <= self.words.len() {
            if e as usize >= self.words.len() {
                return usize::MAX;
            }
            let word = *self.words.get(e as usize);
            n += 1;
            e = (word & mask(ENTRY_BITS)) as u32;
        }
        n
    }

    /// Bytes the table holds.
    pub fn metadata_bytes(&self) -> usize {
        self.words.metadata_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn single() -> Object {
        Object::Single {
            order: 0,
            size: 8,
            loc: 0,
        }
    }

    /// A table of `n` entries whose last `n - keep` are freed.
    fn table(n: usize, keep: usize) -> (Table, Vec<(u32, u64)>) {
        let mut t = Table::new();
        let named: Vec<_> = (0..n).map(|_| t.alloc(single()).unwrap()).collect();
        for &(e, _) in &named[keep..] {
            t.free(e);
        }
        (t, named)
    }

    #[test]
    fn trim_drops_the_free_tail_and_regrown_entries_refuse_stale_handles() {
        let (mut t, named) = table(2000, 10);
        // Some churn below the tail, so the free list mixes kept and trimmed entries.
        t.free(named[3].0);
        assert!(t.trim() > 0);
        assert_eq!((t.len(), t.live(), t.free_listed()), (10, 9, 1));
        assert_eq!(t.regrow_gen, 1);
        t.check_trim().unwrap();
        for &(e, g) in &named[10..] {
            assert_eq!(t.get(e, g), None);
        }
        // Entry 3 is reused first, then the table grows at generation 1.
        assert_eq!(t.alloc(single()), Some((3, 1)));
        for &(e, g) in &named[10..] {
            let (again, generation) = t.alloc(single()).unwrap();
            assert_eq!((again, generation), (e, 1));
            assert_eq!(t.get(e, g), None);
        }
    }

    #[test]
    fn no_trim_when_a_generation_wrapped_or_nothing_to_free() {
        let (mut t, _) = table(2000, 1990);
        assert_eq!(t.trim(), 0, "no whole block to free");
        // A forgotten generation above the limit: kept.
        let mut t = Table::new();
        let e = t.alloc(single()).unwrap().0;
        for _ in 0..=TRIM_GEN_LIMIT {
            t.free(e);
            assert_eq!(t.alloc(single()).unwrap().0, e);
        }
        let more: Vec<_> = (0..2000).map(|_| t.alloc(single()).unwrap().0).collect();
        t.free(e);
        for e in more {
            t.free(e);
        }
        assert_eq!(t.trim(), 0);
        assert_eq!(t.len(), 2001);
        // A wrapped generation: never trimmed again.
        let mut t = Table::new();
        let e = t.alloc(single()).unwrap().0;
        for _ in 0..=GEN_MASK {
            t.free(e);
            assert_eq!(t.alloc(single()).unwrap().0, e);
        }
        assert!(t.wrapped);
        let more: Vec<_> = (0..2000).map(|_| t.alloc(single()).unwrap().0).collect();
        for e in more {
            t.free(e);
        }
        assert_eq!(t.trim(), 0);
        assert_eq!(t.len(), 2001);
    }
}
