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
use std::os::unix::net::UnixStream;

use common::served::Served;

use zram::{Algorithm, ZramConfig};
use zramd::control::{self, Request};
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
    assert_eq!(d.mm_stat, dev.mm_stat().format());
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

    let r = control::call(&path, &Request::Compact { device: None }).unwrap();
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
        "zramd_request_latency_seconds_bucket{device=\"zram1\",op=\"read\",le=\"+Inf\"} 0"
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
    let r = served.cli(&["stat", "--raw"]);
    assert!(r.ok);
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
