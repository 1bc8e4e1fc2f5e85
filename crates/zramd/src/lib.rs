//! zramd's front ends as a library: the NBD server, the exports it serves, the control
//! endpoint and the metrics. The `zramd` binary (`main.rs`) is the command line on top.

pub mod export;
pub mod nbd;
