//! The crate's error type, and the one mapping from it to errnos that every front end uses.

/// Which kind of request met an error (the errno of some errors depends on it, as the
/// kernel's block layer and the NBD protocol make it depend).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A read.
    Read,
    /// A write.
    Write,
    /// A discard (trim).
    Discard,
    /// A write of zeroes.
    WriteZeroes,
}

impl Op {
    /// Does the request store data (so that running out of room is `ENOSPC`)?
    pub fn stores(self) -> bool {
        matches!(self, Op::Write | Op::WriteZeroes)
    }
}

/// Everything a device operation can refuse.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A request reaches past the end of the device.
    #[error("{op:?} at offset {offset} of {len} bytes is beyond the device ({disksize} bytes)")]
    OutOfRange {
        /// The request.
        op: Op,
        /// First byte asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// Device size.
        disksize: u64,
    },
    /// Storing the data would pass `mem_limit`; the slot keeps its old data.
    #[error("memory limit of {limit} bytes reached")]
    MemLimit {
        /// The limit in bytes.
        limit: u64,
    },
    /// The allocator refused: out of memory, or (a bug) a stale handle.
    // Not a `source` as well: a report of the chain (`{:#}`) would say it twice.
    #[error("allocator: {0}")]
    Alloc(zsmalloc::Error),
    /// The slot table of a device this large cannot be had.
    #[error("no memory for the slot table of a {disksize}-byte device")]
    TableTooLarge {
        /// The device size asked for.
        disksize: u64,
    },
    /// No such compression algorithm.
    #[error("unknown compression algorithm {0:?} (known: lzo-rle, lzo, lz4, lz4hc, zstd)")]
    UnknownAlgorithm(String),
    /// A compression level the algorithm does not have.
    #[error("{algorithm} level {level} is out of range (levels: {levels})")]
    InvalidLevel {
        /// The algorithm's name.
        algorithm: &'static str,
        /// The level asked for.
        level: i32,
        /// The levels it takes, in words.
        levels: &'static str,
    },
    /// The compressor refused its parameters (a bad dictionary, say).
    #[error("{algorithm} cannot be set up: {reason}")]
    CodecSetup {
        /// The algorithm's name.
        algorithm: &'static str,
        /// What the compression library said.
        reason: String,
    },
    /// A `unit_size` that is not a power of two from 4 KiB to 128 KiB.
    #[error("unit_size {0} must be a power of two from 4096 to 131072 bytes")]
    InvalidUnitSize(u64),
    /// A `unit_size` larger than the device.
    #[error("unit_size {unit_size} is larger than the device ({disksize} bytes)")]
    UnitLargerThanDevice {
        /// The unit size.
        unit_size: u64,
        /// The device size.
        disksize: u64,
    },
    /// A size that does not parse (the text given) or is not allowed.
    #[error("invalid size {0:?}")]
    InvalidSize(String),
    /// Size text that does not parse, and why.
    #[error("invalid size {text:?}: {reason}")]
    SizeSyntax {
        /// The text given.
        text: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The compressor failed.
    #[error("{algorithm} compression failed: {reason}")]
    Compress {
        /// The algorithm's name.
        algorithm: &'static str,
        /// What the compression library said.
        reason: String,
    },
    /// Stored data did not decode: the slot's contents are lost.
    #[error("corrupt compressed data: {0}")]
    Corrupt(String),
    /// The backing file failed (writing back, or reading a written-back slot).
    #[error("backing file: {0}")]
    Backing(std::io::Error),
    /// The backing file at `path` could not be opened or set up.
    #[error("backing file {}: {cause}", path.display())]
    BackingOpen {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        cause: std::io::Error,
    },
    /// Writeback asked of a device with no `backing_dev`.
    #[error("no backing device is set")]
    NoBackingDev,
    /// `writeback_limit` is enabled and spent.
    #[error("writeback limit reached")]
    WritebackLimit,
    /// Writeback, recompression or cleaning of the backing file is already running on the
    /// device.
    #[error("writeback, recompression or backing-file cleaning is already running")]
    Busy,
    /// A malformed argument to `idle`, `writeback`, `recompress` or `recomp_algorithm`.
    #[error("invalid argument {0:?}")]
    InvalidArgument(String),
    /// `writeback` page indexes past the device's end, or a range that ends before it
    /// starts (`ERANGE`, as the kernel's since 6.16).
    #[error("page indexes out of range: {0}")]
    IndexOutOfRange(String),
}

impl Error {
    /// The errno for this error, as the kernel's zram and block layer give it (the NBD
    /// protocol's error values are the same numbers).
    ///
    /// - a request past the end: `ENOSPC` when it stores data, else `EINVAL`;
    /// - `mem_limit` reached, or the allocator out of memory, while storing: `ENOSPC`;
    /// - no memory for a device's tables: `ENOMEM`;
    /// - a bad setting or value: `EINVAL`;
    /// - data that cannot be compressed or decoded, or an allocator bug: `EIO`;
    /// - the backing file's own errno (`ENOSPC`, `EIO`); `EINVAL` for a backing path that
    ///   is not a regular file or block device (or bad backing options); `EIO` for a short
    ///   read;
    /// - writeback with no backing device: `ENODEV`; with `writeback_limit` spent: `EIO`;
    /// - writeback and recompression at once: `EAGAIN`; writeback page indexes past the
    ///   device or a range ending before its start: `ERANGE`;
    /// - what the device's allocator does not offer (`fold` on a non-zsmalloc device):
    ///   `EOPNOTSUPP`.
    pub fn errno(&self) -> i32 {
        match self {
            Error::OutOfRange { op, .. } if op.stores() => libc::ENOSPC,
            Error::OutOfRange { .. } => libc::EINVAL,
            Error::MemLimit { .. } | Error::Alloc(zsmalloc::Error::OutOfMemory(_)) => libc::ENOSPC,
            Error::TableTooLarge { .. } => libc::ENOMEM,
            Error::Alloc(
                zsmalloc::Error::InvalidChainSize(_) | zsmalloc::Error::InvalidShards { .. },
            ) => libc::EINVAL,
            Error::Alloc(zsmalloc::Error::Unsupported { .. }) => libc::EOPNOTSUPP,
            Error::UnknownAlgorithm(_)
            | Error::InvalidLevel { .. }
            | Error::CodecSetup { .. }
            | Error::InvalidUnitSize(_)
            | Error::UnitLargerThanDevice { .. }
            | Error::InvalidSize(_)
            | Error::SizeSyntax { .. } => libc::EINVAL,
            Error::Alloc(_) | Error::Compress { .. } | Error::Corrupt(_) => libc::EIO,
            // The file's own errno (ENOSPC, EIO...); a path that is not a usable file is
            // EINVAL; a short read is EIO.
            Error::Backing(e) | Error::BackingOpen { cause: e, .. } => {
                e.raw_os_error().unwrap_or(match e.kind() {
                    std::io::ErrorKind::InvalidInput => libc::EINVAL,
                    std::io::ErrorKind::ResourceBusy => libc::EBUSY,
                    _ => libc::EIO,
                })
            }
            Error::NoBackingDev => libc::ENODEV,
            Error::WritebackLimit => libc::EIO,
            Error::Busy => libc::EAGAIN,
            Error::InvalidArgument(_) => libc::EINVAL,
            Error::IndexOutOfRange(_) => libc::ERANGE,
        }
    }
}

impl From<zsmalloc::Error> for Error {
    fn from(e: zsmalloc::Error) -> Self {
        Error::Alloc(e)
    }
}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Backing(e)
    }
}

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cause_is_told_once_and_a_backing_file_by_its_path() {
        use std::error::Error as _;
        let open = Error::BackingOpen {
            path: "/no/such/file".into(),
            cause: std::io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert_eq!(open.errno(), libc::ENOENT);
        let text = open.to_string();
        assert!(text.starts_with("backing file /no/such/file: "), "{text}");
        assert!(text.contains("No such file"), "{text}");
        // Told in the message, so not again as a source.
        assert!(open.source().is_none());
        assert!(Error::from(std::io::Error::other("x")).source().is_none());
        assert!(
            Error::from(zsmalloc::Error::InvalidChainSize(0))
                .source()
                .is_none()
        );
    }

    #[test]
    fn errnos_follow_the_request() {
        let past = |op| Error::OutOfRange {
            op,
            offset: 8192,
            len: 4096,
            disksize: 8192,
        };
        assert_eq!(past(Op::Write).errno(), libc::ENOSPC);
        assert_eq!(past(Op::WriteZeroes).errno(), libc::ENOSPC);
        assert_eq!(past(Op::Read).errno(), libc::EINVAL);
        assert_eq!(past(Op::Discard).errno(), libc::EINVAL);
        assert_eq!(Error::MemLimit { limit: 1 }.errno(), libc::ENOSPC);
        assert_eq!(Error::TableTooLarge { disksize: 1 }.errno(), libc::ENOMEM);
        assert_eq!(Error::InvalidUnitSize(3).errno(), libc::EINVAL);
        assert_eq!(Error::Corrupt("x".into()).errno(), libc::EIO);
        let bad_chain = Error::Alloc(zsmalloc::Error::InvalidChainSize(0));
        assert_eq!(bad_chain.errno(), libc::EINVAL);
        assert!(
            bad_chain.to_string().contains("chain size 0"),
            "{bad_chain}"
        );
    }
}
