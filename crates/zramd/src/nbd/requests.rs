//! What the reader and the workers of one connection share, and how a request without
//! payload is run and answered: the writer lock every reply is sent under, the byte
//! budgets, the spare buffers, the statistics; reads (the reply's header and data written in
//! one call), block status, and the commands without reply data.

use std::io;
use std::net::Shutdown;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tracing::{debug, warn};

use super::budget::Budget;
use super::pool::BufPool;
use super::proto::*;
use super::rules::{Limits, block_status_extents};
use crate::device::Opened;
use crate::export::{Export, Op};
use crate::stream::Conn;
use crate::table::Activity;
use zram::{BlockState, Zram};

/// Room for the longest read reply header (structured: chunk header and offset).
pub(super) const REPLY_HEAD: usize = STRUCTURED_HEADER_LEN + 8;
/// Most block status descriptors in one reply (the protocol lets a reply cover less).
pub const MAX_EXTENTS: usize = 32 * 1024;
/// Granularity of block status: the device's page.
const PAGE: u64 = zram::PAGE_SIZE as u64;
/// Zeroes written for `WRITE_ZEROES` with `NO_HOLE`.
static ZEROES: [u8; 64 * 1024] = [0; 64 * 1024];

/// What the reader and the workers of one connection share.
pub(super) struct Shared<'a, C> {
    pub(super) writer: Mutex<C>,
    pub(super) export: Arc<Export>,
    pub(super) dev: Opened,
    pub(super) limits: Limits,
    pub(super) peer: &'a str,
    /// This connection's requests in flight.
    pub(super) budget: Budget,
    /// All connections' requests in flight.
    pub(super) total: &'a Budget,
    pub(super) activity: &'a Activity,
    /// A reply could not be sent: the connection is dead.
    pub(super) broken: AtomicBool,
    /// Spare buffers for write pieces and read replies.
    pub(super) pool: &'a BufPool,
}

impl<C: Conn> Shared<'_, C> {
    /// Takes a request's bytes from both budgets, the connection's first.
    pub(super) fn take(&self, cost: u64) {
        self.budget.take(cost);
        self.total.take(cost);
    }

    /// A request is done with its bytes and answered (or dropped).
    pub(super) fn done(&self, cost: u64) {
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
    pub(super) fn send_error(&self, handle: u64, error: u32, message: &str) {
        if self.limits.structured {
            self.send(&error_chunk(handle, error, message));
        } else {
            self.send(&simple_reply(error, handle));
        }
    }

    pub(super) fn record(&self, kind: u16, bytes: u64, start: Instant, ok: bool) {
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

/// A device error as the protocol's error and a message.
pub(super) fn fail(e: zram::Error) -> (u32, String) {
    (errno(&e), e.to_string())
}

/// Sends the reply of a request without reply data, and records it.
pub(super) fn answer<C: Conn>(
    shared: &Shared<'_, C>,
    req: &Request,
    start: Instant,
    result: Result<(), (u32, String)>,
) {
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

/// Runs one accepted request without payload and sends its reply.
pub(super) fn execute<C: Conn>(shared: &Shared<'_, C>, req: &Request, start: Instant) {
    match req.kind {
        CMD_READ => read(shared, req, start),
        CMD_BLOCK_STATUS => block_status(shared, req, start),
        _ => answer(shared, req, start, run(&shared.dev, req)),
    }
}

/// Commands without payload nor reply data.
fn run(dev: &Zram, req: &Request) -> Result<(), (u32, String)> {
    match req.kind {
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
    // A spare buffer when the reply fits in one; its first `head + len` bytes are all
    // written below before any is sent.
    let mut buf = if head + len <= shared.pool.size() {
        shared.pool.get()
    } else {
        vec![0u8; head + len].into_boxed_slice()
    };
    let reply = &mut buf[..head + len];
    match shared.dev.read(req.offset, &mut reply[head..]) {
        Ok(()) => {
            if structured {
                // len <= the maximum block size (at most 1 GiB): the chunk length fits.
                let chunk = u32::try_from(8 + len).unwrap_or(u32::MAX);
                let h =
                    structured_header(REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, req.handle, chunk);
                reply[..STRUCTURED_HEADER_LEN].copy_from_slice(&h);
                reply[STRUCTURED_HEADER_LEN..head].copy_from_slice(&req.offset.to_be_bytes());
            } else {
                reply[..head].copy_from_slice(&simple_reply(0, req.handle));
            }
            shared.send(reply);
            shared.pool.put(buf);
            shared.record(req.kind, len as u64, start, true);
        }
        Err(e) => {
            warn!(peer = %shared.peer, offset = req.offset, length = req.length, error = %e, "nbd: read failed");
            shared.pool.put(buf);
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
