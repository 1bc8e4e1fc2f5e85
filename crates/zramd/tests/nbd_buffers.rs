//! The NBD data path's buffers: write payloads go to the workers in pieces and replies come
//! from buffers the server reuses across requests and connections, so these tests check
//! that nothing of an earlier request leaks into a later one, of the same client or the
//! next (a short read after a long one, a short write after a long one), that writes
//! larger than a piece arrive whole wherever they start, that many writes in flight are all
//! answered, that a failing piece answers its write once with an error, and that a client
//! leaving inside a payload gives every byte of the budget back.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    #[expect(
        dead_code,
        reason = "these tests use the raw client's requests, not the handshake checks nor real clients"
    )]
    pub mod nbd;
}

use std::sync::Arc;

use common::nbd::*;
use zramd::export::Export;
use zramd::nbd::proto::*;

const SIZE: u64 = 16 << 20;
/// Larger than a piece, so the server splits it.
const LONG: usize = 700 * 1024;

/// Bytes that differ from position to position and from seed to seed.
fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add((i >> 9) as u8) ^ seed)
        .collect()
}

/// Sends a write and returns its reply's error.
fn write(c: &mut Client, handle: u64, offset: u64, data: &[u8]) -> u32 {
    c.request(CMD_WRITE, 0, handle, offset, data.len() as u32);
    c.send(data);
    c.simple_reply(handle)
}

/// Reads `len` bytes, with a simple or a structured reply.
fn read(c: &mut Client, structured: bool, handle: u64, offset: u64, len: u32) -> Vec<u8> {
    c.request(CMD_READ, 0, handle, offset, len);
    if !structured {
        assert_eq!(c.simple_reply(handle), 0);
        return c.recv(len as usize);
    }
    let (chunk, payload) = c.chunk();
    assert_eq!(
        (chunk.handle, chunk.reply_type),
        (handle, REPLY_TYPE_OFFSET_DATA)
    );
    assert_eq!(
        payload.len(),
        8 + len as usize,
        "one chunk of exactly the data"
    );
    assert_eq!(u64::from_be_bytes(payload[..8].try_into().unwrap()), offset);
    payload[8..].to_vec()
}

/// A client in transmission on `zram0`.
fn session(server: &Server, structured: bool) -> Client {
    let mut c = server.connect();
    c.greet();
    c.go("zram0", structured);
    c
}

#[test]
fn short_requests_after_long_ones_see_no_stale_bytes() {
    let server = Server::start(SIZE, test_config());
    // The second client gets the buffers the first one's long requests filled.
    for structured in [false, true] {
        let mut c = session(&server, structured);
        let long = vec![0xaa; 256 * 1024];
        assert_eq!(write(&mut c, 1, 0, &long), 0);
        assert_eq!(read(&mut c, structured, 2, 0, long.len() as u32), long);
        // A short read of a hole right after the long read: zeroes, and nothing more on
        // the wire (the next reply still parses).
        assert_eq!(read(&mut c, structured, 3, 4 << 20, 100), vec![0; 100]);
        assert_eq!(read(&mut c, structured, 4, 4 << 20, 4096), vec![0; 4096]);
        // A short write after the long one stores its own bytes only.
        assert_eq!(write(&mut c, 5, 1 << 20, &[0xbb; 4096]), 0);
        let back = read(&mut c, structured, 6, 1 << 20, 256 * 1024);
        assert_eq!(&back[..4096], &[0xbb; 4096][..]);
        assert!(
            back[4096..].iter().all(|&b| b == 0),
            "bytes of the earlier write after the short one"
        );
        // Unaligned short ones.
        assert_eq!(write(&mut c, 7, (2 << 20) + 5, b"xyz"), 0);
        assert_eq!(
            read(&mut c, structured, 8, 2 << 20, 10),
            b"\0\0\0\0\0xyz\0\0"
        );
        c.request(CMD_DISC, 0, 9, 0, 0);
        c.expect_eof();
    }
    server.assert_serving();
}

#[test]
fn writes_larger_than_a_piece_arrive_whole() {
    let server = Server::start(SIZE, test_config());
    let mut c = session(&server, true);
    // Aligned, unaligned, ending just past a piece, with FUA.
    for (i, offset) in [0u64, 3000, (256 << 10) - 1, 5 << 20]
        .into_iter()
        .enumerate()
    {
        let data = bytes(LONG, i as u8);
        let handle = 10 + i as u64;
        c.request(CMD_WRITE, CMD_FLAG_FUA, handle, offset, LONG as u32);
        c.send(&data);
        assert_eq!(c.simple_reply(handle), 0);
        assert_eq!(read(&mut c, true, 20 + i as u64, offset, LONG as u32), data);
    }
    // The largest request allowed, in one go.
    let max = test_config().effective_max_request() as usize;
    let data = bytes(max, 9);
    assert_eq!(write(&mut c, 30, 8 << 20, &data), 0);
    assert_eq!(read(&mut c, true, 31, 8 << 20, max as u32), data);
    c.request(CMD_DISC, 0, 32, 0, 0);
    c.expect_eof();
}

#[test]
fn many_writes_in_flight_are_all_answered() {
    let server = Server::start(SIZE, test_config());
    let mut c = session(&server, false);
    let n = 12u64;
    // Every write is sent before any reply is read (the replies are small enough to wait
    // in the socket).
    for h in 0..n {
        c.request(CMD_WRITE, 0, h, h * LONG as u64, LONG as u32);
        c.send(&bytes(LONG, h as u8));
    }
    let mut answered = vec![false; n as usize];
    for _ in 0..n {
        let (error, handle) = c.any_reply().expect_err("a simple reply");
        assert_eq!(error, 0);
        assert!(!answered[handle as usize], "write {handle} answered twice");
        answered[handle as usize] = true;
    }
    for h in 0..n {
        let back = read(&mut c, false, 100 + h, h * LONG as u64, LONG as u32);
        assert_eq!(back, bytes(LONG, h as u8), "write {h}");
    }
    // A worker gives a request's bytes back just after sending its reply, so the client
    // may read the last reply first: wait (bounded) for every byte to come back.
    server.wait_for("every request's bytes given back", |s| {
        s.in_flight_bytes == 0
    });
}

#[test]
fn a_failing_write_is_answered_once_with_its_error() {
    let device = device(SIZE);
    // Room for one page of compressed data.
    device.set_mem_limit(4096);
    let exports = vec![Arc::new(Export::new("zram0", device, false))];
    let server = Server::with_exports(exports, test_config(), false);
    let mut c = session(&server, true);
    // Compressible, but not into one page.
    let data = bytes(LONG, 3);
    c.request(CMD_WRITE, 0, 1, 0, LONG as u32);
    c.send(&data);
    assert_ne!(c.error_chunk(1), 0);
    // The connection is still in step: one reply per request.
    c.request(CMD_FLUSH, 0, 2, 0, 0);
    assert_eq!(c.any_reply().err(), Some((0, 2)));
    c.request(CMD_DISC, 0, 3, 0, 0);
    c.expect_eof();
    assert_eq!(server.stats().in_flight_bytes, 0);
}

#[test]
fn leaving_inside_a_long_payload_gives_the_budget_back() {
    let server = Server::start(SIZE, test_config());
    for sent in [0, 1000, 300 * 1024, LONG - 1] {
        let mut c = session(&server, false);
        c.request(CMD_WRITE, 0, 1, 0, LONG as u32);
        c.send(&bytes(sent, 1));
        drop(c);
        server.wait_for("free of the abandoned write", |s| {
            s.serving == 0 && s.in_flight_bytes == 0
        });
    }
    server.assert_serving();
}
