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

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
