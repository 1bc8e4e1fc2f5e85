//! `libzramd_uswap.so`: the LD_PRELOAD shim behind `zramd run` (issue 14, "for unmodified
//! programs"). Loaded into a program, it serves the program's large anonymous mappings
//! with uswap regions: their pages beyond a resident budget live compressed on a zram
//! device and come back, with seed 002's readahead, when touched.
//!
//! - [`config`]: the settings, from the environment `zramd run` prepares (without
//!   `ZRAMD_USWAP_BUDGET` the shim is off and passes every call through);
//! - [`registry`]: which mappings are served, and what `munmap`, `madvise`, `mremap` and
//!   fixed mappings do to served ones (`spans`: the address arithmetic);
//! - [`control`]: the figures, answered on its socket while the program runs (and
//!   written by `sys` as one JSON line at exit);
//! - `sys`: the only `unsafe` code: the interposed functions, the constructor, the exit
//!   handler.
//!
//! Served: `mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS[|…], -1, _)`
//! with `len` at least the threshold and none of `MAP_FIXED`, `MAP_SHARED`,
//! `MAP_HUGETLB`, `MAP_GROWSDOWN`, `MAP_STACK`, each by its own region with the whole
//! budget (the budget is per mapping). Only calls through the dynamic `mmap`/`mmap64`
//! symbols are seen: glibc's malloc maps its large blocks with an internal call, and
//! statically linked programs have no dynamic symbols at all.
//!
//! On a served mapping: `munmap` of all of it drops the region; of a part, discards those
//! pages and makes them inaccessible (`PROT_NONE`) until the rest goes, since the region's
//! mapping is unmapped whole; `madvise(MADV_DONTNEED | MADV_FREE | MADV_REMOVE)` discards
//! (the pages read as zeroes after), other advice is accepted and not applied; `mremap`
//! and a `MAP_FIXED` mapping over it fail with `ENOMEM`. `mprotect` is not interposed.

pub mod config;
pub mod control;
pub mod registry;
mod spans;
#[expect(
    unsafe_code,
    reason = "interposing libc's mapping calls, the library constructor and exit handler"
)]
mod sys;
