//! The transmission phase: requests in, replies out.
//!
//! The connection's thread reads request headers (and write payloads) and judges them with
//! [`check_request`]; refused requests are answered at once, the rest go through a bounded
//! queue to [`workers()`] worker threads, which run them on the device and write each reply
//! whole under the writer lock, so replies of different requests never interleave and may
//! come back in any order (as the protocol allows). Two byte budgets bound the read and
//! write buffers in flight, the connection's and the server's: a request waits until its
//! bytes fit in both (`budget`).
//!
//! The connection's [`Activity`] tells the server's table what it is doing: a request is in
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::Instant;

use tracing::{debug, warn};

use super::ServerConfig;
use super::budget::Budget;
use super::handshake::Session;
use super::proto::*;
use super::rules::{Limits, block_status_extents, check_request, skip_limit};
use crate::device::Opened;
use crate::export::{Export, Op};
use crate::stream::{Conn, discard, is_disconnect};
use crate::table::{Activity, Slot};
use zram::{BlockState, Zram};

/// Most worker threads per connection.
pub const MAX_WORKERS: usize = 4;

/// Worker threads per connection: one per CPU, at most [`MAX_WORKERS`]. The work is
/// compression, so more threads than CPUs only switch more (on two CPUs, four workers per
/// connection wrote 10-15% slower than two under nbdcopy's four connections).
pub fn workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, MAX_WORKERS)
}
/// Requests queued for the workers before the reader waits. Enough to keep the workers
/// busy; more only holds more write payloads at once, and the malloc arena of the reading
/// thread may keep that peak resident after the burst (measured: 32 queued 256 KiB writes
/// left up to 9.3 MiB per connection in the process's RSS, see docs/benchmarks.md).
const QUEUE: usize = 8;
/// Most block status descriptors in one reply (the protocol lets a reply cover less).
pub const MAX_EXTENTS: usize = 32 * 1024;
/// Granularity of block status: the device's page.
const PAGE: u64 = zram::PAGE_SIZE as u64;
/// Zeroes written for `WRITE_ZEROES` with `NO_HOLE`.
static ZEROES: [u8; 64 * 1024] = [0; 64 * 1024];

/// A request on its way to a worker.
#[derive(Debug)]
struct Job {
    req: Request,
    payload: Vec<u8>,
    start: Instant,
    cost: u64,
}

/// What the reader and the workers of one connection share.
struct Shared<'a, C> {
    writer: Mutex<C>,
    export: Arc<Export>,
    dev: Opened,
    limits: Limits,
    peer: &'a str,
    /// This connection's requests in flight.
    budget: Budget,
    /// All connections' requests in flight.
    total: &'a Budget,
    activity: &'a Activity,
    /// A reply could not be sent: the connection is dead.
    broken: AtomicBool,
}

impl<C: Conn> Shared<'_, C> {
    /// Takes a request's bytes from both budgets, the connection's first.
    fn take(&self, cost: u64) {
        self.budget.take(cost);
        self.total.take(cost);
    }

    /// A request is done with its bytes and answered (or dropped).
    fn done(&self, cost: u64) {
        self.activity.end();
        self.total.give(cost);
        self.budget.give(cost);
    }

    /// Writes one whole reply; on failure marks the connection broken and shuts it down
    /// so that the reader stops too.
    fn send(&self, bytes: &[u8]) {
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        let mut w = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        self.activity.sending(true);
        let sent = io::Write::write_all(&mut *w, bytes);
        self.activity.sending(false);
        if let Err(e) = sent {
            debug!(peer = %self.peer, error = %e, "nbd: reply not delivered; closing");
            self.broken.store(true, Ordering::Relaxed);
            w.close(Shutdown::Both);
        }
    }

    /// Sends an error reply in the negotiated style.
    fn send_error(&self, handle: u64, error: u32, message: &str) {
        if self.limits.structured {
            self.send(&error_chunk(handle, error, message));
        } else {
            self.send(&simple_reply(error, handle));
        }
    }

    fn record(&self, kind: u16, bytes: u64, start: Instant, ok: bool) {
        self.export
            .stats
            .record(op_of(kind), bytes, start.elapsed(), ok);
    }
}

/// The statistics bucket of a command.
fn op_of(kind: u16) -> Op {
    match kind {
        CMD_READ => Op::Read,
        CMD_WRITE => Op::Write,
        CMD_TRIM => Op::Trim,
        CMD_WRITE_ZEROES => Op::WriteZeroes,
        CMD_FLUSH => Op::Flush,
        _ => Op::Other,
    }
}

/// The protocol error for a device error: the device's errno (the protocol's values are
/// Linux's).
fn errno(e: &zram::Error) -> u32 {
    u32::try_from(e.errno()).unwrap_or(EIO)
}

/// Serves requests until the client disconnects or breaks the protocol (or the server's
/// table closes the connection), taking buffer space from the server's `total` budget.
pub(crate) fn serve<C: Conn>(
    conn: C,
    session: Session,
    config: &ServerConfig,
    total: &Budget,
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
        let mut payload = Vec::new();
        if req.kind == CMD_WRITE {
            shared.activity.receiving(true);
            payload = vec![0u8; req.length as usize];
            if let Err(e) = reader.read_exact(&mut payload) {
                shared.done(cost);
                debug!(peer, error = %e, "nbd: connection ended inside a write payload");
                return if is_disconnect(&e) { Ok(()) } else { Err(e) };
            }
        }
        shared.activity.receiving(false);
        let job = Job {
            req,
            payload,
            start,
            cost,
        };
        if let Err(unsent) = tx.send(job) {
            shared.done(unsent.0.cost);
            return Ok(());
        }
    }
}

fn worker<C: Conn>(shared: &Shared<'_, C>, rx: &Mutex<Receiver<Job>>) {
    loop {
        let job = {
            let rx = rx.lock().unwrap_or_else(PoisonError::into_inner);
            rx.recv()
        };
        let Ok(job) = job else { return };
        let cost = job.cost;
        execute(shared, job);
        shared.done(cost);
    }
}

/// Runs one accepted request and sends its reply.
fn execute<C: Conn>(shared: &Shared<'_, C>, job: Job) {
    let Job {
        req,
        payload,
        start,
        ..
    } = job;
    let result = match req.kind {
        CMD_READ => return read(shared, &req, start),
        CMD_BLOCK_STATUS => return block_status(shared, &req, start),
        _ => run(&shared.dev, &req, &payload),
    };
    let ok = result.is_ok();
    match result {
        Ok(()) => shared.send(&simple_reply(0, req.handle)),
        Err((error, message)) => {
            warn!(peer = %shared.peer, kind = req.kind, offset = req.offset, length = req.length, error, %message, "nbd: request failed");
            shared.send_error(req.handle, error, &message);
        }
    }
    shared.record(req.kind, u64::from(req.length), start, ok);
}

/// Commands without reply data.
fn run(dev: &Zram, req: &Request, payload: &[u8]) -> Result<(), (u32, String)> {
    let fail = |e: zram::Error| (errno(&e), e.to_string());
    match req.kind {
        CMD_WRITE => dev.write(req.offset, payload).map_err(fail)?,
        CMD_TRIM => dev
            .discard(req.offset, u64::from(req.length))
            .map_err(fail)?,
        CMD_WRITE_ZEROES if req.flags & CMD_FLAG_NO_HOLE != 0 => {
            // Written as zero pages (same-filled, no object): allocated, reads as zeroes.
            let mut done = 0u64;
            let len = u64::from(req.length);
            while done < len {
                let n = (len - done).min(ZEROES.len() as u64) as usize;
                dev.write(req.offset + done, &ZEROES[..n]).map_err(fail)?;
                done += n as u64;
            }
        }
        // Freeing pages is always faster than writing: FAST_ZERO never fails.
        CMD_WRITE_ZEROES => dev
            .write_zeroes(req.offset, u64::from(req.length))
            .map_err(fail)?,
        // Everything is in memory: there is nothing to prefetch.
        CMD_CACHE => {}
        CMD_FLUSH => {}
        _ => return Err((EINVAL, "unknown command".to_owned())),
    }
    if req.flags & CMD_FLAG_FUA != 0 || req.kind == CMD_FLUSH {
        dev.flush().map_err(fail)?;
    }
    Ok(())
}

fn read<C: Conn>(shared: &Shared<'_, C>, req: &Request, start: Instant) {
    let len = req.length as usize;
    let structured = shared.limits.structured;
    if structured && len == 0 {
        shared.send(&none_chunk(req.handle));
        shared.record(req.kind, 0, start, true);
        return;
    }
    // The reply header goes in front of the data so the reply is written in one call.
    let head = if structured {
        STRUCTURED_HEADER_LEN + 8
    } else {
        SIMPLE_REPLY_LEN
    };
    let mut buf = vec![0u8; head + len];
    match shared.dev.read(req.offset, &mut buf[head..]) {
        Ok(()) => {
            if structured {
                // len <= the maximum block size (at most 1 GiB): the chunk length fits.
                let chunk = u32::try_from(8 + len).unwrap_or(u32::MAX);
                let h =
                    structured_header(REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, req.handle, chunk);
                buf[..STRUCTURED_HEADER_LEN].copy_from_slice(&h);
                buf[STRUCTURED_HEADER_LEN..head].copy_from_slice(&req.offset.to_be_bytes());
            } else {
                buf[..head].copy_from_slice(&simple_reply(0, req.handle));
            }
            shared.send(&buf);
            shared.record(req.kind, len as u64, start, true);
        }
        Err(e) => {
            warn!(peer = %shared.peer, offset = req.offset, length = req.length, error = %e, "nbd: read failed");
            drop(buf);
            shared.send_error(req.handle, errno(&e), &e.to_string());
            shared.record(req.kind, len as u64, start, false);
        }
    }
}

/// The `base:allocation` status of one page (its unit's, when units are larger).
fn page_status(dev: &Zram, page: u64) -> u32 {
    match page
        .checked_mul(PAGE)
        .and_then(|offset| dev.block_state(offset))
    {
        Some(BlockState::Data) => 0,
        Some(BlockState::Zero) => STATE_ZERO,
        Some(BlockState::Hole) | None => STATE_HOLE | STATE_ZERO,
    }
}

fn block_status<C: Conn>(shared: &Shared<'_, C>, req: &Request, start: Instant) {
    let req_one = req.flags & CMD_FLAG_REQ_ONE != 0;
    let extents = block_status_extents(req.offset, req.length, PAGE, MAX_EXTENTS, req_one, |p| {
        page_status(&shared.dev, p)
    });
    shared.send(&block_status_chunk(
        req.handle,
        BASE_ALLOCATION_ID,
        &extents,
    ));
    shared.record(req.kind, u64::from(req.length), start, true);
}
