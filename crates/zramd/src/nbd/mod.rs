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
//! - `budget`: the bytes of read and write buffers in flight, per connection and in total;
//! - `pool`: the server's spare buffers for write payload pieces and read replies;
//! - `requests`: what a connection's reader and workers share, and the requests without
//!   payload (reads, block status, trims, flushes...);
//! - `server`: [`Service`], one server over any number of listeners: its connections
//!   (accepted by `crate::accept`, limited and timed by `crate::table`), the total budget,
//!   shutdown.
//!
//! Threads: one per connection, plus [`transmission::workers()`] workers once transmission
//! starts. Locks: a connection's writer mutex (one reply at a time, each written whole),
//! the byte budgets, the table of connections. None is held while another is taken.
//!
//! What a client can make the server hold is bounded: option data by
//! [`handshake::MAX_OPTION_DATA`], the handshake's duration by
//! [`ServerConfig::handshake_timeout`], a request's buffer by
//! [`ServerConfig::max_request_bytes`], a connection's requests in flight by a byte budget
//! of the same size, all connections' requests by [`ServerConfig::max_in_flight`] (one
//! request of any allowed size may always proceed alone), the spare buffers kept between
//! requests by a few per worker (`transmission::spare_buffers`), a reply or a request payload
//! under way by [`ServerConfig::io_timeout`], an idle session by
//! [`ServerConfig::idle_timeout`], and connections by [`ServerConfig::max_connections`]
//! and [`ServerConfig::max_handshakes`] (when full, the oldest still negotiating or the
//! longest idle makes way for a newcomer).

use serde::{Deserialize, Serialize};
use zram::Size;

use crate::human::Timeout;

mod budget;
pub mod handshake;
mod pool;
pub mod proto;
mod requests;
pub mod rules;
mod server;
pub mod tls;
pub mod transmission;

pub use server::{Service, Stats};

/// Settings of an NBD server. The same fields serve `zramd serve`'s options and a config
/// file's top-level keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, clap::Args)]
#[serde(default)]
pub struct ServerConfig {
    /// Largest read or write one request may carry, advertised as the maximum block size
    /// (clamped to 4 KiB ..= 1 GiB), and the bytes one connection may have in flight.
    /// Default 32 MiB.
    #[arg(skip = ServerConfig::DEFAULT.max_request_bytes)]
    #[serde(skip)]
    pub max_request_bytes: u32,
    /// NBD connections open at once, negotiating or serving. When full, a new one takes
    /// the place of the oldest still negotiating, else of the one idle the longest; it is
    /// refused only when every connection has requests in flight.
    #[arg(long, default_value_t = ServerConfig::DEFAULT.max_connections)]
    pub max_connections: usize,
    /// NBD connections still negotiating at once; when full, a new one takes the place of
    /// the oldest.
    #[arg(long, default_value_t = ServerConfig::DEFAULT.max_handshakes)]
    pub max_handshakes: usize,
    /// Time a client has for the whole handshake, from connecting to entering
    /// transmission (0: no limit).
    #[arg(long, default_value_t = ServerConfig::DEFAULT.handshake_timeout)]
    pub handshake_timeout: Timeout,
    /// An NBD session with no request for this long is closed (0: never, e.g. for the
    /// kernel's nbd client under a mounted file system).
    #[arg(long, default_value_t = ServerConfig::DEFAULT.idle_timeout)]
    pub idle_timeout: Timeout,
    /// A reply the client does not take, or a request (header and payload) it does not
    /// finish sending, within this long closes its connection (0: no limit).
    #[arg(long, default_value_t = ServerConfig::DEFAULT.io_timeout)]
    pub io_timeout: Timeout,
    /// Bytes of read and write buffers in flight over all NBD connections; requests wait
    /// for room beyond it.
    #[arg(long, default_value_t = ServerConfig::DEFAULT.max_in_flight)]
    pub max_in_flight: Size,
    /// NBD over TLS: off, on (offered to clients that ask with NBD_OPT_STARTTLS) or require
    /// (clients that do not negotiate TLS get no export), with x509 certificates
    /// (`--tls-certificates`) or pre-shared keys (`--tls-psk`).
    #[arg(long, value_enum, default_value_t = TlsMode::Off)]
    pub tls: TlsMode,
    /// Directory with `server-cert.pem` and `server-key.pem` (qemu's tls-creds-x509
    /// layout), for `--tls on|require`.
    #[arg(long)]
    pub tls_certificates: Option<std::path::PathBuf>,
    /// Pre-shared keys for `--tls on|require` instead of certificates: a GnuTLS `psktool`
    /// file, `username:hexkey` per line (as nbdkit's `--tls-psk` and qemu's
    /// `tls-creds-psk` read it). Read once at start.
    #[arg(long, conflicts_with = "tls_certificates")]
    pub tls_psk: Option<std::path::PathBuf>,
}

/// Whether the NBD server offers TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum TlsMode {
    /// Plain NBD only.
    #[default]
    Off,
    /// TLS for clients that ask for it.
    On,
    /// TLS or nothing.
    Require,
}

impl ServerConfig {
    /// The TLS setting these options ask for, loaded (`None` when off).
    /// Credentials with TLS off are refused: whoever gave them meant TLS, and would
    /// otherwise be served in plain without a word.
    pub fn load_tls(&self) -> std::io::Result<Option<tls::Tls>> {
        let invalid = |why| std::io::Error::new(std::io::ErrorKind::InvalidInput, why);
        if self.tls == TlsMode::Off {
            if self.tls_certificates.is_some() || self.tls_psk.is_some() {
                return Err(invalid(
                    "--tls-certificates or --tls-psk (tls_certificates, tls_psk) given, but TLS \
                     is off: add --tls on or --tls require (tls = \"on\" or \"require\")",
                ));
            }
            return Ok(None);
        }
        let require = self.tls == TlsMode::Require;
        match (&self.tls_certificates, &self.tls_psk) {
            (Some(_), Some(_)) => Err(invalid(
                "--tls-certificates and --tls-psk (tls_certificates, tls_psk) exclude each other",
            )),
            (Some(dir), None) => tls::Tls::load(dir, require).map(Some),
            (None, Some(file)) => tls::Tls::load_psk(file, require).map(Some),
            (None, None) => Err(invalid(
                "--tls on|require needs --tls-certificates DIR (server-cert.pem, server-key.pem) \
                 or --tls-psk FILE (username:hexkey lines)",
            )),
        }
    }
}

impl ServerConfig {
    /// The defaults: generous enough that `qemu-img convert`, `nbdcopy` and fio run at full
    /// speed, tight enough that no client holds much for long.
    pub const DEFAULT: Self = Self {
        max_request_bytes: 32 << 20,
        max_connections: 256,
        max_handshakes: 32,
        handshake_timeout: Timeout::secs(10),
        idle_timeout: Timeout::secs(3600),
        io_timeout: Timeout::secs(30),
        max_in_flight: Size(256 << 20),
        tls: TlsMode::Off,
        tls_certificates: None,
        tls_psk: None,
    };

    /// The maximum block size actually advertised and enforced.
    pub fn effective_max_request(&self) -> u32 {
        self.max_request_bytes.clamp(4096, 1 << 30)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}
