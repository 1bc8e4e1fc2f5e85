//! NBD transmission over raw sockets: every command, simple and structured replies, block
//! status, and every kind of bad request (each answered with the protocol's error or a
//! clean disconnect, then a second client is checked to be served).

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    #[expect(
        dead_code,
        reason = "the transmission tests run no real client (`uri`, `qemu_target`)"
    )]
    pub mod nbd;
}

use std::collections::HashMap;
use std::sync::Arc;

use common::nbd::*;
use zramd::export::{Export, Op};
use zramd::human::Timeout;
use zramd::nbd::ServerConfig;
use zramd::nbd::proto::*;

const SIZE: u64 = 8 << 20;

fn pattern(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn write(c: &mut Client, handle: u64, offset: u64, data: &[u8]) -> u32 {
    c.request(CMD_WRITE, 0, handle, offset, data.len() as u32);
    c.send(data);
    c.simple_reply(handle)
}

fn read_simple(c: &mut Client, handle: u64, offset: u64, len: u32) -> Vec<u8> {
    c.request(CMD_READ, 0, handle, offset, len);
    assert_eq!(c.simple_reply(handle), 0);
    c.recv(len as usize)
}

fn read_structured(c: &mut Client, handle: u64, offset: u64, len: u32) -> Vec<u8> {
    c.request(CMD_READ, 0, handle, offset, len);
    let (chunk, payload) = c.chunk();
    assert_eq!(chunk.handle, handle);
    assert_eq!(chunk.reply_type, REPLY_TYPE_OFFSET_DATA);
    assert_ne!(chunk.flags & REPLY_FLAG_DONE, 0);
    assert_eq!(
        u64::from_be_bytes(payload[0..8].try_into().unwrap()),
        offset
    );
    payload[8..].to_vec()
}

fn block_status(c: &mut Client, handle: u64, flags: u16, offset: u64, len: u32) -> Vec<(u32, u32)> {
    c.request(CMD_BLOCK_STATUS, flags, handle, offset, len);
    let (chunk, p) = c.chunk();
    assert_eq!(
        (chunk.handle, chunk.reply_type),
        (handle, REPLY_TYPE_BLOCK_STATUS)
    );
    assert_ne!(chunk.flags & REPLY_FLAG_DONE, 0);
    assert_eq!(
        u32::from_be_bytes(p[0..4].try_into().unwrap()),
        BASE_ALLOCATION_ID
    );
    p[4..]
        .chunks_exact(8)
        .map(|d| {
            (
                u32::from_be_bytes(d[0..4].try_into().unwrap()),
                u32::from_be_bytes(d[4..8].try_into().unwrap()),
            )
        })
        .collect()
}

#[test]
fn simple_replies_serve_every_command() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    let (size, _) = c.go("zram0", false);
    assert_eq!(size, SIZE);
    // Aligned, unaligned and page-straddling writes read back.
    for (i, (off, len)) in [
        (0u64, 4096usize),
        (5000, 10_000),
        (SIZE - 3, 3),
        (1 << 20, 65536),
    ]
    .into_iter()
    .enumerate()
    {
        let data = pattern(len, i as u32);
        assert_eq!(write(&mut c, 10 + i as u64, off, &data), 0);
        assert_eq!(read_simple(&mut c, 20 + i as u64, off, len as u32), data);
    }
    // FUA write, flush, cache.
    c.request(CMD_WRITE, CMD_FLAG_FUA, 30, 8192, 4);
    c.send(b"abcd");
    assert_eq!(c.simple_reply(30), 0);
    c.request(CMD_FLUSH, 0, 31, 0, 0);
    assert_eq!(c.simple_reply(31), 0);
    c.request(CMD_CACHE, 0, 32, 0, 65536);
    assert_eq!(c.simple_reply(32), 0);
    // Trim and write-zeroes make the range read back as zeroes.
    c.request(CMD_TRIM, 0, 33, 1 << 20, 65536);
    assert_eq!(c.simple_reply(33), 0);
    assert_eq!(read_simple(&mut c, 34, 1 << 20, 65536), vec![0u8; 65536]);
    assert_eq!(write(&mut c, 35, 0, &pattern(4096, 9)), 0);
    c.request(CMD_WRITE_ZEROES, 0, 36, 100, 3000);
    assert_eq!(c.simple_reply(36), 0);
    let back = read_simple(&mut c, 37, 0, 4096);
    let mut want = pattern(4096, 9);
    want[100..3100].fill(0);
    assert_eq!(back, want);
    // Zero-length requests are harmless.
    c.request(CMD_READ, 0, 38, 0, 0);
    assert_eq!(c.simple_reply(38), 0);
    assert_eq!(write(&mut c, 39, 0, &[]), 0);
    c.request(CMD_DISC, 0, 40, 0, 0);
    c.expect_eof();

    let stats = &server.export("zram0").stats;
    let count = |op| {
        stats
            .op(op)
            .count
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    assert!(count(Op::Read) >= 7);
    assert!(count(Op::Write) >= 6);
    assert!(count(Op::Trim) >= 1);
    assert!(count(Op::WriteZeroes) >= 1);
    assert!(count(Op::Flush) >= 1);
    assert!(count(Op::Other) >= 2, "cache and disc");
    server.assert_serving();
}

#[test]
fn structured_replies_and_error_chunks() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    c.go("zram0", true);
    let data = pattern(12_345, 1);
    assert_eq!(write(&mut c, 1, 777, &data), 0);
    assert_eq!(read_structured(&mut c, 2, 777, data.len() as u32), data);
    // A zero-length read: a lone final NONE chunk.
    c.request(CMD_READ, CMD_FLAG_DF, 3, 0, 0);
    let (chunk, p) = c.chunk();
    assert_eq!(
        (chunk.handle, chunk.reply_type, chunk.flags),
        (3, REPLY_TYPE_NONE, REPLY_FLAG_DONE)
    );
    assert!(p.is_empty());
    // Errors come as error chunks, for reads and for everything else.
    c.request(CMD_READ, 0, 4, SIZE, 1);
    assert_eq!(c.error_chunk(4), EINVAL);
    c.request(CMD_READ, CMD_FLAG_DF, 5, 0, 2 << 20);
    assert_eq!(c.error_chunk(5), EINVAL);
    c.request(CMD_WRITE, 0, 6, SIZE - 1, 2);
    c.send(b"xy");
    assert_eq!(c.error_chunk(6), ENOSPC);
    c.request(CMD_TRIM, 0, 7, SIZE, 4096);
    assert_eq!(c.error_chunk(7), EINVAL);
    // Successes without data may be simple replies.
    c.request(CMD_FLUSH, 0, 8, 0, 0);
    assert_eq!(c.any_reply().err(), Some((0, 8)));
    c.request(CMD_DISC, 0, 9, 0, 0);
    c.expect_eof();
    server.assert_serving();
}

#[test]
fn out_of_range_requests() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    c.request(CMD_READ, 0, 1, SIZE - 4095, 4096);
    assert_eq!(c.simple_reply(1), EINVAL);
    c.request(CMD_READ, 0, 2, u64::MAX, 2);
    assert_eq!(c.simple_reply(2), EINVAL);
    // The write's payload is consumed: the stream stays in step.
    assert_eq!(write(&mut c, 3, SIZE, &pattern(4096, 3)), ENOSPC);
    assert_eq!(write(&mut c, 4, u64::MAX - 10, &pattern(100, 4)), ENOSPC);
    c.request(CMD_TRIM, 0, 5, SIZE - 4096, 8192);
    assert_eq!(c.simple_reply(5), EINVAL);
    c.request(CMD_WRITE_ZEROES, 0, 6, SIZE, 1);
    assert_eq!(c.simple_reply(6), ENOSPC);
    c.request(CMD_CACHE, 0, 7, SIZE, 1);
    assert_eq!(c.simple_reply(7), EINVAL);
    // Still in step: a good read right after.
    assert_eq!(read_simple(&mut c, 8, SIZE - 10, 10), vec![0u8; 10]);
    drop(c);
    server.assert_serving();
}

#[test]
fn oversized_requests() {
    let server = Server::start(SIZE, test_config()); // max_request_bytes = 1 MiB
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    c.request(CMD_READ, 0, 1, 0, (1 << 20) + 1);
    assert_eq!(c.simple_reply(1), EINVAL);
    // An oversized write whose payload can be skipped: refused, the connection goes on.
    assert_eq!(write(&mut c, 2, 0, &pattern(2 << 20, 2)), EINVAL);
    assert_eq!(
        read_simple(&mut c, 3, 0, 4096),
        vec![0u8; 4096],
        "nothing was written"
    );
    // Write-zeroes is bounded by the maximum too, unless FAST_ZERO (no payload either way).
    c.request(CMD_WRITE_ZEROES, 0, 4, 0, 2 << 20);
    assert_eq!(c.simple_reply(4), EINVAL);
    c.request(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 5, 0, 2 << 20);
    assert_eq!(c.simple_reply(5), 0);
    // Trim and block status have no such bound.
    c.request(CMD_TRIM, 0, 6, 0, SIZE as u32);
    assert_eq!(c.simple_reply(6), 0);
    // A write payload too large to skip (over 32 MiB): refused, then the server hangs up
    // rather than read it.
    c.request(CMD_WRITE, 0, 7, 0, 64 << 20);
    assert_eq!(c.simple_reply(7), EINVAL);
    c.expect_eof();
    server.assert_serving();
}

#[test]
fn read_only_export_refuses_writes() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    let (_, flags) = c.go("ro", true);
    assert_ne!(flags & FLAG_READ_ONLY, 0);
    c.request(CMD_WRITE, 0, 1, 0, 4096);
    c.send(&pattern(4096, 1));
    assert_eq!(c.error_chunk(1), EPERM);
    c.request(CMD_TRIM, 0, 2, 0, 4096);
    assert_eq!(c.error_chunk(2), EPERM);
    c.request(CMD_WRITE_ZEROES, 0, 3, 0, 4096);
    assert_eq!(c.error_chunk(3), EPERM);
    assert_eq!(read_structured(&mut c, 4, 0, 4096), vec![0u8; 4096]);
    drop(c);
    server.assert_serving();
}

#[test]
fn unknown_commands_and_flags_are_invalid() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    c.request(42, 0, 1, 0, 0);
    assert_eq!(c.simple_reply(1), EINVAL);
    c.request(CMD_RESIZE_FOR_TEST, 0, 2, 0, 0);
    assert_eq!(c.simple_reply(2), EINVAL);
    c.request(CMD_READ, CMD_FLAG_NO_HOLE, 3, 0, 512);
    assert_eq!(c.simple_reply(3), EINVAL);
    // DF without structured replies.
    c.request(CMD_READ, CMD_FLAG_DF, 4, 0, 512);
    assert_eq!(c.simple_reply(4), EINVAL);
    c.request(CMD_FLUSH, 1 << 9, 5, 0, 0);
    assert_eq!(c.simple_reply(5), EINVAL);
    // Block status without negotiating it.
    c.request(CMD_BLOCK_STATUS, 0, 6, 0, 4096);
    assert_eq!(c.simple_reply(6), EINVAL);
    // A write with bad flags still has its payload skipped.
    c.request(CMD_WRITE, CMD_FLAG_REQ_ONE, 7, 0, 3);
    c.send(b"abc");
    assert_eq!(c.simple_reply(7), EINVAL);
    assert_eq!(read_simple(&mut c, 8, 0, 3), vec![0u8; 3]);
    drop(c);
    server.assert_serving();
}

const CMD_RESIZE_FOR_TEST: u16 = 8;

#[test]
fn bad_request_magic_disconnects() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    c.go("zram0", true);
    let mut bad = Request {
        flags: 0,
        kind: CMD_READ,
        handle: 1,
        offset: 0,
        length: 512,
    }
    .encode();
    bad[0..4].copy_from_slice(&0x1256_0953u32.to_be_bytes());
    c.send(&bad);
    c.expect_eof();
    server.assert_serving();
}

#[test]
fn clients_vanishing_mid_request() {
    let server = Server::start(SIZE, test_config());
    // Half a request header.
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    c.send(&REQUEST_MAGIC.to_be_bytes());
    drop(c);
    // A write header and half its payload.
    let mut c = server.connect();
    c.greet();
    c.go("zram0", true);
    c.request(CMD_WRITE, 0, 1, 0, 65536);
    c.send(&pattern(30_000, 1));
    drop(c);
    // Many large reads, then gone without reading a byte of the replies.
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    for h in 0..40 {
        c.request(CMD_READ, 0, h, 0, 1 << 20);
    }
    drop(c);
    // Requests then end of input: the outstanding ones are still answered.
    let mut c = server.connect();
    c.greet();
    c.go("zram0", true);
    for h in 0..8 {
        c.request(CMD_READ, 0, h, h * 4096, 4096);
    }
    c.s.shutdown_write().unwrap();
    let mut seen: Vec<u64> = (0..8).map(|_| c.chunk().0.handle).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..8).collect::<Vec<_>>());
    c.expect_eof();
    server.assert_serving();
    // The write that lost its payload wrote nothing.
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    assert_eq!(read_simple(&mut c, 1, 0, 4096), vec![0u8; 4096]);
}

#[test]
fn block_status_reports_holes_zeroes_and_data() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    c.go("zram0", true);
    const HZ: u32 = STATE_HOLE | STATE_ZERO;
    // Pages: 0 trimmed after a write, 1 data, 2 written with zeroes, 3..: never written.
    assert_eq!(write(&mut c, 1, 0, &pattern(3 * 4096, 1)), 0);
    assert_eq!(write(&mut c, 2, 8192, &[0u8; 4096]), 0);
    c.request(CMD_TRIM, 0, 3, 0, 4096);
    assert_eq!(c.simple_reply(3), 0);
    let e = block_status(&mut c, 4, 0, 0, 64 * 1024);
    assert_eq!(
        e,
        vec![(4096, HZ), (4096, 0), (4096, STATE_ZERO), (13 * 4096, HZ)]
    );
    // REQ_ONE: one extent, no longer than asked.
    let e = block_status(&mut c, 5, CMD_FLAG_REQ_ONE, 0, 2048);
    assert_eq!(e, vec![(2048, HZ)]);
    let e = block_status(&mut c, 6, CMD_FLAG_REQ_ONE, 4096, 64 * 1024);
    assert_eq!(e, vec![(4096, 0)]);
    // Unaligned start and end.
    let e = block_status(&mut c, 7, 0, 6144, 10_000);
    assert_eq!(e, vec![(2048, 0), (4096, STATE_ZERO), (3856, HZ)]);
    // Write-zeroes punches holes unless NO_HOLE; FAST_ZERO always succeeds here.
    assert_eq!(write(&mut c, 8, 5 * 4096, &pattern(2 * 4096, 8)), 0);
    c.request(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 9, 5 * 4096, 4096);
    assert_eq!(c.simple_reply(9), 0);
    c.request(
        CMD_WRITE_ZEROES,
        CMD_FLAG_FAST_ZERO | CMD_FLAG_FUA,
        10,
        6 * 4096,
        4096,
    );
    assert_eq!(c.simple_reply(10), 0);
    let e = block_status(&mut c, 11, 0, 4 * 4096, 4 * 4096);
    assert_eq!(e, vec![(4096, HZ), (4096, STATE_ZERO), (2 * 4096, HZ)]);
    assert_eq!(read_structured(&mut c, 12, 5 * 4096, 8192), vec![0u8; 8192]);
    // The whole device in one request.
    let e = block_status(&mut c, 13, 0, 0, SIZE as u32);
    let total: u64 = e.iter().map(|x| u64::from(x.0)).sum();
    assert_eq!(total, SIZE);
    // Beyond the end, or empty: EINVAL.
    c.request(CMD_BLOCK_STATUS, 0, 14, SIZE - 4096, 8192);
    assert_eq!(c.error_chunk(14), EINVAL);
    c.request(CMD_BLOCK_STATUS, 0, 15, 0, 0);
    assert_eq!(c.error_chunk(15), EINVAL);
    drop(c);
    server.assert_serving();
}

#[test]
fn pipelined_requests_on_one_connection() {
    for tcp in [false, true] {
        let server = if tcp {
            Server::start_tcp(SIZE, test_config())
        } else {
            Server::start(SIZE, test_config())
        };
        let mut c = server.connect();
        c.greet();
        c.go("zram0", true);
        const N: u64 = 64;
        let mut wire = Vec::new();
        for h in 0..N {
            let r = Request {
                flags: 0,
                kind: CMD_WRITE,
                handle: h,
                offset: h * 8192,
                length: 8192,
            };
            wire.extend_from_slice(&r.encode());
            wire.extend_from_slice(&pattern(8192, h as u32));
        }
        c.send(&wire);
        let mut handles: Vec<u64> = (0..N)
            .map(|_| {
                let (err, h) = c.any_reply().expect_err("simple reply");
                assert_eq!(err, 0);
                h
            })
            .collect();
        handles.sort_unstable();
        assert_eq!(handles, (0..N).collect::<Vec<_>>());
        for h in 0..N {
            c.request(CMD_READ, 0, 1000 + h, h * 8192, 8192);
        }
        let mut got = HashMap::new();
        for _ in 0..N {
            let (chunk, p) = c.chunk();
            got.insert(chunk.handle - 1000, p[8..].to_vec());
        }
        for h in 0..N {
            assert_eq!(got[&h], pattern(8192, h as u32), "handle {h}");
        }
        c.request(CMD_DISC, 0, 0, 0, 0);
        c.expect_eof();
        server.stop();
    }
}

#[test]
fn many_clients_at_once() {
    let server = Server::start_tcp(SIZE, ServerConfig::default());
    std::thread::scope(|s| {
        for t in 0..8u32 {
            let server = &server;
            s.spawn(move || {
                let mut c = server.connect();
                c.greet();
                c.go("zram0", t % 2 == 0);
                let base = u64::from(t) << 20;
                for i in 0..16u32 {
                    let data = pattern(65536, t * 100 + i);
                    let off = base + u64::from(i) * 65536;
                    assert_eq!(write(&mut c, u64::from(i), off, &data), 0);
                }
                for i in 0..16u32 {
                    let off = base + u64::from(i) * 65536;
                    let back = if t % 2 == 0 {
                        read_structured(&mut c, 100 + u64::from(i), off, 65536)
                    } else {
                        read_simple(&mut c, 100 + u64::from(i), off, 65536)
                    };
                    assert_eq!(back, pattern(65536, t * 100 + i));
                }
                c.request(CMD_DISC, 0, 0, 0, 0);
                c.expect_eof();
            });
        }
    });
    server.stop();
}

#[test]
fn memory_limit_gives_enospc() {
    let dev = Arc::new(
        zramd::device::Device::with_size(
            "zram0",
            zram::ZramConfig {
                mem_limit: zram::Size(64 * 1024),
                ..Default::default()
            },
            SIZE,
        )
        .expect("device"),
    );
    let exports = vec![Arc::new(Export::new("zram0", dev, false))];
    let server = Server::with_exports(exports, test_config(), false);
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    // Incompressible data well past the limit: a large write (handed to the workers) and a
    // small one (stored by the connection's reader itself).
    assert_eq!(write(&mut c, 1, 0, &pattern(1 << 20, 1)), ENOSPC);
    assert_eq!(write(&mut c, 3, 3 << 20, &pattern(4096, 2)), ENOSPC);
    // Zero pages cost no memory and still succeed.
    assert_eq!(write(&mut c, 2, 2 << 20, &[0u8; 8192]), 0);
    drop(c);
    // Another client is served (reads; the device is full for new data).
    let mut c = server.connect();
    c.greet();
    c.go("zram0", true);
    assert_eq!(read_structured(&mut c, 1, 2 << 20, 8192), vec![0u8; 8192]);
}

const MIB: u32 = 1 << 20;

/// A session in transmission (simple replies).
fn session(server: &Server) -> Client {
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    c
}

/// Settings for the stalled-transfer tests: a short I/O timeout, no idle timeout.
fn stall_config() -> ServerConfig {
    ServerConfig {
        io_timeout: Timeout::millis(500),
        idle_timeout: Timeout::secs(0),
        ..test_config()
    }
}

#[test]
fn unread_replies_time_out_and_free_their_memory() {
    let server = Server::start(SIZE, stall_config());
    // Large reads whose replies are never read: the reply being written stalls.
    let mut greedy = session(&server);
    for h in 0..8 {
        greedy.request(CMD_READ, 0, h, 0, MIB);
    }
    let s = server.wait_for("the stalled reply cut off and its memory freed", |s| {
        s.stalled == 1 && s.in_flight_bytes == 0 && s.serving == 0
    });
    assert_eq!(s.waiting_requests, 0);
    greedy.expect_eof();
    server.assert_serving();
}

#[test]
fn stalled_requests_time_out_and_free_their_memory() {
    let server = Server::start(SIZE, stall_config());
    // A write payload one byte short.
    let mut short = session(&server);
    short.request(CMD_WRITE, 0, 1, 0, MIB);
    short.send(&pattern(MIB as usize - 1, 1));
    // Half a request header.
    let mut half = session(&server);
    half.send(&REQUEST_MAGIC.to_be_bytes());
    server.wait_for("both stalled requests cut off", |s| {
        s.stalled == 2 && s.in_flight_bytes == 0 && s.serving == 0
    });
    short.expect_eof();
    half.expect_eof();
    // The write that never arrived whole wrote nothing.
    let mut c = session(&server);
    assert_eq!(read_simple(&mut c, 1, 0, 4096), vec![0u8; 4096]);
}

#[test]
fn total_budget_bounds_buffers_over_all_connections() {
    let config = ServerConfig {
        max_in_flight: zram::Size(2 * u64::from(MIB)),
        io_timeout: Timeout::secs(60),
        ..test_config()
    };
    let server = Server::start(SIZE, config);
    // Three connections each ask for 1 MiB and read nothing yet: two fit, one waits.
    let mut clients: Vec<Client> = (0..3u64)
        .map(|h| {
            let mut c = session(&server);
            c.request(CMD_READ, 0, h, 0, MIB);
            c
        })
        .collect();
    let s = server.wait_for("two replies under way and one request waiting", |s| {
        s.waiting_requests == 1
    });
    assert_eq!(s.in_flight_bytes, 2 * u64::from(MIB), "{s:?}");
    // As each takes its reply, the budget goes to the next; every reply arrives.
    for (h, c) in clients.iter_mut().enumerate() {
        assert_eq!(c.simple_reply(h as u64), 0);
        assert_eq!(c.recv(MIB as usize), vec![0u8; MIB as usize]);
        assert!(server.stats().in_flight_bytes <= 2 * u64::from(MIB));
    }
    server.wait_for("every byte given back", |s| {
        s.in_flight_bytes == 0 && s.waiting_requests == 0
    });
    server.assert_serving();
}
