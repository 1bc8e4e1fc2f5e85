//! Handles: the stable names of objects, and the per-class table that maps them to places.
//!
//! Bit budget of a [`Handle`] (a `u64`):
//!
//! ```text
//!  63   59 58       47 46        28 27         0
//! [ magic ][   unit   ][ generation ][   slot    ]
//!   5 bits   12 bits      19 bits       28 bits
//! ```
//!
//! - `magic` is [`HANDLE_MAGIC`], so zero or a small integer is never a valid handle;
//! - `unit` is the position of the object's class shard (size class × shard) in the pool;
//!   objects never leave it (compaction moves them within it), so a handle names it for
//!   life;
//! - `slot` indexes the unit's [`HandleTable`]; `generation` is the slot's generation when
//!   the handle was issued: freeing bumps it, so a stale or double-freed handle is detected.
//!   Freed slots are reused oldest first, so a stale handle could only come back to life
//!   after 2^19 reuses of its slot, each after every other free slot was reused.
//!
//! A table entry (also a `u64`) is either *live*: bit 63 set, `generation` in bits 48..63, the
//! zspage id in bits 16..48 and the object index in bits 0..16; or *free*: bit 63 clear,
//! `generation` in bits 48..63 and the next free slot in bits 0..32.

use crate::error::{Error, Result};

/// Top 5 bits of every handle.
pub const HANDLE_MAGIC: u64 = 0b10101;
const MAGIC_SHIFT: u32 = 59;
const UNIT_SHIFT: u32 = 47;
const UNIT_MASK: u64 = (1 << 12) - 1;
/// Most class shards a pool can have (`unit` has 12 bits).
pub const MAX_UNITS: usize = 1 << 12;
const GEN_BITS: u32 = 19;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
const GEN_SHIFT: u32 = 28;
const SLOT_MASK: u64 = (1 << GEN_SHIFT) - 1;
/// "No slot": the end of the free list, and one past the largest slot.
const NO_SLOT: u32 = SLOT_MASK as u32;
/// Entry layout: bit 63 live; generation in bits 44..63; zspage id in 12..44; object 0..12.
const ENTRY_GEN_SHIFT: u32 = 44;
const ENTRY_ZSPAGE_SHIFT: u32 = 12;
const ENTRY_OBJ_MASK: u64 = (1 << ENTRY_ZSPAGE_SHIFT) - 1;
const LIVE: u64 = 1 << 63;

/// The stable name of an object in a pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Handle(u64);

impl Handle {
    /// Packs the fields (the one encoder).
    pub(crate) fn encode(unit: usize, generation: u64, slot: u32) -> Self {
        debug_assert!(unit < MAX_UNITS && generation <= GEN_MASK);
        Self(
            (HANDLE_MAGIC << MAGIC_SHIFT)
                | ((unit as u64) << UNIT_SHIFT)
                | (generation << GEN_SHIFT)
                | u64::from(slot),
        )
    }

    /// Unpacks `(unit, generation, slot)` (the one decoder), or `None` when the magic is
    /// wrong.
    pub(crate) fn decode(self) -> Option<(usize, u64, u32)> {
        if !is_handle_word(self.0) {
            return None;
        }
        let unit = ((self.0 >> UNIT_SHIFT) & UNIT_MASK) as usize;
        let generation = (self.0 >> GEN_SHIFT) & GEN_MASK;
        let slot = (self.0 & SLOT_MASK) as u32;
        Some((unit, generation, slot))
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

/// Where an object lives inside its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    pub zspage: u32,
    pub obj: u16,
}

/// Per-class map from handle slots to locations, with a free list of slots.
#[derive(Debug)]
pub(crate) struct HandleTable {
    entries: Vec<u64>,
    free_head: u32,
    free_tail: u32,
    live: usize,
}

impl HandleTable {
    pub fn new() -> Self {
        Self {
            entries: Vec::new(),
            free_head: NO_SLOT,
            free_tail: NO_SLOT,
            live: 0,
        }
    }

    fn live_entry(generation: u64, loc: Location) -> u64 {
        LIVE | (generation << ENTRY_GEN_SHIFT)
            | (u64::from(loc.zspage) << ENTRY_ZSPAGE_SHIFT)
            | u64::from(loc.obj)
    }

    fn entry_gen(entry: u64) -> u64 {
        (entry >> ENTRY_GEN_SHIFT) & GEN_MASK
    }

    /// Takes a slot for a new object at `loc`; returns `(slot, generation)`.
    pub fn alloc(&mut self, loc: Location) -> Result<(u32, u64)> {
        let slot = if self.free_head == NO_SLOT {
            let slot = u32::try_from(self.entries.len())
                .ok()
                .filter(|&s| s != NO_SLOT)
                .ok_or(Error::TooManyObjects)?;
            self.entries.push(0);
            slot
        } else {
            let slot = self.free_head;
            self.free_head = (self.entries[slot as usize] & SLOT_MASK) as u32;
            if self.free_head == NO_SLOT {
                self.free_tail = NO_SLOT;
            }
            slot
        };
        let generation = Self::entry_gen(self.entries[slot as usize]);
        self.entries[slot as usize] = Self::live_entry(generation, loc);
        self.live += 1;
        Ok((slot, generation))
    }

    /// The location of a live handle's object.
    pub fn get(&self, handle: Handle, slot: u32, generation: u64) -> Result<Location> {
        match self.entries.get(slot as usize) {
            Some(&e) if e & LIVE != 0 && Self::entry_gen(e) == generation => Ok(Location {
                zspage: ((e >> ENTRY_ZSPAGE_SHIFT) & 0xFFFF_FFFF) as u32,
                obj: (e & ENTRY_OBJ_MASK) as u16,
            }),
            _ => Err(Error::StaleHandle(handle)),
        }
    }

    /// Points a live slot at a new location (compaction).
    pub fn relocate(&mut self, slot: u32, loc: Location) {
        let e = self.entries[slot as usize];
        debug_assert!(e & LIVE != 0);
        self.entries[slot as usize] = Self::live_entry(Self::entry_gen(e), loc);
    }

    /// Releases a live slot; its generation moves on so the handle goes stale.
    pub fn free(&mut self, handle: Handle, slot: u32, generation: u64) -> Result<Location> {
        let loc = self.get(handle, slot, generation)?;
        let next_gen = (generation + 1) & GEN_MASK;
        self.entries[slot as usize] = (next_gen << ENTRY_GEN_SHIFT) | u64::from(NO_SLOT);
        if self.free_tail == NO_SLOT {
            self.free_head = slot;
        } else {
            let tail = &mut self.entries[self.free_tail as usize];
            *tail = (*tail & !SLOT_MASK) | u64::from(slot);
        }
        self.free_tail = slot;
        self.live -= 1;
        Ok(loc)
    }

    /// Slots the table has (live or free).
    pub fn slots(&self) -> usize {
        self.entries.len()
    }

    /// Where the object of a live slot is (the caller knows the slot is live).
    pub fn location(&self, slot: u32) -> Location {
        let e = self.entries[slot as usize];
        debug_assert!(e & LIVE != 0);
        Location {
            zspage: ((e >> ENTRY_ZSPAGE_SHIFT) & 0xFFFF_FFFF) as u32,
            obj: (e & ENTRY_OBJ_MASK) as u16,
        }
    }

    /// Live handles.
    pub fn live(&self) -> usize {
        self.live
    }

    /// `(slot, generation, location)` of every live handle.
    pub fn iter_live(&self) -> impl Iterator<Item = (u32, u64, Location)> + '_ {
        self.entries
            .iter()
            .enumerate()
            .filter(|&(_, &e)| e & LIVE != 0)
            .map(|(i, &e)| {
                (
                    i as u32,
                    Self::entry_gen(e),
                    Location {
                        zspage: ((e >> ENTRY_ZSPAGE_SHIFT) & 0xFFFF_FFFF) as u32,
                        obj: (e & ENTRY_OBJ_MASK) as u16,
                    },
                )
            })
    }

    /// Bytes of memory the table holds.
    pub fn metadata_bytes(&self) -> usize {
        self.entries.capacity() * std::mem::size_of::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode_roundtrip() {
        let h = Handle::encode(MAX_UNITS - 1, GEN_MASK, NO_SLOT - 1);
        assert_eq!(h.decode(), Some((MAX_UNITS - 1, GEN_MASK, NO_SLOT - 1)));
        assert_eq!(Handle::from_raw(0).decode(), None);
        assert_eq!(Handle::from_raw(12345).decode(), None);
    }

    #[test]
    fn freed_slots_go_stale_and_are_reused_with_new_generation() {
        let mut t = HandleTable::new();
        let loc = Location { zspage: 3, obj: 9 };
        let (slot, generation) = t.alloc(loc).unwrap();
        let h = Handle::encode(0, generation, slot);
        assert_eq!(t.get(h, slot, generation).unwrap(), loc);
        t.free(h, slot, generation).unwrap();
        assert!(matches!(
            t.free(h, slot, generation),
            Err(Error::StaleHandle(_))
        ));
        let (slot2, generation2) = t.alloc(loc).unwrap();
        assert_eq!(slot2, slot);
        assert_ne!(generation2, generation);
        assert!(t.get(h, slot, generation).is_err());
    }
}
