//! The lab: zramd measured side by side with named peers on the same machine. The
//! `zramd-lab` binary (`main.rs`) is its command line; `zramd bench ARGS…` runs
//! `zramd-lab bench ARGS…`.
//!
//! - [`mod@bench`]: the measurements (`bench --input FILE`, `bench pool`, `bench nbd`,
//!   `bench untar`, `bench dedup`, `bench locking`), each a clap `Args` and a `run()`;
//! - [`report`]: `report` (`zramd lab`): every seed's scenario and one report of them;
//! - [`kernel`]: the kernel's own zram, hot-added for side-by-side runs and parity tests;
//! - [`progress`]: progress bars of the long benches (stderr, on a terminal only);
//! - [`rss`]: this process's resident memory;
//! - [`sys`]: the CPU time this process and its threads have used (the crate's only
//!   `unsafe`).
//!
//! The lab sits on top: it uses zsmalloc, zram and zramd's library (the untar bench serves
//! a device in-process, the nbd bench asks a `zramd` process through its control socket);
//! nothing below depends on it.

pub mod bench;
pub mod kernel;
pub mod progress;
pub mod report;
pub mod rss;
#[expect(unsafe_code, reason = "the one module that asks the OS for CPU times")]
pub mod sys;
