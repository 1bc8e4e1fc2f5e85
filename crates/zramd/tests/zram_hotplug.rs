//! Devices added and removed at run time (the kernel's `hot_add`/`hot_remove`) through the
//! control socket and the `zramd add`/`remove` commands: a new device appears in `zramd
//! stat`, the metrics and the NBD export list and handshake; a removed one disappears, and
//! one held open is refused. `reset` is the kernel's: the algorithm goes back to the
//! default; `clear` keeps it.

mod common {
    pub mod cli;
    #[expect(dead_code, reason = "these tests speak only part of the protocol")]
    pub mod nbd;
    pub mod run;
}

use common::cli::{cli, cli_ok, scrape, serve};
use common::nbd::{Client, Server as NbdServer, test_config};
use zram::{Algorithm, ZramConfig};
use zramd::control::{self, Request};
use zramd::nbd::proto::*;
use zramd::serve::DeviceSpec;

fn zstd_device(name: &str) -> DeviceSpec {
    DeviceSpec {
        name: name.into(),
        size: "4M".parse().unwrap(),
        config: ZramConfig {
            algorithm: Algorithm::Zstd,
            ..ZramConfig::default()
        },
        ..DeviceSpec::default()
    }
}

fn names(stat: &str) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_str(stat).expect("stat JSON");
    v.as_array()
        .expect("devices")
        .iter()
        .map(|d| d["name"].as_str().expect("name").to_owned())
        .collect()
}

#[test]
fn add_and_remove_over_the_control_socket() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serve(tmp.path(), vec![zstd_device("zram0")]);
    let control = tmp.path().join("control.sock");
    let metrics = server.metrics_addr.expect("metrics address");

    assert_eq!(cli_ok(&control, &["add"]).trim(), "zram1");
    assert_eq!(cli_ok(&control, &["add"]).trim(), "zram2");
    let stat = cli_ok(&control, &["stat", "--json"]);
    assert_eq!(names(&stat), ["zram0", "zram1", "zram2"]);
    // New devices are uninitialized, with the default settings.
    let zram1 = server.registry.device("zram1").expect("zram1");
    assert!(!zram1.initialized());
    assert_eq!(zram1.settings(), ZramConfig::default());
    assert!(scrape(metrics).contains("\"zram2\""), "metrics show zram2");

    // Removed: gone everywhere; its number is free again.
    cli_ok(&control, &["remove", "zram1"]);
    assert_eq!(
        names(&cli_ok(&control, &["stat", "--json"])),
        ["zram0", "zram2"]
    );
    assert!(
        !scrape(metrics).contains("\"zram1\""),
        "metrics forget zram1"
    );
    assert_eq!(cli_ok(&control, &["add"]).trim(), "zram1");

    // Held open: refused, and the device stays.
    let dev = server.registry.device("zram0").unwrap();
    let opened = dev.open().expect("initialized");
    let r = cli(&control, &["remove", "zram0"]);
    assert!(!r.ok && r.stderr.contains("busy"), "{}", r.stderr);
    drop(opened);
    assert!(server.registry.device("zram0").is_some());

    // Bad names: an error line, never a crash.
    for bad in ["nope", "", "zram999"] {
        let r = cli(&control, &["remove", bad]);
        assert!(
            !r.ok && r.stderr.contains("no device named"),
            "{bad:?}: {}",
            r.stderr
        );
    }
    cli_ok(&control, &["remove", "zram0"]);
    assert!(server.registry.device("zram0").is_none());
    assert!(
        dev.open().is_none(),
        "a removed device is never opened again"
    );
    server.stop();
}

#[test]
fn reset_brings_back_the_default_algorithm_and_clear_keeps_it() {
    let tmp = tempfile::tempdir().unwrap();
    let server = serve(tmp.path(), vec![zstd_device("zram0"), zstd_device("zram1")]);
    let path = tmp.path().join("control.sock");
    let algorithm = |name: &str| server.registry.device(name).unwrap().settings().algorithm;

    control::call(
        &path,
        &Request::Clear {
            device: "zram1".into(),
        },
    )
    .unwrap();
    assert!(server.registry.device("zram1").unwrap().initialized());
    assert_eq!(
        algorithm("zram1"),
        Algorithm::Zstd,
        "clear keeps the settings"
    );

    let r = cli(&path, &["reset", "zram0"]);
    assert!(r.ok, "{}", r.stderr);
    let d = server.registry.device("zram0").unwrap();
    assert!(!d.initialized());
    assert_eq!(algorithm("zram0"), ZramConfig::default().algorithm);
    assert_ne!(algorithm("zram0"), Algorithm::Zstd);
    assert_eq!(
        algorithm("zram1"),
        Algorithm::Zstd,
        "the other device keeps its own"
    );
    server.stop();
}

#[test]
fn a_hot_added_device_is_an_nbd_export_until_removed() {
    let server = NbdServer::start(1 << 20, test_config());
    let (n, export) = zramd::hotplug::add(&server.exports);
    assert_eq!((n, export.name.as_str()), (1, "zram1"));
    export.device.init(2 << 20).unwrap();

    let mut c = server.connect();
    c.greet();
    assert_eq!(c.list(), ["zram0", "ro", "zram1"]);
    let (size, _) = c.go("zram1", false);
    assert_eq!(size, 2 << 20);
    c.request(CMD_WRITE, 0, 1, 0, 4096);
    c.send(&[0x5a; 4096]);
    assert_eq!(c.simple_reply(1), 0);
    // Served: busy.
    assert_eq!(
        zramd::hotplug::remove_store(&server.exports, b"1\n"),
        Err(libc::EBUSY)
    );
    c.request(CMD_DISC, 0, 2, 0, 0);
    c.expect_eof();
    drop(c);
    server.wait_for("the client to go", |s| s.serving == 0);
    let start = std::time::Instant::now();
    while export.device.openers() > 0 {
        assert!(
            start.elapsed().as_secs() < 20,
            "the connection never closed"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    zramd::hotplug::remove_store(&server.exports, b"1\n").unwrap();

    let mut c = server.connect();
    c.greet();
    assert_eq!(c.list(), ["zram0", "ro"]);
    c.option(OPT_GO, &Client::info_data("zram1", &[]));
    assert_eq!(c.opt_reply().reply_type, REP_ERR_UNKNOWN);
    drop(c);
    assert!(
        export.device.open().is_none(),
        "whoever kept it cannot open it"
    );
    server.assert_serving();
}

#[test]
fn a_device_named_as_the_control_folder_is_refused_by_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let set = zramd::export::ExportSet::new(vec![std::sync::Arc::new(zramd::export::Export::new(
        "zram-control",
        common::nbd::device(1 << 20),
        false,
    ))]);
    // Refused before anything is mounted: no FUSE needed.
    let err = zramd::fuse::mount(std::sync::Arc::new(set), tmp.path()).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
    assert!(err.to_string().contains("zram-control"), "{err}");
}
