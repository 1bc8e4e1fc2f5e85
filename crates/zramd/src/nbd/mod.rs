//! The NBD server: zram devices as network block devices, written from the protocol's own
//! description (`doc/proto.md` of the NetworkBlockDevice project).
//!
//! - [`proto`]: constants, message layouts, pure parsers and encoders (fuzzed);
//! - [`rules`]: how a request is judged before it runs, and block status extents (pure,
//!   fuzzed with the parsers through [`rules::exercise_parsers`]);
//! - `handshake`: fixed newstyle negotiation: `EXPORT_NAME`, `ABORT`, `LIST`, `INFO`, `GO`,
//!   `STRUCTURED_REPLY`, `LIST_META_CONTEXT` and `SET_META_CONTEXT` (`base:allocation`);
//! - `transmission`: requests and replies (simple or structured), one reader thread and a
//!   few workers per connection, replies written whole under the connection's writer lock;
//! - `server`: [`serve_tcp`] and [`serve_unix`], the accept loop, the connection limit and
//!   shutdown.
//!
//! Threads: one per connection, plus [`transmission::workers()`] workers once transmission
//! starts. Locks: a connection's writer mutex (one reply at a time, each written whole) and
//! its in-flight byte budget; the server's connection registry. None is held while another
//! is taken.
//!
//! What a client can make the server hold is bounded: option data by
//! [`handshake::MAX_OPTION_DATA`], the handshake's duration by
//! [`ServerConfig::handshake_timeout`], a request's buffer by
//! [`ServerConfig::max_request_bytes`], and a connection's requests in flight by a byte
//! budget of the same size (one request of any allowed size may always proceed alone).

use std::time::Duration;

mod conn;
pub mod handshake;
pub mod proto;
pub mod rules;
mod server;
pub mod transmission;

pub use server::{serve_tcp, serve_unix};

/// Settings of an NBD server.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Largest read or write one request may carry, advertised as the maximum block size
    /// (clamped to 4 KiB ..= 1 GiB). Default 32 MiB.
    pub max_request_bytes: u32,
    /// Time a client has for the whole handshake, from connecting to entering
    /// transmission. Default 10 s.
    pub handshake_timeout: Duration,
    /// Connections served at once; more are accepted and closed at once. Default 256.
    pub max_connections: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            max_request_bytes: 32 << 20,
            handshake_timeout: Duration::from_secs(10),
            max_connections: 256,
        }
    }
}

impl ServerConfig {
    /// The maximum block size actually advertised and enforced.
    pub fn effective_max_request(&self) -> u32 {
        self.max_request_bytes.clamp(4096, 1 << 30)
    }
}
