//! The crate's error type.

use crate::handle::Handle;

/// Everything a pool operation can refuse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `malloc` sizes must be 1..=4096 bytes.
    #[error("object size {0} is out of range (1..=4096 bytes)")]
    InvalidSize(usize),
    /// The chain size (pages per zspage at most) must be 1..=16.
    #[error("chain size {0} is out of range (1..=16 pages)")]
    InvalidChainSize(usize),
    /// More shards (or heaps) than the allocator can name were asked for.
    #[error(
        "{given} shards are more than the {allocator} allocator takes (at most {max}; 0: its default)"
    )]
    InvalidShards {
        /// What was asked for.
        given: usize,
        /// The most the allocator takes.
        max: usize,
        /// Its name.
        allocator: &'static str,
    },
    /// The handle was freed, or never came from this pool.
    #[error("handle {0} is stale (freed) or unknown to this pool")]
    StaleHandle(Handle),
    /// More bytes than the object can hold.
    #[error("{len} bytes do not fit in an object of {capacity} bytes")]
    TooLarge {
        /// Bytes asked for.
        len: usize,
        /// Bytes the object holds.
        capacity: usize,
    },
    /// The object is shared by several handles, so it is read-only.
    #[error("handle {0} names a shared object, which is read-only")]
    Shared(Handle),
    /// A class shard's handle table is full (2^28 - 1 live objects).
    #[error("too many objects in one size class")]
    TooManyObjects,
    /// The allocator does not offer this operation (sharing, folding and deduplication
    /// are zsmalloc's).
    #[error("allocator {allocator} does not support {what}")]
    Unsupported {
        /// The allocator's name.
        allocator: &'static str,
        /// What was asked of it.
        what: &'static str,
    },
    /// The OS refused memory.
    #[error("out of memory: {0}")]
    OutOfMemory(#[from] std::io::Error),
}

impl Error {
    /// Memory refused to an allocator's own bookkeeping or to the system heap.
    pub(crate) fn out_of_memory() -> Self {
        Error::OutOfMemory(std::io::Error::from(std::io::ErrorKind::OutOfMemory))
    }
}

impl From<std::collections::TryReserveError> for Error {
    fn from(_: std::collections::TryReserveError) -> Self {
        Error::out_of_memory()
    }
}

/// Room for one more element in a table, growing it by an eighth (at least 64) rather than
/// doubling it: the capacity is reported in `metadata_bytes`, and should not run far ahead
/// of what is used (and resident). A failure is [`Error::OutOfMemory`], not an abort.
pub(crate) fn reserve_one<T>(v: &mut Vec<T>) -> Result<()> {
    if v.len() == v.capacity() {
        v.try_reserve_exact((v.len() / 8).max(64))?;
    }
    Ok(())
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
