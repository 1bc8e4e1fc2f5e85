//! The system allocator as a [`Backend`]: every object one `malloc` of exactly its size, a
//! baseline for the others.
//!
//! # Representation
//!
//! An object is a [`HeapObject`] (`sys.rs`): `size` bytes from `malloc` itself (not Rust's
//! global allocator, which a program may replace: `malloc_usable_size` is only sound on
//! malloc's own pointers), zeroed when allocated. Handles name entries of a handle table
//! split into *shards* (`PoolConfig::shards`: 0 = one per CPU, at most 16), each under its
//! own lock; `malloc` picks shards round robin. An entry is the object (or none) and a
//! generation, bumped when the object is freed; free entries are reused oldest first.
//!
//! ```text
//!  63     56 55          36 35  32 31                0
//! [ magic  ][  generation  ][shard][      entry       ]
//!   8 bits      20 bits     4 bits      32 bits
//! ```
//!
//! `magic` is [`HANDLE_MAGIC`] (no zsmalloc or zbud handle has it), so forged and stale
//! handles are refused; a stale one could only come back after 2^20 reuses of its entry.
//!
//! # What `total_pages` counts, and what it cannot see
//!
//! Each object costs its heap chunk: `malloc_usable_size` (its size rounded up to malloc's
//! granularity: 16 bytes in glibc, at least 24 usable) plus malloc's per-chunk header
//! ([`MALLOC_CHUNK_HEADER`], glibc's `size` field; chunks of at most 4 KiB are never
//! `mmap`ped). [`Backend::total_pages`] is the sum of those chunks in pages, rounded up:
//! what the heap holds for the live objects. It cannot see malloc's own fragmentation:
//! free chunks between live ones, freed memory malloc keeps (arenas, bins, the top chunk)
//! until `malloc_trim`, per-thread arenas and caches. After churn the process therefore
//! holds more than `total_pages` says, and that excess belongs to malloc, not to any
//! object; [`Backend::compact`] (`malloc_trim(0)`) gives back what of it lies in whole free
//! pages, but glibc reports only *whether* it released memory, not how much, and the
//! heap is shared with the rest of the process, so `compact` returns 0 and
//! `freeable_pages`/`pages_compacted` are 0: unknowable here, not nothing.
//!
//! # Rules
//!
//! - An entry holds an object iff it is live; a free entry is queued for reuse once.
//! - A shard's `heap_bytes` is the sum of its objects' chunks; the pool's atomic totals
//!   are the sums over the shards (updated under the shard's lock).
//!
//! Lock order: a shard lock is a leaf for every operation; only `check_invariants` holds
//! several, taking them in shard order. malloc's own locks are taken inside (a leaf).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;

use crate::allocator::Allocator;
use crate::backend::Backend;
use crate::config::PoolConfig;
use crate::error::{Error, Result, reserve_one};
use crate::handle::Handle;
use crate::pool::check_size;
use crate::sync::{AtomicUsize, Mutex};
use crate::sys::{HeapObject, PAGE_SIZE, malloc_trim};

/// Bytes malloc keeps in front of each chunk it hands out (glibc: the chunk's size word).
pub const MALLOC_CHUNK_HEADER: usize = std::mem::size_of::<usize>();

/// malloc's chunk alignment (glibc on 64-bit: 16 bytes).
const MALLOC_ALIGN: usize = 2 * std::mem::size_of::<usize>();
/// malloc's smallest chunk (glibc: 32 bytes on 64-bit).
const MIN_CHUNK: usize = 4 * std::mem::size_of::<usize>();

const MAGIC_BITS: u32 = 8;
const GEN_BITS: u32 = 20;
const SHARD_BITS: u32 = 4;
const ENTRY_BITS: u32 = 32;
const _: () = assert!(MAGIC_BITS + GEN_BITS + SHARD_BITS + ENTRY_BITS == 64);
const ENTRY_SHIFT: u32 = 0;
const SHARD_SHIFT: u32 = ENTRY_SHIFT + ENTRY_BITS;
const GEN_SHIFT: u32 = SHARD_SHIFT + SHARD_BITS;
const MAGIC_SHIFT: u32 = GEN_SHIFT + GEN_BITS;
const GEN_MASK: u32 = (1 << GEN_BITS) - 1;
/// Top byte of every malloc handle ('M').
const HANDLE_MAGIC: u64 = 0x4D;
/// Most shards.
const MAX_SHARDS: usize = 1 << SHARD_BITS;

fn encode(shard: usize, generation: u32, entry: u32) -> Handle {
    Handle::from_raw(
        (HANDLE_MAGIC << MAGIC_SHIFT)
            | (u64::from(generation) << GEN_SHIFT)
            | ((shard as u64) << SHARD_SHIFT)
            | (u64::from(entry) << ENTRY_SHIFT),
    )
}

/// `(shard, generation, entry)`, or `None` when the magic is wrong.
fn decode(handle: Handle) -> Option<(usize, u32, usize)> {
    let raw = handle.to_raw();
    if raw >> MAGIC_SHIFT != HANDLE_MAGIC {
        return None;
    }
    let shard = ((raw >> SHARD_SHIFT) as usize) & (MAX_SHARDS - 1);
    let generation = ((raw >> GEN_SHIFT) as u32) & GEN_MASK;
    Some((shard, generation, raw as u32 as usize))
}

/// Bytes of heap an object takes: its chunk.
fn chunk_bytes(obj: &HeapObject) -> usize {
    obj.usable_size() + MALLOC_CHUNK_HEADER
}

#[derive(Debug)]
struct Entry {
    obj: Option<HeapObject>,
    /// What the next handle to this entry carries (bumped on free).
    generation: u32,
}

// What the docs count as an entry's bookkeeping (on 64-bit targets).
const _: () = assert!(std::mem::size_of::<Entry>() <= 24);

#[derive(Debug, Default)]
struct Table {
    entries: Vec<Entry>,
    /// Entries without an object, oldest first.
    free: VecDeque<u32>,
    live: usize,
    heap_bytes: usize,
}

impl Table {
    fn get_mut(&mut self, handle: Handle, generation: u32, entry: usize) -> Result<&mut Entry> {
        match self.entries.get_mut(entry) {
            Some(e) if e.obj.is_some() && e.generation == generation => Ok(e),
            _ => Err(Error::StaleHandle(handle)),
        }
    }
}

/// The system-malloc allocator (see the module docs).
#[derive(Debug)]
pub struct SysMalloc {
    shards: Vec<Mutex<Table>>,
    next_shard: AtomicUsize,
    /// Sum of the live objects' chunks.
    heap_bytes: AtomicUsize,
    objects: AtomicUsize,
    huge_class_size: usize,
}

impl SysMalloc {
    /// A malloc pool with the settings of `config` that apply to it (`shards`; the other
    /// zsmalloc settings fix only the huge-class watermark).
    pub fn with_config(config: PoolConfig) -> Result<Self> {
        let shards = config.shards_or(crate::config::cpus, MAX_SHARDS, "malloc")?;
        Ok(Self {
            shards: (0..shards).map(|_| Mutex::new(Table::default())).collect(),
            next_shard: AtomicUsize::new(0),
            heap_bytes: AtomicUsize::new(0),
            objects: AtomicUsize::new(0),
            huge_class_size: config.huge_class_size()?,
        })
    }

    /// The shard table a handle names, and its generation and entry.
    fn shard_of(&self, handle: Handle) -> Result<(&Mutex<Table>, u32, usize)> {
        let (shard, generation, entry) = decode(handle).ok_or(Error::StaleHandle(handle))?;
        let table = self.shards.get(shard).ok_or(Error::StaleHandle(handle))?;
        Ok((table, generation, entry))
    }
}

impl Backend for SysMalloc {
    fn allocator(&self) -> Allocator {
        Allocator::Malloc
    }

    fn malloc(&self, size: usize) -> Result<Handle> {
        check_size(size)?;
        let obj = HeapObject::zeroed(size).ok_or_else(Error::out_of_memory)?;
        let bytes = chunk_bytes(&obj);
        let shard = self.next_shard.fetch_add(1, Ordering::Relaxed) % self.shards.len();
        let mut table = self.shards[shard].lock();
        let entry = match table.free.pop_front() {
            Some(entry) => entry as usize,
            None => {
                let entry = table.entries.len();
                if entry >= u32::MAX as usize {
                    return Err(Error::TooManyObjects);
                }
                reserve_one(&mut table.entries)?;
                // Room to queue every entry as free, so that `free` never allocates.
                let queued = table.free.len();
                table.free.try_reserve(entry + 1 - queued)?;
                table.entries.push(Entry {
                    obj: None,
                    generation: 0,
                });
                entry
            }
        };
        let e = &mut table.entries[entry];
        e.obj = Some(obj);
        let generation = e.generation;
        table.live += 1;
        table.heap_bytes += bytes;
        self.heap_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.objects.fetch_add(1, Ordering::Relaxed);
        Ok(encode(shard, generation, entry as u32))
    }

    fn write(&self, handle: Handle, data: &[u8]) -> Result<()> {
        let (table, generation, entry) = self.shard_of(handle)?;
        let mut table = table.lock();
        let e = table.get_mut(handle, generation, entry)?;
        let obj = e.obj.as_mut().ok_or(Error::StaleHandle(handle))?;
        let bytes = obj.bytes_mut();
        if data.len() > bytes.len() {
            return Err(Error::TooLarge {
                len: data.len(),
                capacity: bytes.len(),
            });
        }
        bytes[..data.len()].copy_from_slice(data);
        Ok(())
    }

    fn read_with(&self, handle: Handle, len: usize, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        let (table, generation, entry) = self.shard_of(handle)?;
        let mut table = table.lock();
        let e = table.get_mut(handle, generation, entry)?;
        let bytes = e.obj.as_ref().ok_or(Error::StaleHandle(handle))?.bytes();
        if len > bytes.len() {
            return Err(Error::TooLarge {
                len,
                capacity: bytes.len(),
            });
        }
        f(&bytes[..len]);
        Ok(())
    }

    fn free(&self, handle: Handle) -> Result<()> {
        let (table, generation, entry) = self.shard_of(handle)?;
        let obj = {
            let mut table = table.lock();
            let e = table.get_mut(handle, generation, entry)?;
            let obj = e.obj.take().ok_or(Error::StaleHandle(handle))?;
            e.generation = (e.generation + 1) & GEN_MASK;
            // Reserved in `malloc`: the queue holds every entry at most once.
            table.free.push_back(entry as u32);
            let bytes = chunk_bytes(&obj);
            table.live -= 1;
            table.heap_bytes -= bytes;
            self.heap_bytes.fetch_sub(bytes, Ordering::Relaxed);
            self.objects.fetch_sub(1, Ordering::Relaxed);
            obj
        };
        // Back to malloc outside the shard lock.
        drop(obj);
        Ok(())
    }

    /// `malloc_trim(0)`: malloc gives back the free pages of its heaps. How many is
    /// unknowable here (see the module docs), so this returns 0.
    fn compact(&self) -> usize {
        malloc_trim();
        0
    }

    fn total_pages(&self) -> usize {
        self.heap_bytes.load(Ordering::Relaxed).div_ceil(PAGE_SIZE)
    }

    /// Unknowable: malloc's free memory is not this pool's to count.
    fn freeable_pages(&self) -> usize {
        0
    }

    fn huge_class_size(&self) -> usize {
        self.huge_class_size
    }

    fn metadata_bytes(&self) -> usize {
        let tables: usize = self
            .shards
            .iter()
            .map(|t| {
                let t = t.lock();
                t.entries.capacity() * std::mem::size_of::<Entry>()
                    + t.free.capacity() * std::mem::size_of::<u32>()
            })
            .sum();
        std::mem::size_of::<Self>()
            + self.shards.len() * std::mem::size_of::<Mutex<Table>>()
            + tables
    }

    fn pages_compacted(&self) -> u64 {
        0
    }

    fn objects(&self) -> usize {
        self.objects.load(Ordering::Relaxed)
    }

    /// The chunk malloc's rounding gives an object of `size` bytes: `size` plus the chunk
    /// header, rounded up to 16 bytes, at least 32 (glibc's `request2size`). A real object
    /// may get a little more (a free chunk too small to split is handed out whole);
    /// `total_pages` counts what it got.
    fn footprint(&self, size: usize) -> Result<usize> {
        check_size(size)?;
        Ok((size + MALLOC_CHUNK_HEADER)
            .next_multiple_of(MALLOC_ALIGN)
            .max(MIN_CHUNK))
    }

    fn check_invariants(&self) -> std::result::Result<(), String> {
        // Every shard at once, in shard order, so the totals are a consistent snapshot.
        let tables: Vec<_> = self.shards.iter().map(|t| t.lock()).collect();
        let (mut live, mut heap) = (0, 0);
        for (shard, t) in tables.iter().enumerate() {
            let mut queued = vec![false; t.entries.len()];
            for &entry in &t.free {
                let seen = queued
                    .get_mut(entry as usize)
                    .ok_or(format!("shard {shard}: free entry {entry} out of range"))?;
                if std::mem::replace(seen, true) {
                    return Err(format!("shard {shard}: entry {entry} queued free twice"));
                }
            }
            let (mut n, mut bytes) = (0, 0);
            for (i, e) in t.entries.iter().enumerate() {
                if e.obj.is_some() == queued[i] {
                    return Err(format!("shard {shard}: entry {i} live and free alike"));
                }
                if let Some(obj) = &e.obj {
                    if obj.usable_size() < obj.bytes().len() {
                        return Err(format!("shard {shard}: entry {i} smaller than its size"));
                    }
                    n += 1;
                    bytes += chunk_bytes(obj);
                }
            }
            if n != t.live || bytes != t.heap_bytes {
                return Err(format!(
                    "shard {shard}: {n} objects of {bytes} bytes, counted {} of {}",
                    t.live, t.heap_bytes
                ));
            }
            live += n;
            heap += bytes;
        }
        let (objects, heap_bytes) = (
            self.objects.load(Ordering::Relaxed),
            self.heap_bytes.load(Ordering::Relaxed),
        );
        if live != objects || heap != heap_bytes {
            return Err(format!(
                "{live} objects of {heap} bytes, pool counts {objects} of {heap_bytes}"
            ));
        }
        Ok(())
    }
}
