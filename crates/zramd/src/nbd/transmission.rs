//! The transmission phase: requests in, replies out.
//!
//! The connection's thread reads request headers (and write payloads) and judges them with
//! [`check_request`]; refused requests are answered at once, and reads and writes of at most
//! [`INLINE`] bytes (of at most [`BUSY_INLINE`] while the server has as many busy
//! connections as CPUs) are run by the reader itself, unless they touch a written-back slot
//! (reading the backing file would hold up the connection's other requests); the rest go
//! through a bounded queue to [`workers()`] worker threads, which run them on the device.
//! Each reply is written whole under the writer lock, so replies of different requests never
//! interleave and may come back in any order (as the protocol allows). Two byte budgets
//! bound the read and write buffers in flight, the connection's and the server's: a request
//! waits until its bytes fit in both (`budget`).
//!
//! A write's payload is read in pieces of at most [`PIECE`] bytes (aligned to multiples of
//! [`PIECE`] on the device, so no compression unit is split) and, once it has arrived whole
//! (a write cut short stores nothing), the pieces go to the workers: a large write keeps
//! every worker busy even when the client sends one write at a time (as `qemu-img convert`
//! does), where a single worker used to compress it alone while the others waited. The last
//! piece done sends the reply. Pieces, and
//! read replies that fit in one, use the server's spare buffers (`spare_buffers`): a
//! buffer goes back after use and the next request, of this connection or another, takes it.
//!
//! The connection's `Activity` tells the server's table what it is doing: a request is in
//! flight from its header to its reply, arriving while its header or payload is being read,
//! and a reply is going out while it is written; the table closes the connection when a
//! transfer lasts longer than the I/O timeout or nothing is in flight for the idle timeout,
//! which ends the blocked read or write here and frees what it held.
//!
//! Replies are simple unless structured replies were negotiated; then reads answer with one
//! `OFFSET_DATA` chunk (so `DF` is always honoured), block status with one `BLOCK_STATUS`
//! chunk, and errors with an `ERROR` chunk; other successes use simple replies, which the
//! protocol allows for replies without payload.
//!
//! `NBD_CMD_DISC`, end of input or an unreadable request stops the reader; the workers
//! finish what was queued (its replies are still sent when the client is there), and the
//! connection closes.

use std::io::{self, BufReader, Read};
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Instant;

use tracing::{debug, warn};
use zram::Zram;

use super::ServerConfig;
use super::budget::Budget;
use super::handshake::Session;
use super::pool::BufPool;
use super::proto::*;
use super::requests::{REPLY_HEAD, Shared, answer, execute, fail};
use super::rules::{Limits, check_request, skip_limit};
use crate::stream::{Conn, discard, is_disconnect};
use crate::table::{Activity, Slot};

/// Most worker threads per connection.
pub const MAX_WORKERS: usize = 4;

/// Worker threads per connection: one per CPU, at most [`MAX_WORKERS`]. The work is
/// compression, so more threads than CPUs only switch more (on two CPUs, four workers per
/// connection wrote 10-15% slower than two under nbdcopy's four connections).
pub fn workers() -> usize {
    cpus().clamp(1, MAX_WORKERS)
}

/// The CPUs this process may run on, asked once (the answer reads the process's CPU
/// affinity and cgroup limits).
fn cpus() -> usize {
    static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, usize::from))
}
/// Requests queued for the workers before the reader waits. Enough to keep the workers
/// busy; more only holds more write payloads at once, and the malloc arena of the reading
/// thread may keep that peak resident after the burst (measured: 32 queued 256 KiB writes
/// left up to 9.3 MiB per connection in the process's RSS, see docs/benchmarks.md).
const QUEUE: usize = 8;
/// Largest piece of a write payload handed to a worker at once, and the size of the spare
/// buffers (with room for a read reply's header). A multiple of every unit size.
pub const PIECE: usize = 256 * 1024;

/// Reads and writes of at most this many bytes are run by the connection's reader itself,
/// not handed to a worker: handing one on wakes a worker and puts it back to sleep (two
/// thread switches) for a few microseconds of (de)compression, and under small random
/// requests (fio, 4 KiB, 16 in flight) those switches took most of the server's time, more
/// so the more connections (each with its own workers). Larger requests still go to the
/// workers, so that one connection's reads and writes are (de)compressed on every CPU.
pub const INLINE: u32 = 16 * 1024;

/// Reads and writes of at most this many bytes are run by the reader too while as many of
/// the server's connections as there are CPUs have requests in flight: the connections keep
/// every CPU busy then, and the hand-off only adds switches (fio's 64 KiB random reads over
/// two and four connections on two CPUs: 1.3-1.8 GiB/s handed on, 2.2-2.4 GiB/s run by the
/// readers). Larger ones (`nbdcopy`'s 256 KiB) still go to the workers, which overlap
/// decompressing one with sending another.
pub const BUSY_INLINE: u32 = 64 * 1024;

/// Spare buffers kept for all connections: a few per worker, whatever the number of
/// connections (2 MiB with two workers, 4 MiB with four). A steady stream of requests needs
/// about one spare per busy worker; a burst beyond allocates and frees.
const SPARE_PER_WORKER: usize = 4;

/// The server's spare buffers: [`PIECE`] bytes and a read reply's header each, at most
/// [`SPARE_PER_WORKER`] per worker kept.
pub(crate) fn spare_buffers() -> BufPool {
    BufPool::new(PIECE + REPLY_HEAD, SPARE_PER_WORKER * workers())
}

/// Work on its way to a worker.
#[derive(Debug)]
enum Job {
    /// A request without payload.
    Whole {
        req: Request,
        start: Instant,
        cost: u64,
    },
    /// `len` bytes of a write's payload, to be written at `offset`.
    Piece {
        write: Arc<Write>,
        offset: u64,
        buf: Box<[u8]>,
        len: usize,
    },
}

/// A write whose pieces are in flight (its payload arrived whole before the first was handed
/// on).
#[derive(Debug)]
struct Write {
    req: Request,
    start: Instant,
    cost: u64,
    /// Pieces not done yet, plus one for the reader while it is still handing them on.
    left: AtomicUsize,
    /// The first piece's failure.
    failed: parking_lot::Mutex<Option<zram::Error>>,
    /// The workers are gone before every piece was handed on: no reply.
    abandoned: AtomicBool,
}

/// Serves requests until the client disconnects or breaks the protocol (or the server's
/// table closes the connection), taking buffer space from the server's `total` budget.
pub(crate) fn serve<C: Conn>(
    conn: C,
    session: Session,
    config: &ServerConfig,
    total: &Budget,
    pool: &BufPool,
    slot: &Slot,
) -> io::Result<()> {
    let peer = slot.peer.as_str();
    conn.set_timeouts(None)?;
    let max_request = config.effective_max_request();
    let limits = Limits {
        size: session.dev.disksize(),
        max_request,
        read_only: session.export.read_only,
        structured: session.structured,
        block_status: session.block_status,
    };
    let shared = Shared {
        writer: Mutex::new(conn.duplicate()?),
        export: session.export,
        dev: session.dev,
        limits,
        peer,
        budget: Budget::new(u64::from(max_request)),
        total,
        activity: &slot.activity,
        broken: AtomicBool::new(false),
        pool,
    };
    let mut reader = BufReader::with_capacity(64 * 1024, conn.duplicate()?);
    let (tx, rx) = sync_channel::<Job>(QUEUE);
    let rx = Mutex::new(rx);
    let result = thread::scope(|s| {
        // Owned here: every way out of this closure drops it, which stops the workers.
        let tx = tx;
        let mut started = 0;
        for i in 0..workers() {
            let spawned = thread::Builder::new()
                .name(format!("nbd-worker-{i}"))
                .spawn_scoped(s, || worker(&shared, &rx));
            match spawned {
                Ok(_) => started += 1,
                Err(e) => warn!(peer, error = %e, "nbd: could not start a worker thread"),
            }
        }
        if started == 0 {
            return Err(io::Error::other("no worker thread could be started"));
        }
        let r = read_loop(&mut reader, &shared, &tx);
        drop(tx);
        r
    });
    conn.close(Shutdown::Both);
    result
}

/// Reads a request header; `Ok(false)` on a clean end of input before its first byte. A
/// header that comes in parts is marked arriving from its first part.
fn read_header(
    reader: &mut impl Read,
    buf: &mut [u8; REQUEST_LEN],
    activity: &Activity,
) -> io::Result<bool> {
    let mut done = 0;
    while done < buf.len() {
        match reader.read(&mut buf[done..]) {
            Ok(0) if done == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                if done == 0 && n < buf.len() {
                    activity.receiving(true);
                }
                done += n;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

fn read_loop<C: Conn>(
    reader: &mut impl Read,
    shared: &Shared<'_, C>,
    tx: &SyncSender<Job>,
) -> io::Result<()> {
    let peer = shared.peer;
    loop {
        if shared.broken.load(Ordering::Relaxed) {
            return Ok(());
        }
        let mut header = [0u8; REQUEST_LEN];
        match read_header(reader, &mut header, shared.activity) {
            Ok(true) => {}
            Ok(false) => {
                debug!(peer, "nbd: client closed the connection");
                return Ok(());
            }
            Err(e) if is_disconnect(&e) || shared.broken.load(Ordering::Relaxed) => {
                debug!(peer, error = %e, "nbd: connection ended");
                return Ok(());
            }
            Err(e) => return Err(e),
        }
        let start = Instant::now();
        let Ok(req) = Request::parse(&header) else {
            warn!(peer, "nbd: bad request magic; closing");
            return Ok(());
        };
        if req.kind == CMD_DISC {
            debug!(peer, "nbd: client sent NBD_CMD_DISC");
            shared.record(req.kind, 0, start, true);
            return Ok(());
        }
        shared.activity.begin();
        if let Err(refusal) = check_request(&req, &shared.limits) {
            warn!(
                peer,
                kind = req.kind,
                flags = req.flags,
                offset = req.offset,
                length = req.length,
                error = refusal.error,
                reason = refusal.message,
                "nbd: request refused"
            );
            let payload = req.payload_len();
            let keep_going = payload <= skip_limit(&shared.limits);
            if payload > 0 && keep_going {
                shared.activity.receiving(true);
                discard(reader, u64::from(payload))?;
            }
            shared.activity.receiving(false);
            shared.send_error(req.handle, refusal.error, refusal.message);
            shared.record(req.kind, 0, start, false);
            shared.activity.end();
            if !keep_going {
                warn!(
                    peer,
                    length = payload,
                    "nbd: write payload too large to skip; closing"
                );
                return Ok(());
            }
            continue;
        }
        let cost = match req.kind {
            CMD_READ | CMD_WRITE => u64::from(req.length),
            _ => 0,
        };
        shared.take(cost);
        if req.kind == CMD_WRITE {
            if !read_write(reader, shared, tx, req, start)? {
                return Ok(());
            }
            continue;
        }
        if req.kind == CMD_READ && inline(shared, &req) {
            // Cheaper here than handed on: see INLINE.
            execute(shared, &req, start);
            shared.done(cost);
            continue;
        }
        if let Err(unsent) = tx.send(Job::Whole { req, start, cost }) {
            if let Job::Whole { cost, .. } = unsent.0 {
                shared.done(cost);
            }
            return Ok(());
        }
    }
}

/// Reads a write's payload in pieces, then hands them all to the workers (or stores and
/// answers it itself, for a write small enough: [`inline`]); `Ok(false)` when the connection
/// ended on the way (nothing of the write is stored then) or the workers are gone.
fn read_write<C: Conn>(
    reader: &mut impl Read,
    shared: &Shared<'_, C>,
    tx: &SyncSender<Job>,
    req: Request,
    start: Instant,
) -> io::Result<bool> {
    let cost = u64::from(req.length);
    shared.activity.receiving(true);
    let piece = PIECE as u64;
    let end = req.offset + u64::from(req.length);
    let mut pieces = Vec::with_capacity(req.length.div_ceil(PIECE as u32) as usize + 1);
    let mut offset = req.offset;
    while offset < end {
        let len = (piece - offset % piece).min(end - offset) as usize;
        let mut buf = shared.pool.get();
        if let Err(e) = reader.read_exact(&mut buf[..len]) {
            shared.pool.put(buf);
            for (_, buf, _) in pieces {
                shared.pool.put(buf);
            }
            shared.done(cost);
            debug!(peer = %shared.peer, error = %e, "nbd: connection ended inside a write payload");
            return if is_disconnect(&e) { Ok(false) } else { Err(e) };
        }
        pieces.push((offset, buf, len));
        offset += len as u64;
    }
    shared.activity.receiving(false);
    if inline(shared, &req) {
        // Stored here, every piece (the first failure answers), with no shared state.
        let mut result = Ok(());
        for (offset, buf, len) in pieces {
            let stored = shared.dev.write(offset, &buf[..len]);
            shared.pool.put(buf);
            result = result.and(stored);
        }
        answer_write(shared, &req, start, result);
        shared.done(cost);
        return Ok(true);
    }
    let write = Arc::new(Write {
        req,
        start,
        cost,
        left: AtomicUsize::new(pieces.len() + 1),
        failed: parking_lot::Mutex::new(None),
        abandoned: AtomicBool::new(false),
    });
    let mut pieces = pieces.into_iter();
    for (offset, buf, len) in pieces.by_ref() {
        let job = Job::Piece {
            write: Arc::clone(&write),
            offset,
            buf,
            len,
        };
        if let Err(unsent) = tx.send(job) {
            if let Job::Piece { buf, .. } = unsent.0 {
                shared.pool.put(buf);
            }
            write.abandoned.store(true, Ordering::Relaxed);
            // The unsent pieces (this one and the rest) are done without being stored.
            let unsent = 1 + pieces.len();
            for (_, buf, _) in pieces {
                shared.pool.put(buf);
            }
            write.left.fetch_sub(unsent, Ordering::AcqRel);
            piece_done(shared, &write);
            return Ok(false);
        }
    }
    piece_done(shared, &write);
    Ok(true)
}

/// One piece of `write` (or the reader's part) is done; the last one answers the write.
fn piece_done<C: Conn>(shared: &Shared<'_, C>, write: &Write) {
    if write.left.fetch_sub(1, Ordering::AcqRel) != 1 {
        return;
    }
    if !write.abandoned.load(Ordering::Relaxed) {
        let result = write.failed.lock().take().map_or(Ok(()), Err);
        answer_write(shared, &write.req, write.start, result);
    }
    shared.done(write.cost);
}

/// Answers a write whose pieces are all stored (`result`: the first failure), flushing
/// first when the client asked for FUA.
fn answer_write<C: Conn>(
    shared: &Shared<'_, C>,
    req: &Request,
    start: Instant,
    mut result: zram::Result<()>,
) {
    if result.is_ok() && req.flags & CMD_FLAG_FUA != 0 {
        result = shared.dev.flush();
    }
    answer(shared, req, start, result.map_err(fail));
}

/// Whether a read or write is run by the reader itself ([`runs_inline`]).
fn inline<C: Conn>(shared: &Shared<'_, C>, req: &Request) -> bool {
    runs_inline(&shared.dev, req, shared.activity.busy_connections(), cpus())
}

/// Whether a read or write is run by the connection's reader itself: when it is small
/// ([`INLINE`]), or at most [`BUSY_INLINE`] while `busy` connections, as many as there are
/// `cpus`, have requests in flight (the connections keep the CPUs busy then, and a worker
/// would add only thread switches). Never when a slot it touches is written back: reading
/// the backing file may take milliseconds, and the reader would read no further request of
/// the connection meanwhile. (A worker reads the file under the slot's lock, so a request
/// the reader runs meanwhile still waits if its slot shares that lock: one slot in 4,096.)
fn runs_inline(dev: &Zram, req: &Request, busy: usize, cpus: usize) -> bool {
    let len = req.length;
    (len <= INLINE || (len <= BUSY_INLINE && busy >= cpus))
        && !dev.on_backing(req.offset, u64::from(len))
}

fn worker<C: Conn>(shared: &Shared<'_, C>, rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(PoisonError::into_inner);
            rx.recv()
        };
        match job {
            Err(_) => return,
            Ok(Job::Whole { req, start, cost }) => {
                execute(shared, &req, start);
                shared.done(cost);
            }
            Ok(Job::Piece {
                write,
                offset,
                buf,
                len,
            }) => {
                if let Err(e) = shared.dev.write(offset, &buf[..len]) {
                    write.failed.lock().get_or_insert(e);
                }
                shared.pool.put(buf);
                piece_done(shared, &write);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use zram::backing::MemBacking;
    use zram::{PAGE_SIZE, ZramConfig};

    use super::*;

    fn request(kind: u16, page: u64, length: u32) -> Request {
        Request {
            flags: 0,
            kind,
            handle: 1,
            offset: page * PAGE_SIZE as u64,
            length,
        }
    }

    #[test]
    fn a_request_touching_a_written_back_slot_goes_to_the_workers() {
        let config = ZramConfig {
            disksize: 16 * PAGE_SIZE as u64,
            auto_compact: None,
            ..ZramConfig::default()
        };
        let dev = Zram::with_backing(config, Some(Arc::new(MemBacking::new()))).unwrap();
        let text: Vec<u8> = b"a page of text, as compressible as any "
            .iter()
            .copied()
            .cycle()
            .take(PAGE_SIZE)
            .collect();
        for page in 0..8 {
            dev.write(page * PAGE_SIZE as u64, &text).unwrap();
        }
        dev.writeback(&"page_indexes=2-3".parse().unwrap()).unwrap();
        let page = PAGE_SIZE as u32;
        for kind in [CMD_READ, CMD_WRITE] {
            assert!(runs_inline(&dev, &request(kind, 0, page), 0, 2));
            assert!(runs_inline(&dev, &request(kind, 4, 4 * page), 0, 2));
            assert!(!runs_inline(&dev, &request(kind, 2, page), 0, 2));
            assert!(!runs_inline(&dev, &request(kind, 0, 4 * page), 0, 2));
            assert!(!runs_inline(&dev, &request(kind, 3, 16), 2, 2));
            // Size alone, elsewhere.
            assert!(!runs_inline(&dev, &request(kind, 4, INLINE + 1), 0, 2));
            assert!(runs_inline(&dev, &request(kind, 4, INLINE + 1), 2, 2));
            assert!(!runs_inline(&dev, &request(kind, 4, BUSY_INLINE + 1), 2, 2));
        }
    }
}
