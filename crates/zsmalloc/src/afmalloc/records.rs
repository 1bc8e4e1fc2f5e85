//! A heap's record store: the chunk locations of every object that takes more than one
//! chunk.
//!
//! # Representation
//!
//! One array of `u32` (in blocks, `blocks.rs`); a record is `n` consecutive words, one
//! chunk location per chunk of the object, largest chunk first, where `n` (2..=9) is the
//! number of one bits of the object's size in 8-byte units, so the record needs no length
//! of its own (the table entry holds the size). Freed records are kept on one free list per
//! length, linked through their first word, and reused before the store grows. Compaction
//! packs it (`shrink.rs`): the live records slide to the front in offset order
//! ([`Records::move_down`]), the free lists are forgotten and the blocks past the live
//! words are dropped ([`Records::truncate_packed`]). Its capacity is counted as metadata.

use super::blocks::Blocks;
use super::table::MAX_RECORD;

/// Longest record: 9 chunks (sizes below 4096 bytes have at most 9 one bits in 8-byte
/// units).
pub(super) const MAX_RECORD_LEN: usize = 9;
const NONE: u32 = u32::MAX;

/// The record store of one heap.
#[derive(Debug)]
pub(super) struct Records {
    words: Blocks<u32>,
    /// Free records by length.
    free: [u32; MAX_RECORD_LEN + 1],
    /// Words in live records.
    live_words: usize,
}

impl Records {
    pub fn new() -> Self {
        Self {
            words: Blocks::new(),
            free: [NONE; MAX_RECORD_LEN + 1],
            live_words: 0,
        }
    }

    /// A record of `len` words; its offset, or `None` when the store is full.
    pub fn alloc(&mut self, len: usize) -> Option<u32> {
        debug_assert!((2..=MAX_RECORD_LEN).contains(&len));
        let at = if self.free[len] == NONE {
            let at = self.words.len();
            if at + len > MAX_RECORD {
                return None;
            }
            for _ in 0..len {
                self.words.push(0);
            }
            at as u32
        } else {
            let at = self.free[len];
            self.free[len] = *self.words.get(at as usize);
            at
        };
        self.live_words += len;
        Some(at)
    }

    /// Frees the record of `len` words at `at`.
    pub fn free(&mut self, at: u32, len: usize) {
        *self.words.get_mut(at as usize) = self.free[len];
        self.free[len] = at;
        self.live_words -= len;
    }

    /// Word `i` of the record at `at`: its `i`th chunk's location.
    pub fn get(&self, at: u32, i: usize) -> u32 {
        *self.words.get(at as usize + i)
    }

    /// Sets word `i` of the record at `at`.
    pub fn set(&mut self, at: u32, i: usize, loc: u32) {
        *self.words.get_mut(at as usize + i) = loc;
    }

    /// Copies the record of `len` words at `from` down to `to` (`to <= from`; the two may
    /// overlap).
    pub fn move_down(&mut self, from: u32, to: u32, len: usize) {
        debug_assert!(to <= from);
        for i in 0..len {
            let word = *self.words.get(from as usize + i);
            *self.words.get_mut(to as usize + i) = word;
        }
    }

    /// Blocks packing would drop: those beyond what the live words need.
    pub fn shrinkable_blocks(&self) -> usize {
        self.words.blocks() - Blocks::<u32>::blocks_for(self.live_words)
    }

    /// Ends a packing that moved every live record below `end` (= the live words): the
    /// free records are forgotten and the words from `end` dropped; the blocks dropped.
    pub fn truncate_packed(&mut self, end: usize) -> usize {
        debug_assert_eq!(end, self.live_words);
        self.free = [NONE; MAX_RECORD_LEN + 1];
        self.words.truncate(end)
    }

    /// Words in live records.
    pub fn live_words(&self) -> usize {
        self.live_words
    }

    /// Words in freed records, walked through the free lists; `None` when a list is broken.
    pub fn free_words(&self) -> Option<usize> {
        let mut total = 0;
        for (len, &head) in self.free.iter().enumerate() {
            let mut at = head;
            let mut n = 0;
            while at != NONE {
                if at as usize + len > self.words.len() || n > self.words.len() {
                    return None;
                }
                n += 1;
                at = *self.words.get(at as usize);
            }
            total += n * len;
        }
        Some(total)
    }

    /// Words in the store (live and free).
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether the store holds exactly the blocks its words need.
    pub fn is_tight(&self) -> bool {
        self.words.is_tight()
    }

    /// Bytes the store holds.
    pub fn metadata_bytes(&self) -> usize {
        self.words.metadata_bytes()
    }
}
