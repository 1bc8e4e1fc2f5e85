//! The zram device engine on top of zsmalloc: the kernel's compressed RAM block device as a
//! library.
//!
//! - [`comp`]: compressors (lz4, zstd, lzo, lzo-rle) behind one trait;
//! - [`lzo`]: our clean-room LZO1X / LZO-RLE codec;
//! - [`slot`]: the slot table and per-slot locks;
//! - [`device`]: [`Zram`], the device: reads and writes at any offset, discard,
//!   write-zeroes, limits, reset;
//! - [`unit`]: compression units larger than a page (opt-in, beyond the kernel);
//! - [`compact`]: automatic background compaction;
//! - [`stats`]: counters and the kernel's `mm_stat`, `io_stat`, `debug_stat` formats;
//! - [`size`]: sizes with K/M/G suffixes.
//!
//! Lock order: slot lock → (compressor pool lock | zsmalloc class lock → page source lock).

pub mod comp;
pub mod compact;
pub mod device;
mod error;
pub mod lzo;
pub mod size;
pub mod slot;
pub mod stats;
#[expect(unsafe_code, reason = "the one module that asks the OS for memory")]
mod sys;
pub mod unit;

pub use comp::{Algorithm, AlgorithmParams};
pub use device::{Zram, ZramConfig};
pub use error::{Error, Result};

/// Bytes in one page (one slot).
pub const PAGE_SIZE: usize = 4096;
