//! A userspace zsmalloc: the kernel's allocator for compressed objects.
//!
//! Objects of 1..=4096 bytes are packed into *zspages* (runs of up to `chain_size` pages)
//! by *size class*; the classes, their zspage geometry, their merging and the huge-class
//! watermark are exactly the kernel's for any chain size ([`class`]). Objects are named by
//! stable [`Handle`]s that survive compaction. Every class is split into *shards*, each
//! with its own lock; the lock order is documented in [`pool`]. Zspages are carved from
//! large anonymous mappings and an emptied zspage's pages go back to the OS at once
//! ([`sys`]), so the process's resident memory follows [`Pool::total_pages`]. Several
//! handles may name one object: [`Pool::share`], inline deduplication
//! ([`Pool::malloc_dedup`]) and folding of identical objects ([`Pool::fold`], seed 004), also
//! across the shards of a size class.
//!
//! ```
//! let pool = zsmalloc::Pool::new(8).unwrap();
//! let h = pool.malloc(100).unwrap();
//! pool.write(h, b"hello").unwrap();
//! let mut buf = [0u8; 5];
//! pool.read(h, &mut buf).unwrap();
//! assert_eq!(&buf, b"hello");
//! pool.free(h).unwrap();
//! ```

// Settings and geometry.
pub mod allocator;
pub mod class;
mod config;

// Memory from the OS and the locks.
mod sync;
#[expect(unsafe_code, reason = "the one module that maps and releases memory")]
pub mod sys;

// Names and places: handles, zspages, class shards.
mod handle;
mod shard;
mod sharing;
mod thread;
mod zspage;

// The pool and its mechanisms, one file each (each an `impl Pool`).
mod alloc;
mod compact;
pub mod fold;
mod index;
mod invariants;
mod merge;
pub mod pool;
mod share;
pub mod stats;

// The other allocators.
pub mod afmalloc;
mod sysmalloc;
mod zbud;

// Errors, and the interface every allocator offers.
pub mod backend;
mod error;
mod open;

pub use afmalloc::Afmalloc;
pub use allocator::Allocator;
pub use backend::Backend;
pub use class::{ClassGeometry, ClassTable, Geometry};
pub use config::{DEFAULT_PAGE_CACHE_PAGES, Locking, PoolConfig};
pub use error::{Error, Result};
pub use fold::{FoldReport, ShareStats};
pub use handle::Handle;
pub use open::open;
pub use pool::Pool;
pub use stats::{ClassStats, INUSE_BUCKETS, PoolStats, format_class_table};
pub use sys::PAGE_SIZE;
pub use sysmalloc::{MALLOC_CHUNK_HEADER, SysMalloc};
#[doc(hidden)]
pub use thread::pin_malloc_shard;
pub use thread::{ExitWatch, shard_thread_exits, thread_number, watch_shard_thread_exits};
pub use zbud::{CHUNK_SIZE as ZBUD_CHUNK_SIZE, Zbud};
