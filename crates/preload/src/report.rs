//! What the shim reports, at exit on the stats descriptor and on the control socket: one
//! JSON object, `{"pid":P,"uswap":[RegionStats…],"served":N,"passed_through":M}` — uswap's
//! `ProgramFigures`, which `zramd run` and `zramd stat` read back.

pub use uswap::ProgramFigures as Report;
