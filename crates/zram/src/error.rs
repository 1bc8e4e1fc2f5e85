//! The crate's error type.

/// Everything a device operation can refuse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A request reaches past the end of the device.
    #[error("request at offset {offset} of {len} bytes is beyond the device ({disksize} bytes)")]
    OutOfRange {
        /// First byte asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// Device size.
        disksize: u64,
    },
    /// Storing the page would pass `mem_limit`; the slot keeps its old data.
    #[error("memory limit of {limit} bytes reached")]
    MemLimit {
        /// The limit in bytes.
        limit: u64,
    },
    /// The allocator refused memory.
    #[error("allocator: {0}")]
    Alloc(#[from] zsmalloc::Error),
    /// No such compression algorithm.
    #[error("unknown compression algorithm {0:?} (known: lzo, lzo-rle, lz4, zstd)")]
    UnknownAlgorithm(String),
    /// A bad algorithm parameter or device setting.
    #[error("invalid parameter: {0}")]
    InvalidParam(String),
    /// A size that does not parse or is not allowed.
    #[error("invalid size {0:?}")]
    InvalidSize(String),
    /// The compressor failed.
    #[error("compression failed: {0}")]
    Compress(String),
    /// Stored data did not decode: the slot's contents are lost.
    #[error("corrupt compressed data: {0}")]
    Corrupt(String),
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
