//! `zramd serve`'s control socket and metrics, in-process and through the CLI.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    #[expect(
        dead_code,
        reason = "this test runs only zramd's own CLI, through Served, and needs no run_ok"
    )]
    pub mod run;
    #[expect(
        dead_code,
        reason = "these tests stop their servers cleanly and never kill one"
    )]
    pub mod served;
}

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use common::served::Served;

use zram::{Algorithm, ZramConfig};
use zramd::control::{self, Request};
use zramd::listen::{Mode, SocketAccess};
use zramd::metrics;
use zramd::serve::{DeviceSpec, ServeOptions, Server};

fn options(dir: &std::path::Path) -> ServeOptions {
    ServeOptions {
        devices: vec![
            DeviceSpec {
                name: "zram0".into(),
                size: "16M".parse().unwrap(),
                ..DeviceSpec::default()
            },
            DeviceSpec {
                name: "zram1".into(),
                size: "8M".parse().unwrap(),
                config: ZramConfig {
                    algorithm: Algorithm::Zstd,
                    ..ZramConfig::default()
                },
                ..DeviceSpec::default()
            },
        ],
        unix: vec![dir.join("nbd.sock")],
        control: Some(dir.join("control.sock")),
        metrics: Some("127.0.0.1:0".into()),
        ..ServeOptions::default()
    }
}

fn text_page(i: usize) -> Vec<u8> {
    let line = format!("line {i}: zramd keeps pages compressed in memory.\n");
    line.bytes().cycle().take(4096).collect()
}

#[test]
fn stat_set_compact_reset_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&options(dir.path())).unwrap();
    let path = server.control_path.clone();
    let dev = server.registry.device("zram0").unwrap().zram().unwrap();
    for i in 0..64 {
        dev.write(i as u64 * 4096, &text_page(i)).unwrap();
    }
    dev.write(64 * 4096, &[0u8; 4096]).unwrap();

    let r = control::call(&path, &Request::Stat).unwrap();
    assert_eq!(r.devices.len(), 2);
    let d = &r.devices[0];
    assert_eq!(d.name, "zram0");
    assert_eq!(d.algorithm, "lz4");
    assert_eq!(d.disksize, 16 << 20);
    assert_eq!(d.data, 65 * 4096);
    assert!(d.compr > 0 && d.compr < 64 * 4096);
    // The device's figures, but for the cached pages and the metadata, which the pool's
    // own thread moves while it faults fresh pages in ahead (`MmStat::without_background`).
    let fields: Vec<u64> = d
        .mm_stat
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(fields, d.mm_stat_fields, "the line is the fields");
    assert_eq!(
        fields[..10],
        dev.mm_stat().without_background().fields()[..10]
    );
    assert_eq!(d.mm_stat_fields[5], 1, "one same-filled page");
    assert!(
        d.export.contains("nbd+unix:///zram0?socket="),
        "{}",
        d.export
    );
    assert_eq!(r.devices[1].algorithm, "zstd");

    control::call(
        &path,
        &Request::Set {
            device: "zram0".into(),
            attr: "mem_limit".into(),
            value: "4M".into(),
        },
    )
    .unwrap();
    assert_eq!(dev.mm_stat().mem_limit, 4 << 20);
    let bad = control::call(
        &path,
        &Request::Set {
            device: "zram0".into(),
            attr: "disksize".into(),
            value: "1G".into(),
        },
    );
    assert!(bad.unwrap_err().to_string().contains("cannot be changed"));
    let bad = control::call(
        &path,
        &Request::Set {
            device: "zram0".into(),
            attr: "mem_limit".into(),
            value: "lots".into(),
        },
    );
    assert!(bad.is_err());
    let missing = control::call(
        &path,
        &Request::Reset {
            device: "zram9".into(),
        },
    );
    assert!(missing.unwrap_err().to_string().contains("zram9"));

    let r = control::call(
        &path,
        &Request::Compact {
            device: None,
            backing: false,
        },
    )
    .unwrap();
    assert!(r.pages_freed.is_some());

    // Malformed requests get an error answer, and the server keeps serving.
    let mut s = UnixStream::connect(&path).unwrap();
    s.write_all(b"{\"cmd\": \"explode\"}\n").unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    assert!(line.contains("\"ok\":false"), "{line}");
    let mut s = UnixStream::connect(&path).unwrap();
    s.write_all(&[0xff; 100]).unwrap();
    s.write_all(b"\n").unwrap();
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line).unwrap();
    assert!(line.contains("bad request"), "{line}");

    // Metrics expose the same figures.
    let addr = server.metrics_addr.unwrap();
    let mut http = std::net::TcpStream::connect(addr).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    let want = format!(
        "zramd_orig_data_size_bytes{{device=\"zram0\"}} {}",
        65 * 4096
    );
    assert!(body.contains(&want), "{body}");
    assert!(body.contains(
        "zramd_request_latency_seconds_bucket{le=\"+Inf\",device=\"zram1\",op=\"read\"} 0"
    ));

    // Clear keeps the device (its size, its settings) and frees its data.
    control::call(
        &path,
        &Request::Clear {
            device: "zram0".into(),
        },
    )
    .unwrap();
    let after = dev.mm_stat();
    assert_eq!(
        (
            after.orig_data_size,
            after.compr_data_size,
            after.mem_used_total
        ),
        (0, 0, 0)
    );
    let mut buf = vec![1u8; 4096];
    dev.read(0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "cleared device reads zeroes");
    let device = server.registry.device("zram0").unwrap();
    assert!(device.initialized(), "clear keeps the device initialized");

    // Reset is the kernel's: refused while a client holds the device open, then the device
    // is uninitialized (no size, no data) until a new disksize.
    let opened = device.open().unwrap();
    let busy = control::call(
        &path,
        &Request::Reset {
            device: "zram0".into(),
        },
    );
    assert!(busy.unwrap_err().to_string().contains("busy"));
    drop((opened, dev));
    control::call(
        &path,
        &Request::Reset {
            device: "zram0".into(),
        },
    )
    .unwrap();
    assert!(
        !device.initialized(),
        "reset uninitializes, as the kernel's"
    );

    server.stop();
    assert!(!path.exists(), "control socket removed on stop");
    assert!(
        !dir.path().join("nbd.sock").exists(),
        "NBD socket removed on stop"
    );
}

#[test]
fn a_second_server_cannot_steal_a_live_control_socket() {
    let dir = tempfile::tempdir().unwrap();
    let first = Server::start(&options(dir.path())).unwrap();
    let mut opts = options(dir.path());
    opts.unix = vec![dir.path().join("nbd2.sock")];
    let err = Server::start(&opts).unwrap_err();
    assert!(err.to_string().contains("in use"), "{err}");
    first.stop();
}

#[test]
fn cli_serve_stat_and_clean_stop_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let served = Served::start(dir.path(), &["--size", "8M"]);
    let r = served.cli(&["stat"]);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stdout.starts_with("NAME"), "{}", r.stdout);
    assert!(
        r.stdout.contains("zram0") && r.stdout.contains("lz4") && r.stdout.contains("8M"),
        "{}",
        r.stdout
    );
    let r = served.cli(&["stat", "--mm-stat", "zram0"]);
    assert!(r.ok, "{}", r.stderr);
    let fields: Vec<&str> = r.stdout.split_whitespace().collect();
    assert_eq!(fields.len(), 12, "{}", r.stdout);
    assert!(r.stdout.ends_with('\n'));
    let stat = served.stat_json();
    assert!(stat[0]["mm_stat"].is_string(), "{stat}");
    let r = served.cli(&["set", "zram0", "mem_limit", "2M"]);
    assert!(r.ok, "{}", r.stderr);
    let r = served.cli(&["reset", "nope"]);
    assert!(!r.ok && r.stderr.contains("nope"), "{}", r.stderr);
    let r = served.cli(&["clear", "nope"]);
    assert!(!r.ok && r.stderr.contains("nope"), "{}", r.stderr);
    let r = served.cli(&["compact", "zram0"]);
    assert!(r.ok && r.stdout.contains("pages freed"), "{}", r.stdout);

    // SIGTERM stops it cleanly: exit status 0 and sockets gone.
    let control = served.control.clone();
    let uri = served.uri("zram0");
    let stdout = served.stop();
    assert!(!control.exists());
    assert!(stdout.contains(&uri), "{stdout}");
}

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count()
}

/// Reads everything until the server closes, which it must within 30 s.
fn read_all(s: &mut UnixStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = Vec::new();
    match s.read_to_end(&mut out) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("the server did not close the connection: {e}"),
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn control_requests_are_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&options(dir.path())).unwrap();
    let path = server.control_path.clone();

    // Longer than 64 KiB without a newline: an error line, then the connection closes.
    let mut long = UnixStream::connect(&path).unwrap();
    long.write_all(&vec![b' '; control::MAX_REQUEST + 4096])
        .unwrap();
    let answer = read_all(&mut long);
    assert!(answer.contains("longer than 64 KiB"), "{answer:?}");
    assert!(answer.ends_with('\n'), "{answer:?}");

    // A byte at a time: the deadline is for the whole request, not for each read.
    let mut slow = UnixStream::connect(&path).unwrap();
    let mut drip = slow.try_clone().unwrap();
    let dripping = std::thread::spawn(move || {
        for _ in 0..150 {
            if drip.write_all(b" ").is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    let answer = read_all(&mut slow);
    assert!(answer.contains("not received within 5s"), "{answer:?}");
    dripping.join().unwrap();

    // Silent connections: at most MAX_CONNECTIONS are served at once (the oldest still
    // silent makes way), and a real request still gets through.
    let mut silent: Vec<UnixStream> = (0..64)
        .map(|_| UnixStream::connect(&path).unwrap())
        .collect();
    control::call(&path, &Request::Stat).unwrap();
    let start = Instant::now();
    while threads_named("control-conn") > control::MAX_CONNECTIONS {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "control threads not capped"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(read_all(&mut silent[0]).is_empty(), "the oldest was closed");
    server.stop();
}

/// Tries `attempt` every 20 ms until it succeeds or 3 s have passed (a connection the
/// server just answered may take a moment to count as idle); its last error otherwise.
fn within_3s<T>(mut attempt: impl FnMut() -> Result<T, String>) -> Result<T, String> {
    let start = Instant::now();
    loop {
        match attempt() {
            Ok(v) => return Ok(v),
            Err(e) if start.elapsed() > Duration::from_secs(3) => return Err(e),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

#[test]
fn answered_clients_that_hold_on_make_way() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&options(dir.path())).unwrap();
    let path = server.control_path.clone();
    // As many clients as the control socket serves at once send a request each, read the
    // answer to its end, and then do not close (the server drains such a connection for up
    // to 10 s, so that closing does not reset it under the answer).
    let holding: Vec<UnixStream> = (0..control::MAX_CONNECTIONS)
        .map(|_| {
            let mut s = UnixStream::connect(&path).unwrap();
            s.write_all(b"{\"cmd\":\"stat\"}\n").unwrap();
            assert!(read_all(&mut s).contains("devices"));
            s
        })
        .collect();
    within_3s(|| control::call(&path, &Request::Stat).map_err(|e| e.to_string()))
        .expect("a newcomer is served");
    // The metrics endpoint likewise.
    let addr = server.metrics_addr.unwrap();
    let request = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    let scrape = || -> Result<(TcpStream, String), String> {
        let mut http = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        http.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        http.write_all(request).map_err(|e| e.to_string())?;
        let mut body = String::new();
        http.read_to_string(&mut body).map_err(|e| e.to_string())?;
        Ok((http, body))
    };
    let scrapers: Vec<TcpStream> = (0..metrics::MAX_CONNECTIONS)
        .map(|_| scrape().unwrap().0)
        .collect();
    let (_, body) = within_3s(|| match scrape()? {
        (_, body) if body.starts_with("HTTP/1.1 200") => Ok(((), body)),
        (_, body) => Err(body.lines().next().unwrap_or("").to_owned()),
    })
    .expect("a newcomer's scrape is answered");
    assert!(body.contains("zramd_orig_data_size_bytes"));
    drop((holding, scrapers));
    server.stop();
}

#[test]
fn silent_connections_cannot_block_a_scrape() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&options(dir.path())).unwrap();
    let addr = server.metrics_addr.unwrap();
    let _silent: Vec<TcpStream> = (0..20).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let scrape = |request: &[u8]| {
        let mut http = TcpStream::connect(addr).unwrap();
        // Served one at a time with 2 s each, 20 silent connections took 40 s.
        http.set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        http.write_all(request).unwrap();
        let mut body = String::new();
        http.read_to_string(&mut body)
            .expect("an answer before the deadline");
        body
    };
    let body = scrape(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");
    assert!(body.contains("zramd_orig_data_size_bytes"), "{body}");
    let mut huge = b"GET /metrics HTTP/1.1\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b'x', metrics::MAX_HEAD + 100));
    let body = scrape(&huge);
    assert!(body.starts_with("HTTP/1.1 431"), "{body}");
    server.stop();
}

#[test]
fn socket_paths_are_never_clobbered() {
    for flag in ["--control", "--unix"] {
        let dir = tempfile::tempdir().unwrap();
        let precious = dir.path().join("precious");
        std::fs::write(&precious, "data").unwrap();
        let mut opts = options(dir.path());
        if flag == "--control" {
            opts.control = Some(precious.clone());
        } else {
            opts.unix = vec![precious.clone()];
        }
        let err = format!("{:#}", Server::start(&opts).unwrap_err());
        assert!(err.contains("not a socket"), "{flag}: {err}");
        assert_eq!(std::fs::read_to_string(&precious).unwrap(), "data");
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "{flag}: the failed start left {left:?}");
    }
    // A stale socket, which nobody answers on, is replaced.
    let dir = tempfile::tempdir().unwrap();
    drop(std::os::unix::net::UnixListener::bind(dir.path().join("nbd.sock")).unwrap());
    drop(std::os::unix::net::UnixListener::bind(dir.path().join("control.sock")).unwrap());
    let server = Server::start(&options(dir.path())).unwrap();
    control::call(&server.control_path, &Request::Stat).unwrap();
    server.stop();
}

#[test]
fn a_failed_start_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut opts = options(dir.path());
    opts.metrics = Some(taken.local_addr().unwrap().to_string());
    let err = format!("{:#}", Server::start(&opts).unwrap_err());
    assert!(err.contains("metrics"), "{err}");
    let mut opts = options(dir.path());
    opts.devices[1].size = zram::Size(0);
    let err = format!("{:#}", Server::start(&opts).unwrap_err());
    assert!(err.contains("zram1"), "{err}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(left.is_empty(), "the failed starts left {left:?}");
}

fn mode_and_group(path: &std::path::Path) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt as _;
    let m = std::fs::metadata(path).unwrap();
    (m.mode() & 0o7777, m.gid())
}

#[test]
fn sockets_are_private_unless_widened() {
    let dir = tempfile::tempdir().unwrap();
    // Under umask 000 a socket would be 0777: anyone could use the device.
    let served = Served::start_with(dir.path(), &["--size", "8M"], Some("umask 000"));
    assert_eq!(mode_and_group(&served.socket).0, 0o600);
    assert_eq!(mode_and_group(&served.control).0, 0o600);
    served.stop();
    // Widened for a group; the control socket stays private.
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let gid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Gid:"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    // Root may give the socket any group; others only one of their own.
    let group = if gid == 0 { 100 } else { gid };
    let dir = tempfile::tempdir().unwrap();
    let mut opts = options(dir.path());
    opts.settings.sockets = SocketAccess {
        socket_mode: Mode(0o660),
        socket_group: Some(group.to_string()),
    };
    let server = Server::start(&opts).unwrap();
    assert_eq!(mode_and_group(&dir.path().join("nbd.sock")), (0o660, group));
    assert_eq!(mode_and_group(&server.control_path).0, 0o600);
    server.stop();
}

#[test]
fn nbd_limits_from_options_and_config_file_with_warnings_summed_up() {
    // Options: room for one connection negotiating; each new one takes the place of the
    // one before, and the warnings for all of them come as one line, then a summary.
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "--size",
        "8M",
        "--max-connections",
        "2",
        "--max-handshakes",
        "1",
        "--handshake-timeout",
        "1m",
        "--idle-timeout",
        "0",
        "--io-timeout",
        "5s",
        "--max-in-flight",
        "64M",
        "--socket-mode",
        "0600",
    ];
    let served = Served::start(dir.path(), &args);
    let mut evicted = Vec::new();
    for _ in 0..30 {
        let mut c = UnixStream::connect(&served.socket).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let mut greeting = [0u8; 18];
        c.read_exact(&mut greeting).unwrap();
        evicted.push(c);
    }
    for c in &mut evicted[..29] {
        assert!(read_all(c).is_empty());
    }
    served.stop();
    let log = std::fs::read_to_string(dir.path().join("zramd-serve.err")).unwrap();
    let warnings: Vec<&str> = log.lines().filter(|l| l.contains("make room")).collect();
    assert_eq!(warnings.len(), 2, "one at once, one summary:\n{log}");
    assert!(warnings[1].contains("28 closed to make room"), "{log}");

    // A config file's top-level keys, and the same options on the command line over them:
    // either way an idle session is closed after 300 ms.
    for (file_idle, option) in [("300ms", None), ("1h", Some("300ms"))] {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("zramd.toml");
        std::fs::write(
            &config,
            format!(
                "idle_timeout = \"{file_idle}\"\nmax_connections = 8\n\
                 [[device]]\nname = \"zram0\"\nsize = \"8M\"\n"
            ),
        )
        .unwrap();
        let mut args = vec!["--config", config.to_str().unwrap()];
        args.extend(option.iter().flat_map(|t| ["--idle-timeout", *t]));
        let served = Served::start(dir.path(), &args);
        let mut c = UnixStream::connect(&served.socket).unwrap();
        let mut greeting = [0u8; 18];
        c.read_exact(&mut greeting).unwrap();
        // Fixed newstyle, no zeroes; NBD_OPT_EXPORT_NAME "zram0".
        c.write_all(&3u32.to_be_bytes()).unwrap();
        let mut opt = b"IHAVEOPT".to_vec();
        opt.extend_from_slice(&1u32.to_be_bytes());
        opt.extend_from_slice(&5u32.to_be_bytes());
        opt.extend_from_slice(b"zram0");
        c.write_all(&opt).unwrap();
        let mut export = [0u8; 10];
        c.read_exact(&mut export).unwrap();
        assert!(
            read_all(&mut c).is_empty(),
            "{args:?}: the idle session was closed"
        );
        served.stop();
    }
}

/// A size no memory can hold is a clear error at start, not an abort: the slot table's
/// allocation fails (8 EiB: a 32 PiB table, past any address space) and `serve` says so.
#[test]
fn serve_with_a_size_no_memory_holds_fails_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::run::run(
        std::process::Command::new(env!("CARGO_BIN_EXE_zramd"))
            .args(["serve", "--size", "8E", "--unix"])
            .arg(dir.path().join("nbd.sock"))
            .arg("--control")
            .arg(dir.path().join("control.sock")),
        Duration::from_secs(60),
    );
    assert!(!out.ok, "{out:?}");
    assert!(
        out.stderr.contains("no memory for the slot table"),
        "{}",
        out.stderr
    );
    assert!(
        !out.stderr.contains("memory allocation of"),
        "aborted: {}",
        out.stderr
    );
    assert!(
        !dir.path().join("nbd.sock").exists(),
        "a failed start leaves no socket"
    );
}
