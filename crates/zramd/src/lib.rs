//! zramd's front ends as a library: the NBD server, the exports it serves, the control
//! endpoint, the metrics and the `serve` orchestration. The `zramd` binary (`main.rs`) is
//! the command line on top.

pub(crate) mod accept;
pub mod cgroup;
pub mod control;
pub mod daemon;
pub mod device;
pub(crate) mod endpoint;
pub mod export;
pub mod figures;
pub mod fuse;
pub mod generator;
pub mod hotplug;
pub mod human;
pub mod image;
pub mod listen;
pub mod logging;
pub mod metrics;
pub mod nbd;
pub mod registry;
pub mod serve;
pub(crate) mod stream;
pub mod swap;
#[expect(
    unsafe_code,
    reason = "the one module that sets a signal's disposition"
)]
pub mod sys;
pub mod sysfs;
pub(crate) mod table;
pub(crate) mod tally;
