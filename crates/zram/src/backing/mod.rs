//! Backing stores: where written-back slots go (the kernel's `backing_dev`).
//!
//! A device writes a slot back by handing its compressed stream to a [`Backing`], which
//! names it by an offset; the device keeps that offset (and the stream's length) in the
//! slot, reads the stream back by it, and frees it when the slot is overwritten or
//! discarded. A store knows nothing of slots: it holds byte strings of 1 to
//! [`MAX_OBJECT`] bytes.
//!
//! - [`mod@file`]: [`FileBacking`], a packed log in a regular file or a block device;
//! - [`mem`]: [`MemBacking`], in memory, with failures to inject (a test double);
//! - `segments` (private): the file store's allocation state, no I/O;
//! - `cache` (private): the file store's read-ahead window cache;
//! - `shares` (crate): holders of the objects that more than one slot names (a shared
//!   object's one copy on the file), for any store.
//!
//! Files import only files below them: file → (segments, cache) → this module, and
//! shares → this module.
//!
//! # Contract
//!
//! - [`Backing::append`] is all or nothing and durable when it returns;
//! - an object is read back with the offset `append` gave and its exact length, and freed
//!   once with the same; reading or freeing anything else is the caller's bug (a store may
//!   return an error, wrong bytes or panic);
//! - a read never returns bytes other than the object's: a store that cannot read them
//!   all returns an error.

pub mod file;
pub mod mem;

mod cache;
mod segments;
pub(crate) mod shares;

pub use file::{FileBacking, FileOptions};
pub use mem::{MAX_READ_HOLD, MemBacking};

/// The largest object a store holds: a whole slot of the largest `unit_size` stored raw.
pub const MAX_OBJECT: usize = 128 * 1024;

/// Offsets a store gives are below this (16 TiB): a written-back slot keeps 44 bits of one
/// (`slot::WB_OFFSET_BITS`), beside a check of the object's bytes.
pub const MAX_OFFSET: u64 = 1 << crate::slot::WB_OFFSET_BITS;

/// Where written-back data goes.
pub trait Backing: Send + Sync + std::fmt::Debug {
    /// Stores `objects` (each the compressed stream of one slot, 1..=[`MAX_OBJECT`] bytes)
    /// and returns each one's offset (its name in the store), in order.
    ///
    /// Durable when it returns: written, synced, and not left in the host's page cache.
    /// All or nothing: on error nothing is stored (any space taken is released) and the
    /// error says why (`ENOSPC`, `EIO`, ...).
    fn append(&self, objects: &[&[u8]]) -> std::io::Result<Vec<u64>>;

    /// As [`append`](Self::append), for objects moved out of [`sparse`](Self::sparse)
    /// ranges: they may take the room a bounded store keeps back for them, so that a store
    /// full of sparse segments can still be cleaned. Counted in
    /// [`BackingStats::moved_bytes`].
    fn append_moved(&self, objects: &[&[u8]]) -> std::io::Result<Vec<u64>> {
        self.append(objects)
    }

    /// Ranges of the store holding dead bytes whose space comes back only when their
    /// objects are moved elsewhere (with [`append_moved`](Self::append_moved)), sparsest
    /// first; none for a store whose space comes back object by object (the default).
    fn sparse(&self) -> Vec<Sparse> {
        Vec::new()
    }

    /// Bytes of the live objects in `range`, a range [`sparse`](Self::sparse) listed, while
    /// it is still such a range (`None` after, and for a store that lists none).
    fn live_in(&self, _range: std::ops::Range<u64>) -> Option<u64> {
        None
    }

    /// Reads the object of `out.len()` bytes at `offset` (as [`append`](Self::append)
    /// returned it). A short read (a truncated file) is an error, never wrong bytes, also
    /// after the store's own appends have grown a file someone else cut back over the cut.
    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()>;

    /// Frees the object of `len` bytes at `offset`; its space is reused later.
    fn free(&self, offset: u64, len: usize);

    /// Flushes everything to stable storage.
    fn sync(&self) -> std::io::Result<()>;

    /// The store's figures.
    fn stats(&self) -> BackingStats;
}

/// A range of a store ([`Backing::sparse`]) holding `live` bytes of objects among dead ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sparse {
    /// Its bytes: a segment, up to its used end.
    pub range: std::ops::Range<u64>,
    /// Bytes of the objects in it.
    pub live: u64,
}

impl Sparse {
    /// The bytes that moving its objects gives back.
    pub fn dead(&self) -> u64 {
        (self.range.end - self.range.start).saturating_sub(self.live)
    }
}

/// A backing store's figures. Each is counted where its event happens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct BackingStats {
    /// Sum of the lengths of the objects stored (appended and not freed).
    pub live_bytes: u64,
    /// Bytes of the store's extent in use: for a file, the segments holding data or being
    /// filled (the segment being filled up to its used end), free and punched segments
    /// not counted. For a store in memory, `live_bytes`.
    pub file_bytes: u64,
    /// Bytes written to the store's medium (counted as each write succeeds, also those of
    /// an append that then failed as a whole).
    pub bytes_written: u64,
    /// Bytes read from the medium (not those served from a cache).
    pub bytes_read: u64,
    /// Objects asked for by [`Backing::read`].
    pub reads: u64,
    /// Reads served from the read-ahead cache without I/O.
    pub cache_hits: u64,
    /// Reads that returned an error.
    pub read_errors: u64,
    /// Appends that returned an error.
    pub write_errors: u64,
    /// Segments punched out of the file once no live object was left in them.
    pub segments_punched: u64,
    /// Pages punched out of the file inside segments still holding live objects, once no
    /// live object lay on them.
    pub pages_punched: u64,
    /// Bytes of objects moved out of sparse ranges ([`Backing::append_moved`]).
    pub moved_bytes: u64,
}

/// An error with the errno `errno` (`ENOSPC`, `EIO`, ...).
pub(crate) fn os_error(errno: i32) -> std::io::Error {
    std::io::Error::from_raw_os_error(errno)
}

/// Checks the lengths of `objects` for [`Backing::append`]: `InvalidInput` unless each is
/// 1..=[`MAX_OBJECT`] bytes.
pub(crate) fn check_objects(objects: &[&[u8]]) -> std::io::Result<()> {
    match objects
        .iter()
        .find(|o| o.is_empty() || o.len() > MAX_OBJECT)
    {
        Some(bad) => Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!(
                "an object of {} bytes (1..={MAX_OBJECT} allowed)",
                bad.len()
            ),
        )),
        None => Ok(()),
    }
}
