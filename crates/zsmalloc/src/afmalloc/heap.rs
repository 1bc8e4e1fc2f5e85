//! A heap: one handle table, its record store and a chunk cache of every order, under one
//! lock (the allocator's `Mutex<Heap>`); the object operations on it.
//!
//! An object of `size` bytes takes the chunks of its size rounded up to 8 bytes written in
//! binary, largest first (400 bytes: 256 + 128 + 16), and its bytes are laid out across
//! them in that order. Single-chunk objects need no record (see `table.rs`).

use std::sync::Arc;

use super::records::Records;
use super::slab::{CACHES, Cache, orders, units};
use super::table::{Object, Table};
use crate::error::{Error, Result};
use crate::sys::{PAGE_SIZE, PageSource};

/// The chunks of one object: `(order, location)`, largest first.
#[derive(Debug, Clone, Copy)]
pub(super) struct Chunks {
    len: usize,
    parts: [(usize, u32); CACHES],
}

impl Chunks {
    pub fn as_slice(&self) -> &[(usize, u32)] {
        &self.parts[..self.len]
    }
}

/// One heap (see the module docs).
#[derive(Debug)]
pub(super) struct Heap {
    pub(super) table: Table,
    pub(super) records: Records,
    pub(super) caches: [Cache; CACHES],
}

impl Heap {
    pub fn new() -> Self {
        Self {
            table: Table::new(),
            records: Records::new(),
            caches: std::array::from_fn(Cache::new),
        }
    }

    /// The chunks `object` is built from.
    pub fn chunks(&self, object: Object) -> Chunks {
        let mut chunks = Chunks {
            len: 0,
            parts: [(0, 0); CACHES],
        };
        match object {
            Object::Single { order, loc, .. } => {
                chunks.parts[0] = (order, loc);
                chunks.len = 1;
            }
            Object::Record { size, record } => {
                let u = units(size);
                for (i, order) in orders(u).enumerate() {
                    chunks.parts[i] = (order, self.records.get(record, i));
                    chunks.len += 1;
                }
            }
        }
        chunks
    }

    /// Allocates an object of `size` bytes (1..=4096); `(entry, generation)`. On any
    /// failure every chunk and record already taken is given back.
    pub fn malloc(&mut self, size: usize, source: &Arc<PageSource>) -> Result<(u32, u64)> {
        debug_assert!((1..=PAGE_SIZE).contains(&size));
        let u = units(size);
        let mut taken = Chunks {
            len: 0,
            parts: [(0, 0); CACHES],
        };
        for order in orders(u) {
            match self.caches[order].alloc(source) {
                Ok(loc) => {
                    taken.parts[taken.len] = (order, loc);
                    taken.len += 1;
                }
                Err(e) => {
                    self.give_back(&taken);
                    return Err(e);
                }
            }
        }
        let object = if taken.len == 1 {
            let (order, loc) = taken.parts[0];
            Object::Single { order, size, loc }
        } else {
            let Some(record) = self.records.alloc(taken.len) else {
                self.give_back(&taken);
                return Err(Error::TooManyObjects);
            };
            for (i, &(_, loc)) in taken.as_slice().iter().enumerate() {
                self.records.set(record, i, loc);
            }
            Object::Record { size, record }
        };
        match self.table.alloc(object) {
            Some(named) => Ok(named),
            None => {
                if let Object::Record { record, .. } = object {
                    self.records.free(record, taken.len);
                }
                self.give_back(&taken);
                Err(Error::TooManyObjects)
            }
        }
    }

    /// Frees chunks; returns the slabs that were dropped.
    fn give_back(&mut self, chunks: &Chunks) -> usize {
        chunks
            .as_slice()
            .iter()
            .filter(|&&(order, loc)| self.caches[order].free(loc))
            .count()
    }

    /// The live object `(entry, generation)` names.
    pub fn lookup(&self, entry: u32, generation: u64) -> Option<Object> {
        self.table.get(entry, generation)
    }

    /// Stores `data` at the start of the object.
    pub fn write(&mut self, object: Object, data: &[u8]) -> Result<()> {
        if data.len() > object.size() {
            return Err(Error::TooLarge {
                len: data.len(),
                capacity: object.size(),
            });
        }
        let chunks = self.chunks(object);
        let mut rest = data;
        for &(order, loc) in chunks.as_slice() {
            if rest.is_empty() {
                break;
            }
            let chunk = self.caches[order].chunk_mut(loc);
            let n = rest.len().min(chunk.len());
            chunk[..n].copy_from_slice(&rest[..n]);
            rest = &rest[n..];
        }
        Ok(())
    }

    /// Copies the object's first `out.len()` bytes into `out`.
    pub fn read(&self, object: Object, out: &mut [u8]) -> Result<()> {
        if out.len() > object.size() {
            return Err(Error::TooLarge {
                len: out.len(),
                capacity: object.size(),
            });
        }
        let chunks = self.chunks(object);
        let mut at = 0;
        for &(order, loc) in chunks.as_slice() {
            if at == out.len() {
                break;
            }
            let chunk = self.caches[order].chunk(loc);
            let n = (out.len() - at).min(chunk.len());
            out[at..at + n].copy_from_slice(&chunk[..n]);
            at += n;
        }
        Ok(())
    }

    /// Frees the object at `entry`; returns the slabs dropped.
    pub fn free(&mut self, entry: u32, object: Object) -> usize {
        let chunks = self.chunks(object);
        if let Object::Record { record, .. } = object {
            self.records.free(record, chunks.len);
        }
        self.table.free(entry);
        self.give_back(&chunks)
    }

    /// Slabs compaction could free now.
    pub fn freeable(&self) -> usize {
        self.caches.iter().map(Cache::freeable).sum()
    }

    /// Bytes of bookkeeping this heap holds outside its own struct (the allocator counts
    /// the struct, in its array of heaps).
    pub fn metadata_bytes(&self) -> usize {
        self.table.metadata_bytes()
            + self.records.metadata_bytes()
            + self.caches.iter().map(Cache::metadata_bytes).sum::<usize>()
    }
}
