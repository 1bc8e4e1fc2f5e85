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
//! - `shard` is the position in the pool of the class shard (size class × shard) whose table
//!   holds the handle's entry: the object's shard (compaction moves it within), or for a
//!   handle to a shared object, or to one a merge moved to its class's home shard
//!   (`merge.rs`), maybe another shard of its class, whose entry names the object's anchor
//!   (see below);
//! - `entry` indexes the shard's [`HandleTable`]; `generation` is the entry's generation when
//!   the handle was issued: freeing bumps it, so a stale or double-freed handle is detected.
//!   Freed entries are reused oldest first, so a stale handle could only come back to life
//!   after 2^19 reuses of its entry, each after every other free entry was reused.
//!
//! An entry of the table is also a `u64`: *free*, or live and then *located* (it holds the
//! object's place) or an *alias* (it names an anchor entry, located, of this table or of
//! another shard of the same size class):
//!
//! ```text
//!            63   62        44 43 42 41 40 39          11 10      0
//! located: [ 1 ][ generation ][0][A][I][W][  zspage id   ][ object ]
//!                                3 flags      29 bits       11 bits
//! alias:   [ 1 ][ generation ][1][  0  ][ anchor's shard ][ anchor's entry ]
//!           1 bit   19 bits  1 bit 3 bits    12 bits          28 bits
//! free:    [ 0 ][ generation ][       0        ][ next free entry  ]
//!                                 16 bits             28 bits
//! ```
//!
//! A located entry names the zspage (its id in the shard) and the object index in it where
//! the object is now, and three flags: `W`ritten (`Pool::write` stored bytes in it, so its
//! bytes are the caller's: only written objects are folded or indexed), `I`ndexed (the
//! object is in its shard's content index) and `A`nchor (see below). A free entry keeps the
//! generation the next handle issued for it gets, and links the free entries oldest first.
//!
//! Shared objects (`share.rs`, `fold.rs`): an object that several handles name is located by
//! an *anchor*, an entry of its shard's table that is never handed out; every handle naming
//! the object is an alias of that anchor, in the anchor's table or in the table of another
//! shard of the object's class (an [`AnchorRef`] names the anchor's shard position, as a
//! handle does, and its entry). The alias bit (bit 43) tells an alias from a located entry
//! by its word alone: no located entry has it set. It fits because object indices need only
//! 11 bits (at most 16 pages × 4096 / 32 = 2048 objects per zspage). Aliases never name
//! aliases.

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
const ALIAS_BITS: u32 = 1;
const FLAG_BITS: u32 = 3;
const ZSPAGE_BITS: u32 = 29;
const OBJ_BITS: u32 = 11;
const _: () = assert!(LIVE_BITS + GEN_BITS + ALIAS_BITS + FLAG_BITS + ZSPAGE_BITS + OBJ_BITS == 64);
const OBJ_SHIFT: u32 = 0;
const ZSPAGE_SHIFT: u32 = OBJ_SHIFT + OBJ_BITS;
const FLAG_SHIFT: u32 = ZSPAGE_SHIFT + ZSPAGE_BITS;
const ALIAS_SHIFT: u32 = FLAG_SHIFT + FLAG_BITS;
const WORD_GEN_SHIFT: u32 = ALIAS_SHIFT + ALIAS_BITS;
const LIVE_SHIFT: u32 = WORD_GEN_SHIFT + GEN_BITS;
const LIVE: u64 = 1 << LIVE_SHIFT;
/// The bit that marks an alias; no located entry has it.
const ALIAS: u64 = 1 << ALIAS_SHIFT;
/// An alias's fields: the anchor's entry, then its shard position, below the flags.
const ANCHOR_ENTRY_SHIFT: u32 = 0;
const ANCHOR_SHARD_SHIFT: u32 = ANCHOR_ENTRY_SHIFT + ENTRY_BITS;
const _: () = assert!(ANCHOR_SHARD_SHIFT + SHARD_BITS <= FLAG_SHIFT);
/// A free entry's link to the next free entry, below its generation.
const NEXT_SHIFT: u32 = 0;
const _: () = assert!(NEXT_SHIFT + ENTRY_BITS <= WORD_GEN_SHIFT);
// Every object index of the longest zspage of the smallest objects fits in the object field.
const _: () = assert!(MAX_CHAIN_SIZE * PAGE_SIZE / MIN_ALLOC_SIZE <= 1 << OBJ_BITS);
/// Zspage ids are below this. Every zspage a class shard keeps holds at least one object,
/// which one located entry names, so a shard never has more zspages than entries (2^28).
pub(crate) const MAX_ZSPAGES: usize = 1 << ZSPAGE_BITS;
const _: () = assert!(ENTRY_BITS < ZSPAGE_BITS);

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

/// The flags of a located entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Flags(u8);

impl Flags {
    /// `Pool::write` (or `malloc_dedup`) stored the object's bytes.
    pub const WRITTEN: Flags = Flags(1);
    /// The object is in its shard's content index.
    pub const INDEXED: Flags = Flags(2);
    /// The entry is an anchor: it locates a shared object and is never handed out.
    pub const ANCHOR: Flags = Flags(4);

    /// Are all of `other`'s flags set?
    #[inline]
    pub fn has(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// These flags with `other`'s set or cleared.
    #[inline]
    pub fn with(self, other: Flags, on: bool) -> Flags {
        if on {
            Flags(self.0 | other.0)
        } else {
            Flags(self.0 & !other.0)
        }
    }
}

/// An anchor entry, in the pool: its class shard's position (as a handle names it) and its
/// entry in that shard's table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct AnchorRef {
    pub shard: usize,
    pub entry: u32,
}

/// What a live entry holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The object's place, and its flags (a direct handle's entry, or an anchor).
    Located(Location, Flags),
    /// The anchor locating the object, in this shard or another of the class.
    Alias(AnchorRef),
}

/// A live entry word (the one encoder of live entries).
fn live_word(generation: u64, slot: Slot) -> u64 {
    let fields = match slot {
        Slot::Located(loc, flags) => {
            debug_assert!((loc.zspage as usize) < MAX_ZSPAGES && loc.obj < 1 << OBJ_BITS);
            (u64::from(flags.0) << FLAG_SHIFT)
                | (u64::from(loc.zspage) << ZSPAGE_SHIFT)
                | (u64::from(loc.obj) << OBJ_SHIFT)
        }
        Slot::Alias(anchor) => {
            debug_assert!(anchor.shard < MAX_CLASS_SHARDS && anchor.entry < NO_ENTRY);
            ALIAS
                | ((anchor.shard as u64) << ANCHOR_SHARD_SHIFT)
                | (u64::from(anchor.entry) << ANCHOR_ENTRY_SHIFT)
        }
    };
    LIVE | (generation << WORD_GEN_SHIFT) | fields
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

/// What a live word holds (the one decoder of live entries).
fn word_slot(word: u64) -> Slot {
    if word & ALIAS != 0 {
        Slot::Alias(AnchorRef {
            shard: ((word >> ANCHOR_SHARD_SHIFT) & mask(SHARD_BITS)) as usize,
            entry: ((word >> ANCHOR_ENTRY_SHIFT) & ENTRY_MASK) as u32,
        })
    } else {
        let flags = Flags(((word >> FLAG_SHIFT) & mask(FLAG_BITS)) as u8);
        let zspage = ((word >> ZSPAGE_SHIFT) & mask(ZSPAGE_BITS)) as u32;
        let obj = ((word >> OBJ_SHIFT) & mask(OBJ_BITS)) as u16;
        Slot::Located(Location { zspage, obj }, flags)
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
    aliases: usize,
    /// The generation a new entry starts at: past every one a released table gave.
    base_generation: u64,
}

impl HandleTable {
    pub fn new() -> Self {
        Self {
            words: Vec::new(),
            free_head: NO_ENTRY,
            free_tail: NO_ENTRY,
            live: 0,
            aliases: 0,
            base_generation: 0,
        }
    }

    /// Lets go of the memory of a table none of whose entries is live; whether it did. New
    /// entries then start at a generation past every one the table gave, so a stale
    /// handle to one of its entries stays stale (until generations wrap, as on reuse).
    pub fn release_if_empty(&mut self) -> bool {
        if self.live != 0 || self.words.capacity() == 0 {
            return false;
        }
        let newest = self.words.iter().map(|&w| word_generation(w)).max();
        self.base_generation = newest.map_or(self.base_generation, |g| g.max(self.base_generation));
        self.words = Vec::new();
        self.free_head = NO_ENTRY;
        self.free_tail = NO_ENTRY;
        true
    }

    /// Takes an entry for a new object at `loc` (no flags set); returns `(entry,
    /// generation)`, or `None` when the table has no entry left (2^28 - 1 live entries).
    pub fn alloc(&mut self, loc: Location) -> Option<(u32, u64)> {
        self.alloc_slot(Slot::Located(loc, Flags::default()))
    }

    /// Takes an entry holding `slot`; returns `(entry, generation)`, or `None` when the
    /// table has no entry left.
    pub fn alloc_slot(&mut self, slot: Slot) -> Option<(u32, u64)> {
        let entry = if self.free_head == NO_ENTRY {
            let entry = u32::try_from(self.words.len())
                .ok()
                .filter(|&e| e != NO_ENTRY)?;
            self.words.push(free_word(self.base_generation, NO_ENTRY));
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
        self.words[entry as usize] = live_word(generation, slot);
        self.live += 1;
        if matches!(slot, Slot::Alias(_)) {
            self.aliases += 1;
        }
        Some((entry, generation))
    }

    /// What a live handle's entry holds, or `None` if the handle is stale.
    #[inline]
    pub fn get(&self, entry: u32, generation: u64) -> Option<Slot> {
        match self.words.get(entry as usize) {
            Some(&w) if is_live(w) && word_generation(w) == generation => Some(word_slot(w)),
            _ => None,
        }
    }

    /// What an entry holds if it is live, whatever its generation (an alias's anchor: its
    /// alias keeps it live, but the caller checks rather than trusts that).
    #[inline]
    pub fn live_slot(&self, entry: u32) -> Option<Slot> {
        match self.words.get(entry as usize) {
            Some(&w) if is_live(w) => Some(word_slot(w)),
            _ => None,
        }
    }

    /// What a live entry holds (the caller knows the entry is live).
    #[inline]
    pub fn slot(&self, entry: u32) -> Slot {
        let w = self.words[entry as usize];
        debug_assert!(is_live(w));
        word_slot(w)
    }

    /// The generation of an entry (live: its handles'; free: the next handle's).
    #[inline]
    pub fn generation(&self, entry: u32) -> u64 {
        word_generation(self.words[entry as usize])
    }

    /// Rewrites what a live entry holds; its generation stays.
    pub fn set(&mut self, entry: u32, slot: Slot) {
        let w = self.words[entry as usize];
        debug_assert!(is_live(w));
        let was_alias = matches!(word_slot(w), Slot::Alias(_));
        let is_alias = matches!(slot, Slot::Alias(_));
        self.aliases = self.aliases + usize::from(is_alias) - usize::from(was_alias);
        self.words[entry as usize] = live_word(word_generation(w), slot);
    }

    /// Points a located entry at a new location (compaction); its flags stay.
    pub fn relocate(&mut self, entry: u32, loc: Location) {
        match self.slot(entry) {
            Slot::Located(_, flags) => self.set(entry, Slot::Located(loc, flags)),
            Slot::Alias(_) => unreachable!("relocating alias entry {entry}"),
        }
    }

    /// Sets or clears flags of a located entry.
    pub fn set_flag(&mut self, entry: u32, flag: Flags, on: bool) {
        match self.slot(entry) {
            Slot::Located(loc, flags) => self.set(entry, Slot::Located(loc, flags.with(flag, on))),
            Slot::Alias(_) => unreachable!("flagging alias entry {entry}"),
        }
    }

    /// Releases a live entry; its generation moves on so the handle goes stale. Returns
    /// what the entry held, or `None` if the handle is stale.
    pub fn free(&mut self, entry: u32, generation: u64) -> Option<Slot> {
        let slot = self.get(entry, generation)?;
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
        if matches!(slot, Slot::Alias(_)) {
            self.aliases -= 1;
        }
        Some(slot)
    }

    /// Entries the table has (live or free).
    pub fn entries(&self) -> usize {
        self.words.len()
    }

    /// Where the object of a located entry is (the caller knows the entry is located).
    #[inline]
    pub fn location(&self, entry: u32) -> Location {
        match self.slot(entry) {
            Slot::Located(loc, _) => loc,
            Slot::Alias(_) => unreachable!("locating alias entry {entry}"),
        }
    }

    /// Live entries (located and aliases).
    pub fn live(&self) -> usize {
        self.live
    }

    /// Located entries: one per stored object.
    pub fn located(&self) -> usize {
        self.live - self.aliases
    }

    /// `(entry, generation, what it holds)` of every live entry in `range` of entries.
    pub fn iter_range(
        &self,
        range: std::ops::Range<usize>,
    ) -> impl Iterator<Item = (u32, u64, Slot)> + '_ {
        let start = range.start.min(self.words.len());
        let end = range.end.min(self.words.len());
        self.words[start..end]
            .iter()
            .enumerate()
            .filter(|&(_, &w)| is_live(w))
            .map(move |(i, &w)| ((start + i) as u32, word_generation(w), word_slot(w)))
    }

    /// `(entry, generation, location, flags)` of every located entry: one per object.
    pub fn iter_located(&self) -> impl Iterator<Item = (u32, u64, Location, Flags)> + '_ {
        self.iter_range(0..self.words.len())
            .filter_map(|(entry, generation, slot)| match slot {
                Slot::Located(loc, flags) => Some((entry, generation, loc, flags)),
                Slot::Alias(_) => None,
            })
    }

    /// `(entry, anchor)` of every alias.
    pub fn iter_aliases(&self) -> impl Iterator<Item = (u32, AnchorRef)> + '_ {
        self.iter_range(0..self.words.len())
            .filter_map(|(entry, _, slot)| match slot {
                Slot::Alias(anchor) => Some((entry, anchor)),
                Slot::Located(..) => None,
            })
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
            zspage: (MAX_ZSPAGES - 1) as u32,
            obj: (1 << OBJ_BITS) - 1,
        };
        for flags in (0..8).map(Flags) {
            let w = live_word(GEN_MASK, Slot::Located(loc, flags));
            assert!(is_live(w) && w & ALIAS == 0);
            assert_eq!(
                (word_generation(w), word_slot(w)),
                (GEN_MASK, Slot::Located(loc, flags))
            );
        }
        let far = AnchorRef {
            shard: MAX_CLASS_SHARDS - 1,
            entry: NO_ENTRY - 1,
        };
        for anchor in [far, AnchorRef { shard: 0, entry: 0 }] {
            let w = live_word(GEN_MASK, Slot::Alias(anchor));
            assert!(is_live(w) && w & ALIAS != 0);
            assert_eq!(
                (word_generation(w), word_slot(w)),
                (GEN_MASK, Slot::Alias(anchor))
            );
        }
        // The alias bit is the one bit between the flags and the generation.
        let w = live_word(0, Slot::Alias(AnchorRef { shard: 0, entry: 0 }));
        assert_eq!(w, LIVE | ALIAS);
        let all_flags = live_word(0, Slot::Located(loc, Flags(7)));
        assert_eq!(all_flags & ALIAS, 0);
        assert_eq!(ALIAS << 1, 1 << WORD_GEN_SHIFT);
        let w = free_word(GEN_MASK, NO_ENTRY - 1);
        assert!(!is_live(w));
        assert_eq!((word_generation(w), word_next(w)), (GEN_MASK, NO_ENTRY - 1));
        assert!(Flags::WRITTEN.with(Flags::ANCHOR, true).has(Flags::ANCHOR));
        assert!(!Flags::ANCHOR.with(Flags::ANCHOR, false).has(Flags::ANCHOR));
    }

    #[test]
    fn freed_entries_go_stale_and_are_reused_with_new_generation() {
        let mut t = HandleTable::new();
        let loc = Location { zspage: 3, obj: 9 };
        let located = Slot::Located(loc, Flags::default());
        let (entry, generation) = t.alloc(loc).unwrap();
        assert_eq!(t.get(entry, generation), Some(located));
        assert_eq!(t.free(entry, generation), Some(located));
        assert_eq!(t.free(entry, generation), None);
        let (entry2, generation2) = t.alloc(loc).unwrap();
        assert_eq!(entry2, entry);
        assert_ne!(generation2, generation);
        assert_eq!(t.get(entry, generation), None);
    }

    #[test]
    fn aliases_are_live_but_not_located() {
        let mut t = HandleTable::new();
        let loc = Location { zspage: 1, obj: 2 };
        let (anchor, _) = t.alloc(loc).unwrap();
        t.set_flag(anchor, Flags::ANCHOR, true);
        let here = AnchorRef {
            shard: 5,
            entry: anchor,
        };
        let (alias, g) = t.alloc_slot(Slot::Alias(here)).unwrap();
        // An alias of an anchor in another shard: the table does not look there.
        let elsewhere = AnchorRef {
            shard: 6,
            entry: 12345,
        };
        let (far, far_gen) = t.alloc_slot(Slot::Alias(elsewhere)).unwrap();
        assert_eq!((t.live(), t.located()), (3, 1));
        assert_eq!(t.get(alias, g), Some(Slot::Alias(here)));
        assert_eq!(t.get(far, far_gen), Some(Slot::Alias(elsewhere)));
        assert_eq!(t.live_slot(far), Some(Slot::Alias(elsewhere)));
        assert_eq!(t.free(far, far_gen), Some(Slot::Alias(elsewhere)));
        assert_eq!((t.live_slot(far), t.live_slot(NO_ENTRY)), (None, None));
        assert_eq!((t.live(), t.located()), (2, 1));
        t.relocate(anchor, Location { zspage: 5, obj: 0 });
        assert_eq!(
            t.slot(anchor),
            Slot::Located(Location { zspage: 5, obj: 0 }, Flags::ANCHOR)
        );
        assert_eq!(t.iter_aliases().collect::<Vec<_>>(), vec![(alias, here)]);
        assert_eq!(t.iter_located().count(), 1);
        t.set(alias, Slot::Located(loc, Flags::WRITTEN));
        assert_eq!((t.live(), t.located()), (2, 2));
        assert_eq!(t.free(alias, g), Some(Slot::Located(loc, Flags::WRITTEN)));
        assert_eq!((t.live(), t.located()), (1, 1));
    }
}
