//! The figures of a program run by `zramd run`: what its preloaded shim
//! (`crates/preload`, `libzramd_uswap.so`) writes at exit and answers on its control
//! socket — uswap's `ProgramFigures`, one type on both sides of the pipe.

pub use uswap::ProgramFigures;
