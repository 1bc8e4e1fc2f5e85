//! The zram device engine on top of zsmalloc: the kernel's compressed RAM block device as a
//! library.
//!
//! - [`config`]: [`ZramConfig`], a device's settings (nesting the pool's);
//! - [`device`]: [`Zram`], the device: requests at any offset, split into slots;
//! - `store`: the storage path, read/write/free of one slot (the kernel's
//!   `zram_read_page`/`zram_write_page`/`zram_free_page`);
//! - `chain`: data spread over several objects (compression units larger than a page);
//! - `same`: same-filled pages;
//! - `post`: the slot changes of post-processing (stream out, switch to the file, re-encode);
//! - [`pp`]: post-processing: choosing slots, the `idle`/`writeback`/`recompress` arguments;
//! - `shared`: the shared objects a pass met (seed 004), so that it works on each once;
//! - [`writeback`]: moving slots to the backing file;
//! - [`recompress`]: re-encoding slots with a secondary algorithm;
//! - [`policy`]: automatic recompression and writeback in rounds (beyond the kernel);
//! - [`slot`]: the slot table and per-slot locks;
//! - [`comp`]: compressors (lz4, lz4hc, zstd, lzo, lzo-rle) behind one trait;
//! - [`lzo`]: our clean-room LZO1X / LZO-RLE codec;
//! - [`compact`]: automatic background compaction;
//! - [`backing`]: backing stores for written-back slots ([`backing::FileBacking`], a packed log);
//! - [`stats`]: counters and the kernel's `mm_stat`, `io_stat`, `debug_stat` formats;
//! - [`limit`]: a memory limit several devices share;
//! - [`size`]: sizes with K/M/G suffixes;
//! - [`error`]: the error type and its one mapping to errnos;
//! - `sys`: the zeroed slot table from the OS and the LZO decoder's fast loop (the crate's
//!   only `unsafe`).
//!
//! Files import only files below them in this order: device → policy → (writeback, recompress) →
//! (pp, shared) → post → store → (backing, chain, same, slot, comp, stats, limit) → (error, size,
//! sys).
//!
//! Lock order: slot lock → (compressor context: per thread, no lock | zsmalloc class-shard
//! lock → page-source lock | the shared limit's lock, after the allocation, under which only
//! the pools' page counts are read).

pub mod backing;
mod chain;
pub mod clean;
pub mod comp;
pub mod compact;
pub mod config;
pub mod device;
pub mod error;
mod figures;
pub mod fold;
pub mod limit;
pub mod lzo;
pub mod policy;
mod post;
pub mod pp;
pub mod recompress;
mod same;
mod shared;
pub mod size;
pub mod slot;
pub mod stats;
mod store;
#[expect(
    unsafe_code,
    reason = "the one module that asks the OS for memory or copies without bounds checks"
)]
mod sys;
pub mod writeback;

pub use chain::{links, pieces};
pub use clean::CleanReport;
pub use comp::{Algorithm, AlgorithmParams};
pub use config::{RecompAlgorithm, ZramConfig};
pub use device::{BlockState, Zram};
pub use error::{Error, Op, Result};
pub use fold::FoldStats;
pub use limit::SharedLimit;
pub use policy::{Policy, PolicyStats};
pub use pp::{IdleRequest, Mode, RecompressRequest, WritebackRequest};
pub use recompress::RecompressReport;
pub use size::Size;
pub use writeback::WritebackReport;
/// The allocator's types a device's settings and figures name, so that front ends reach the
/// allocator only through this crate.
pub use zsmalloc::{
    Allocator, Backend, ClassStats, FoldReport, Geometry, Handle, Locking, Pool, PoolConfig,
    ShareStats, class::Header, format_class_table,
};

/// Bytes in one page (one slot).
pub const PAGE_SIZE: usize = 4096;
