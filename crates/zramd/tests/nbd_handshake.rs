//! The NBD handshake over raw sockets: what a good client gets, and what every kind of bad
//! input gets (an option error or a clean disconnect), each time followed by a check that
//! a second client is still served.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    #[expect(
        dead_code,
        reason = "the handshake tests run no real client (`uri`, `qemu_target`) and read no export statistics or `any_reply`"
    )]
    pub mod nbd;
}

use std::time::Duration;

use common::nbd::*;
use zramd::human::Timeout;
use zramd::nbd::ServerConfig;
use zramd::nbd::proto::*;

const SIZE: u64 = 8 << 20;

fn infos(c: &mut Client, option: u32, name: &str, requests: &[u16]) -> Result<Vec<Vec<u8>>, u32> {
    c.option(option, &Client::info_data(name, requests));
    let mut out = Vec::new();
    loop {
        let r = c.opt_reply();
        assert_eq!(r.option, option);
        match r.reply_type {
            REP_INFO => out.push(r.data),
            REP_ACK => return Ok(out),
            e => return Err(e),
        }
    }
}

fn info_of(infos: &[Vec<u8>], kind: u16) -> Option<&[u8]> {
    infos
        .iter()
        .find(|d| u16::from_be_bytes([d[0], d[1]]) == kind)
        .map(|d| &d[2..])
}

#[test]
fn info_describes_the_export() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    let i = infos(
        &mut c,
        OPT_INFO,
        "zram0",
        &[INFO_NAME, INFO_DESCRIPTION, INFO_BLOCK_SIZE],
    )
    .expect("info");
    let export = info_of(&i, INFO_EXPORT).expect("NBD_INFO_EXPORT");
    assert_eq!(u64::from_be_bytes(export[0..8].try_into().unwrap()), SIZE);
    let flags = u16::from_be_bytes([export[8], export[9]]);
    for f in [
        FLAG_HAS_FLAGS,
        FLAG_SEND_FLUSH,
        FLAG_SEND_FUA,
        FLAG_SEND_TRIM,
        FLAG_SEND_WRITE_ZEROES,
        FLAG_SEND_CACHE,
        FLAG_SEND_FAST_ZERO,
        FLAG_CAN_MULTI_CONN,
    ] {
        assert_ne!(flags & f, 0, "flag {f:#x} missing from {flags:#x}");
    }
    assert_eq!(flags & FLAG_READ_ONLY, 0);
    assert_eq!(flags & FLAG_SEND_DF, 0, "DF needs structured replies");
    assert_eq!(info_of(&i, INFO_NAME), Some(&b"zram0"[..]));
    let desc = std::str::from_utf8(info_of(&i, INFO_DESCRIPTION).expect("description")).unwrap();
    assert!(desc.contains("zram0"), "{desc}");
    let bs = info_of(&i, INFO_BLOCK_SIZE).expect("block size");
    let word = |k: usize| u32::from_be_bytes(bs[4 * k..4 * k + 4].try_into().unwrap());
    assert_eq!((word(0), word(1), word(2)), (1, 4096, 1 << 20));

    // The empty name is the default (first) export; "ro" is read-only.
    let i = infos(&mut c, OPT_INFO, "", &[INFO_NAME]).expect("default export");
    assert_eq!(info_of(&i, INFO_NAME), Some(&b"zram0"[..]));
    let i = infos(&mut c, OPT_INFO, "ro", &[]).expect("ro");
    let flags = u16::from_be_bytes(info_of(&i, INFO_EXPORT).unwrap()[8..10].try_into().unwrap());
    assert_ne!(flags & FLAG_READ_ONLY, 0);
    assert_eq!(flags & FLAG_SEND_TRIM, 0);

    // Unknown export: an error, and the negotiation goes on.
    assert_eq!(infos(&mut c, OPT_GO, "nope", &[]), Err(REP_ERR_UNKNOWN));
    // Structured replies turn DF on.
    c.option(OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(c.opt_reply().reply_type, REP_ACK);
    let i = infos(&mut c, OPT_GO, "zram0", &[]).expect("go");
    let flags = u16::from_be_bytes(info_of(&i, INFO_EXPORT).unwrap()[8..10].try_into().unwrap());
    assert_ne!(flags & FLAG_SEND_DF, 0);
    c.request(CMD_READ, CMD_FLAG_DF, 9, 0, 512);
    let (chunk, data) = c.chunk();
    assert_eq!(
        (chunk.handle, chunk.reply_type),
        (9, REPLY_TYPE_OFFSET_DATA)
    );
    assert_eq!(data.len(), 8 + 512);
    drop(c);
    server.assert_serving();
}

#[test]
fn list_exports() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    let names = c.list();
    assert_eq!(names, ["zram0", "ro"]);
    c.option(OPT_LIST, b"junk");
    assert_eq!(c.opt_reply().reply_type, REP_ERR_INVALID);
    c.go("zram0", false);
    drop(c);
    server.assert_serving();
}

#[test]
fn export_name_with_and_without_zeroes() {
    let server = Server::start(SIZE, test_config());
    for (client_flags, tail) in [
        (FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES, 0),
        (FLAG_C_FIXED_NEWSTYLE, 124),
        (0, 124),
    ] {
        let mut c = server.connect();
        c.greet_with(client_flags);
        c.option(OPT_EXPORT_NAME, b"zram0");
        assert_eq!(c.u64(), SIZE);
        let flags = c.u16();
        assert_ne!(flags & FLAG_HAS_FLAGS, 0);
        if tail > 0 {
            assert_eq!(c.recv(tail), vec![0u8; tail]);
        }
        // Transmission follows at once; simple replies.
        c.request(CMD_READ, 0, 5, 4096, 16);
        assert_eq!(c.simple_reply(5), 0);
        assert_eq!(c.recv(16), vec![0u8; 16]);
        c.request(CMD_DISC, 0, 6, 0, 0);
        c.expect_eof();
    }
    server.assert_serving();
}

#[test]
fn export_name_of_unknown_export_disconnects() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    c.option(OPT_EXPORT_NAME, b"missing");
    c.expect_eof();
    let mut c = server.connect();
    c.greet();
    c.option(OPT_EXPORT_NAME, &[0xff, 0xfe, 0]);
    c.expect_eof();
    server.assert_serving();
}

#[test]
fn unknown_options_are_unsupported() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    for (opt, data) in [
        (4u32, &b""[..]),
        (OPT_STARTTLS, b""),
        (OPT_EXTENDED_HEADERS, b""),
        (0xdead_beef, b"some data the server must skip"),
        (0, b"x"),
    ] {
        c.option(opt, data);
        let r = c.opt_reply();
        assert_eq!((r.option, r.reply_type), (opt, REP_ERR_UNSUP));
    }
    c.go("zram0", true);
    drop(c);
    server.assert_serving();
}

#[test]
fn malformed_option_lengths_are_invalid() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    let good = Client::info_data("zram0", &[INFO_NAME]);
    let mut name_too_long = good.clone();
    name_too_long[0..4].copy_from_slice(&1000u32.to_be_bytes());
    let mut count_too_big = good.clone();
    count_too_big[9..11].copy_from_slice(&7u16.to_be_bytes());
    let mut trailing = good.clone();
    trailing.push(1);
    let cases: Vec<(u32, Vec<u8>)> = vec![
        (OPT_INFO, vec![]),
        (OPT_INFO, vec![0, 0]),
        (OPT_INFO, name_too_long.clone()),
        (OPT_GO, name_too_long),
        (OPT_GO, count_too_big),
        (OPT_GO, trailing),
        (OPT_STRUCTURED_REPLY, vec![1]),
        // Meta contexts before structured replies.
        (
            OPT_SET_META_CONTEXT,
            Client::meta_data("zram0", &[BASE_ALLOCATION]),
        ),
    ];
    for (opt, data) in cases {
        c.option(opt, &data);
        let r = c.opt_reply();
        assert_eq!(
            (r.option, r.reply_type),
            (opt, REP_ERR_INVALID),
            "option {opt} data {data:?}"
        );
    }
    c.option(OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(c.opt_reply().reply_type, REP_ACK);
    let mut lying = Client::meta_data("zram0", &[BASE_ALLOCATION]);
    lying[9..13].copy_from_slice(&u32::MAX.to_be_bytes());
    let mut count = Client::meta_data("zram0", &[BASE_ALLOCATION]);
    count[5..9].copy_from_slice(&1_000_000u32.to_be_bytes());
    for data in [
        lying,
        count,
        vec![0, 0, 0],
        Client::meta_data("zram0", &["no-colon"]),
    ] {
        for opt in [OPT_LIST_META_CONTEXT, OPT_SET_META_CONTEXT] {
            c.option(opt, &data);
            assert_eq!(c.opt_reply().reply_type, REP_ERR_INVALID);
        }
    }
    c.go("zram0", true);
    drop(c);
    server.assert_serving();
}

#[test]
fn oversized_option_data() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    // Over the 64 KiB cap but small enough to skip: refused, negotiation goes on.
    c.option(OPT_INFO, &vec![0u8; 100 * 1024]);
    assert_eq!(c.opt_reply().reply_type, REP_ERR_TOO_BIG);
    c.go("zram0", false);
    drop(c);
    // A huge length (data never sent): the server hangs up instead of reading or storing it.
    let mut c = server.connect();
    c.greet();
    let mut h = Vec::new();
    h.extend_from_slice(&IHAVEOPT.to_be_bytes());
    h.extend_from_slice(&OPT_GO.to_be_bytes());
    h.extend_from_slice(&u32::MAX.to_be_bytes());
    c.send(&h);
    c.expect_eof();
    // An oversized EXPORT_NAME cannot be refused: hang up.
    let mut c = server.connect();
    c.greet();
    c.option_cut_short(OPT_EXPORT_NAME, &vec![b'a'; 70 * 1024]);
    c.expect_eof();
    server.assert_serving();
}

#[test]
fn bad_magic_and_flags_disconnect() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    c.send(b"NOTMAGIC\0\0\0\x07\0\0\0\0");
    c.expect_eof();
    let mut c = server.connect();
    c.greet_with(1 << 7);
    c.expect_eof();
    // Garbage from the first byte.
    let mut c = server.connect();
    let _ = c.recv(18);
    c.send(&[0xff; 64]);
    c.expect_eof();
    server.assert_serving();
}

#[test]
fn silent_clients_time_out() {
    let config = ServerConfig {
        handshake_timeout: Timeout::millis(300),
        ..test_config()
    };
    let server = Server::start(SIZE, config);
    // Says nothing at all.
    let mut silent = server.connect();
    let _ = silent.recv(18);
    // Sends half an option header and stalls.
    let mut half = server.connect();
    half.greet();
    half.send(&IHAVEOPT.to_be_bytes());
    // Keeps negotiating but never enters transmission: the deadline covers the whole
    // handshake, not each read.
    let mut chatty = server.connect();
    chatty.greet();
    let start = std::time::Instant::now();
    let mut closed = false;
    let mut list = IHAVEOPT.to_be_bytes().to_vec();
    list.extend_from_slice(&OPT_LIST.to_be_bytes());
    list.extend_from_slice(&0u32.to_be_bytes());
    while start.elapsed() < Duration::from_secs(15) {
        if std::io::Write::write_all(&mut chatty.s, &list).is_err() {
            closed = true;
            break;
        }
        let mut b = [0u8; 1];
        match std::io::Read::read(&mut chatty.s, &mut b) {
            Ok(0) | Err(_) => {
                closed = true;
                break;
            }
            Ok(_) => {}
        }
        // Drain the rest of the replies.
        let mut sink = [0u8; 4096];
        chatty
            .s
            .set_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        while let Ok(n) = std::io::Read::read(&mut chatty.s, &mut sink) {
            if n == 0 {
                break;
            }
        }
        chatty.s.set_timeout(Some(Duration::from_secs(20))).unwrap();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        closed,
        "a client that never finishes the handshake was not closed"
    );
    silent.expect_eof();
    half.expect_eof();
    server.assert_serving();
}

#[test]
fn abort_is_acknowledged() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    c.option(OPT_ABORT, &[]);
    let r = c.opt_reply();
    assert_eq!((r.option, r.reply_type), (OPT_ABORT, REP_ACK));
    c.expect_eof();
    // A client that aborts and leaves without reading the reply.
    let mut c = server.connect();
    c.greet();
    c.option(OPT_ABORT, b"ignored");
    drop(c);
    server.assert_serving();
}

#[test]
fn meta_contexts() {
    let server = Server::start(SIZE, test_config());
    let mut c = server.connect();
    c.greet();
    c.option(OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(c.opt_reply().reply_type, REP_ACK);
    let contexts = |c: &mut Client, opt: u32, export: &str, queries: &[&str]| {
        c.option(opt, &Client::meta_data(export, queries));
        let mut out = Vec::new();
        loop {
            let r = c.opt_reply();
            match r.reply_type {
                REP_META_CONTEXT => {
                    let id = u32::from_be_bytes(r.data[0..4].try_into().unwrap());
                    out.push((id, String::from_utf8(r.data[4..].to_vec()).unwrap()));
                }
                REP_ACK => return Ok(out),
                e => return Err(e),
            }
        }
    };
    let base = |id| Ok(vec![(id, BASE_ALLOCATION.to_owned())]);
    assert_eq!(
        contexts(&mut c, OPT_LIST_META_CONTEXT, "zram0", &[]),
        base(0)
    );
    assert_eq!(
        contexts(&mut c, OPT_LIST_META_CONTEXT, "zram0", &["base:"]),
        base(0)
    );
    assert_eq!(
        contexts(
            &mut c,
            OPT_LIST_META_CONTEXT,
            "zram0",
            &["qemu:dirty-bitmap:a"]
        ),
        Ok(vec![])
    );
    assert_eq!(
        contexts(&mut c, OPT_LIST_META_CONTEXT, "nope", &[]),
        Err(REP_ERR_UNKNOWN)
    );
    assert_eq!(
        contexts(&mut c, OPT_SET_META_CONTEXT, "zram0", &["base:"]),
        Ok(vec![])
    );
    assert_eq!(
        contexts(
            &mut c,
            OPT_SET_META_CONTEXT,
            "zram0",
            &["base:nothing", "x-y:z"]
        ),
        Ok(vec![])
    );
    assert_eq!(
        contexts(
            &mut c,
            OPT_SET_META_CONTEXT,
            "zram0",
            &["qemu:allocation-depth", BASE_ALLOCATION]
        ),
        base(BASE_ALLOCATION_ID)
    );
    // Selected for "ro", then transmission on "zram0": block status is refused.
    assert_eq!(
        contexts(&mut c, OPT_SET_META_CONTEXT, "ro", &[BASE_ALLOCATION]),
        base(BASE_ALLOCATION_ID)
    );
    c.option(OPT_GO, &Client::info_data("zram0", &[]));
    while c.opt_reply().reply_type != REP_ACK {}
    c.request(CMD_BLOCK_STATUS, 0, 1, 0, 4096);
    assert_eq!(c.error_chunk(1), EINVAL);
    c.request(CMD_DISC, 0, 2, 0, 0);
    c.expect_eof();
    server.assert_serving();
}

/// A connection that read its greeting and says nothing more.
fn silent(server: &Server) -> Client {
    let mut c = server.connect();
    let _ = c.recv(18);
    c
}

/// A session in transmission with nothing in flight.
fn idle_session(server: &Server) -> Client {
    let mut c = server.connect();
    c.greet();
    c.go("zram0", false);
    c
}

/// The client is served: a read of the first page succeeds.
fn still_served(c: &mut Client, handle: u64) {
    c.request(CMD_READ, 0, handle, 0, 4096);
    assert_eq!(c.simple_reply(handle), 0);
    assert_eq!(c.recv(4096), vec![0u8; 4096]);
}

#[test]
fn silent_handshakes_make_way_for_newcomers() {
    // A long handshake timeout: only the negotiating cap keeps room.
    let config = ServerConfig {
        max_connections: 4,
        max_handshakes: 2,
        handshake_timeout: Timeout::secs(60),
        ..test_config()
    };
    let server = Server::start(SIZE, config);
    let mut quiet: Vec<Client> = (0..8).map(|_| silent(&server)).collect();
    // Each new one beyond two took the place of the oldest still negotiating.
    server.assert_serving();
    for c in &mut quiet[..7] {
        c.expect_eof();
    }
    let s = server.stats();
    assert_eq!(s.evicted, 7, "{s:?}");
    assert_eq!(s.refused, 0, "{s:?}");
}

#[test]
fn idle_sessions_make_way_for_newcomers() {
    let config = ServerConfig {
        max_connections: 3,
        idle_timeout: Timeout::secs(0),
        ..test_config()
    };
    let server = Server::start(SIZE, config);
    let mut first = idle_session(&server);
    let mut second = idle_session(&server);
    let mut third = idle_session(&server);
    still_served(&mut second, 1);
    still_served(&mut third, 1);
    // Full: the newcomer takes the place of the session idle the longest (the first).
    server.assert_serving();
    first.expect_eof();
    still_served(&mut third, 2);
    assert_eq!(server.stats().evicted, 1);
}

#[test]
fn busy_sessions_keep_their_place() {
    let config = ServerConfig {
        max_connections: 2,
        io_timeout: Timeout::secs(60),
        ..test_config()
    };
    let server = Server::start(SIZE, config);
    const MIB: u32 = 1 << 20;
    // Two sessions each with two 1 MiB reads whose replies they do not read yet: busy.
    let mut busy: Vec<Client> = (0..2)
        .map(|_| {
            let mut c = idle_session(&server);
            c.request(CMD_READ, 0, 1, 0, MIB);
            c.request(CMD_READ, 0, 2, 0, MIB);
            c
        })
        .collect();
    server.wait_for("both replies under way", |s| {
        s.in_flight_bytes == 2 * u64::from(MIB)
    });
    // Every session busy: the newcomer is refused, without a greeting.
    let mut refused = server.connect();
    refused.expect_eof();
    assert_eq!(server.stats().refused, 1);
    // The first takes its replies and is idle: the next newcomer takes its place.
    for h in 1..=2 {
        assert_eq!(busy[0].simple_reply(h), 0);
        let _ = busy[0].recv(MIB as usize);
    }
    server.wait_for("the first session idle", |s| {
        s.in_flight_bytes == u64::from(MIB)
    });
    let mut newcomer = idle_session(&server);
    busy[0].expect_eof();
    for h in 1..=2 {
        assert_eq!(busy[1].simple_reply(h), 0);
        let _ = busy[1].recv(MIB as usize);
    }
    still_served(&mut newcomer, 3);
}

#[test]
fn idle_sessions_time_out() {
    let config = ServerConfig {
        idle_timeout: Timeout::millis(300),
        ..test_config()
    };
    let server = Server::start(SIZE, config);
    let mut idle = idle_session(&server);
    idle.expect_eof();
    server.wait_for("the idle session gone", |s| s.serving == 0);
    server.assert_serving();
}

#[test]
fn shutdown_closes_open_connections() {
    let server = Server::start_tcp(SIZE, test_config());
    let mut negotiating = server.connect();
    negotiating.greet();
    let mut transmitting = server.connect();
    transmitting.greet();
    transmitting.go("zram0", true);
    server.assert_serving();
    server.stop();
    negotiating.expect_eof();
    transmitting.expect_eof();
}

#[test]
fn extreme_settings_are_tamed() {
    // An endless handshake timeout and a maximum request below a page: the server clamps
    // what it must and keeps serving.
    let config = ServerConfig {
        handshake_timeout: Timeout(Duration::MAX),
        max_request_bytes: 1,
        max_connections: 4,
        ..ServerConfig::default()
    };
    let server = Server::start(SIZE, config);
    let mut c = server.connect();
    c.greet();
    let i = infos(&mut c, OPT_INFO, "zram0", &[INFO_BLOCK_SIZE]).expect("info");
    let bs = info_of(&i, INFO_BLOCK_SIZE).expect("block size");
    assert_eq!(u32::from_be_bytes(bs[8..12].try_into().unwrap()), 4096);
    drop(c);
    server.assert_serving();
}
