//! The opt-in metrics endpoint (`--metrics HOST:PORT`): `GET /metrics` answers in the
//! OpenMetrics text format (which Prometheus scrapes), written by `prometheus-client`'s
//! encoder from collectors that read the figures at each scrape (nothing is copied into a
//! registry between scrapes):
//!
//! - per device (`devices`): `zramd_device_info{device,algorithm,allocator} 1`, the sizes
//!   (`zramd_disksize_bytes`, `zramd_unit_size_bytes`), `mm_stat`, `io_stat` and `bd_stat`
//!   figures, writeback, recompression and policy counters, the backing file, folding and
//!   deduplication, and per-request counts, bytes and latency histograms;
//! - the connections of the NBD server and of this endpoint (`conns`);
//! - `zramd_build_info{version} 1` and the standard process metrics (`process`).
//!
//! Names follow Prometheus's conventions: counters end in `_total`, sizes in `_bytes`,
//! times in `_seconds`; every family has `HELP` and `TYPE` lines.
//!
//! `HEAD /metrics` answers the headers alone (with the length of the body `GET` would
//! get); other methods get 405. Scrapes are served concurrently, each connection on its own
//! thread and bounded as every endpoint (`crate::endpoint`): at most [`MAX_CONNECTIONS`] at
//! once, and when full the oldest connection still sending its request (else the one
//! answered longest ago) makes way, so neither silent connections nor answered ones that do
//! not close can keep a scrape out; 5 s for the whole request head, at most
//! [`MAX_HEAD`] bytes of it.

mod conns;
mod devices;
mod family;
mod process;

use std::net::TcpListener;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use prometheus_client::registry::Registry as Collectors;

use crate::endpoint::{self, Endpoint, REQUEST_DEADLINE, Unanswered};
use crate::listen::Listener;
use crate::nbd::Service;
use crate::registry::Registry;
use crate::table::Table;

/// Metrics connections served at once.
pub const MAX_CONNECTIONS: usize = 8;
/// Longest request head accepted, in bytes.
pub const MAX_HEAD: usize = 8 * 1024;
/// The exposition's content type.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The collectors of a server: its devices, the connection tables given, the process.
fn collectors(registry: Arc<Registry>, tables: Vec<Arc<Table>>) -> Collectors {
    let mut all = Collectors::default();
    all.register_collector(Box::new(process::Process));
    let zramd = all.sub_registry_with_prefix("zramd");
    zramd.register_collector(Box::new(process::Build));
    zramd.register_collector(Box::new(devices::Devices(registry)));
    if !tables.is_empty() {
        zramd.register_collector(Box::new(conns::Connections(tables)));
    }
    all
}

/// The exposition text of `collectors`, ending with `# EOF`.
fn encode(collectors: &Collectors) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail, and the collectors report no errors of their own.
    let _ = prometheus_client::encoding::text::encode(&mut out, collectors);
    out
}

/// The exposition text for every device of `registry` (and the process), as a scrape
/// gets it without the connection counts.
pub fn render(registry: &Arc<Registry>) -> String {
    encode(&collectors(Arc::clone(registry), Vec::new()))
}

/// Serves `GET /metrics` (and `HEAD`) until `shutdown` is set, with the figures of
/// `registry` and the connection counts of `nbd` and of this endpoint.
pub fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    nbd: &Service,
    shutdown: Arc<AtomicBool>,
) -> std::io::Result<()> {
    let table = endpoint::table::<Metrics>();
    let tables = vec![Arc::clone(nbd.table()), Arc::clone(&table)];
    let metrics = Metrics {
        collectors: collectors(registry, tables),
    };
    endpoint::serve_in(Listener::Tcp(listener), metrics, &table, &shutdown)
}

/// The metrics endpoint.
#[derive(Debug)]
struct Metrics {
    collectors: Collectors,
}

/// An HTTP answer that closes the connection; without `send_body`, `HEAD`'s headers alone
/// (with `Content-Length` the body's).
fn http(status: &str, headers: &str, body: &str, send_body: bool) -> Vec<u8> {
    let mut answer = format!(
        "HTTP/1.1 {status}\r\n{headers}Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if send_body {
        answer.push_str(body);
    }
    answer.into_bytes()
}

/// A request line's method, path (without the query) and major version: `METHOD TARGET
/// HTTP/d.d`, words separated by single spaces, the method a token, the target a path
/// (`/metrics`) or an absolute URL (`http://host/metrics`, which proxies send). `None` for
/// anything else.
fn request_line(line: &[u8]) -> Option<(&[u8], &[u8], u8)> {
    let mut words = line.split(|&b| b == b' ');
    let (method, target, version) = (words.next()?, words.next()?, words.next()?);
    let tchar = |b: &u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b);
    if words.next().is_some() || method.is_empty() || !method.iter().all(tchar) {
        return None;
    }
    let target = match target.strip_prefix(b"http://") {
        Some(rest) => rest
            .iter()
            .position(|&b| b == b'/')
            .map_or(&b"/"[..], |at| &rest[at..]),
        None => target.starts_with(b"/").then_some(target)?,
    };
    let path = target.split(|&b| b == b'?').next()?;
    match version.strip_prefix(b"HTTP/")? {
        &[major, b'.', minor] if major.is_ascii_digit() && minor.is_ascii_digit() => {
            Some((method, path, major - b'0'))
        }
        _ => None,
    }
}

/// A plain-text error answer.
fn error(status: &str, body: &str) -> Vec<u8> {
    http(
        status,
        "Content-Type: text/plain; charset=utf-8\r\n",
        body,
        true,
    )
}

impl Endpoint for Metrics {
    const NAME: &'static str = "metrics";
    const MAX_CONNECTIONS: usize = MAX_CONNECTIONS;
    // The empty line that ends the head, after CRLF or a bare LF (RFC 9112 lets a server
    // take LF alone as a line's end).
    const ENDS: &'static [&'static [u8]] = &[b"\n\r\n", b"\n\n"];
    const MAX_REQUEST: usize = MAX_HEAD;

    fn answer(&self, head: &[u8]) -> Vec<u8> {
        let line = head
            .split(|&b| b == b'\r' || b == b'\n')
            .next()
            .unwrap_or_default();
        let Some((method, path, version)) = request_line(line) else {
            return error(
                "400 Bad Request",
                "not an HTTP request line; try GET /metrics HTTP/1.1\n",
            );
        };
        if version != 1 {
            return error("505 HTTP Version Not Supported", "HTTP/1.x only\n");
        }
        let head_only = method == b"HEAD";
        if !matches!(path, b"/metrics" | b"/") {
            let body = "not found; try GET /metrics\n";
            let plain = "Content-Type: text/plain; charset=utf-8\r\n";
            return http("404 Not Found", plain, body, !head_only);
        }
        if method != b"GET" && !head_only {
            let headers = "Allow: GET, HEAD\r\nContent-Type: text/plain; charset=utf-8\r\n";
            return http(
                "405 Method Not Allowed",
                headers,
                "only GET and HEAD\n",
                true,
            );
        }
        let headers = format!("Content-Type: {CONTENT_TYPE}\r\n");
        http("200 OK", &headers, &encode(&self.collectors), !head_only)
    }

    fn unanswered(&self, why: Unanswered) -> Vec<u8> {
        match why {
            Unanswered::TooLong => error(
                "431 Request Header Fields Too Large",
                &format!("request head longer than {MAX_HEAD} bytes\n"),
            ),
            Unanswered::TooSlow => error(
                "408 Request Timeout",
                &format!(
                    "request not received within {}s\n",
                    REQUEST_DEADLINE.as_secs()
                ),
            ),
            Unanswered::Busy => error(
                "503 Service Unavailable",
                "too many metrics connections; try again\n",
            ),
        }
    }
}
