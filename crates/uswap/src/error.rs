//! What region operations can fail with.

use std::io;

/// A region error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed (mapping, userfaultfd, threads).
    // The cause is told in the message, so it is not a `source` as well: a report of the
    // chain (`{:#}`) would say it twice.
    #[error("{what}: {cause}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The system's error.
        cause: io::Error,
    },
    /// The kernel does not let this process use userfaultfd (or lacks a feature the region
    /// needs).
    #[error("userfaultfd unavailable: {0}")]
    Unavailable(String),
    /// The zram device could not be made.
    #[error("zram device: {0}")]
    Device(zram::Error),
    /// Bad settings or arguments.
    #[error("{0}")]
    Invalid(String),
    /// The fault handler failed and the region was torn down: its memory is inaccessible
    /// (touching it raises SIGSEGV) and its data is gone.
    #[error("region failed: {0}")]
    Failed(String),
}

impl Error {
    pub(crate) fn sys(what: &'static str) -> impl FnOnce(io::Error) -> Self {
        move |cause| Self::Sys { what, cause }
    }
}

impl From<zram::Error> for Error {
    fn from(e: zram::Error) -> Self {
        Error::Device(e)
    }
}

/// A region result.
pub type Result<T> = std::result::Result<T, Error>;
