//! A loop device with direct I/O over the FUSE `disk` (root): the way the README tells
//! users to put a block device on it. The loop device must accept direct I/O on the file
//! (`/sys/block/loopN/loop/dio` reads 1), and many requests in flight at once (fio, libaio,
//! queue depth 32: the kernel's asynchronous FUSE direct I/O sends them to the session's
//! threads together) must read back what was written, checked by fio's checksums.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod have;
    pub mod run;
}

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::have::have;
use common::run::{run, run_ok};
use zramd::serve::{DeviceSpec, ServeOptions, Server};

/// How long one system command (losetup, fio) may take.
const LIMIT: Duration = Duration::from_secs(300);

/// Detaches the loop device when dropped, also when the test fails.
struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

/// A server with one 256 MiB device and its FUSE tree at `dir/mnt`.
fn start(dir: &Path) -> Server {
    let mount = dir.join("mnt");
    std::fs::create_dir_all(&mount).unwrap();
    Server::start(&ServeOptions {
        devices: vec![DeviceSpec {
            name: "zram0".into(),
            size: "256M".parse().unwrap(),
            ..DeviceSpec::default()
        }],
        control: Some(dir.join("control.sock")),
        fuse: Some(mount),
        ..ServeOptions::default()
    })
    .expect("start server with FUSE")
}

#[test]
fn direct_io_loop_device_keeps_data_with_many_requests_in_flight() {
    const NAME: &str = "direct_io_loop_device_keeps_data_with_many_requests_in_flight";
    for need in ["fuse", "root", "losetup", "fio"] {
        if !have(NAME, need) {
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let server = start(tmp.path());
    let disk = tmp.path().join("mnt/zram0/disk");
    let dev = Loop(
        run_ok(
            Command::new("losetup")
                .args(["--direct-io=on", "-f", "--show"])
                .arg(&disk),
            LIMIT,
        )
        .stdout
        .trim()
        .to_owned(),
    );
    let name = dev.0.trim_start_matches("/dev/");
    let dio = std::fs::read_to_string(format!("/sys/block/{name}/loop/dio")).unwrap();
    assert_eq!(dio.trim(), "1", "the loop device fell back to buffered I/O");

    let fio = run(
        Command::new("fio")
            .args([
                "--name=inflight",
                "--ioengine=libaio",
                "--direct=1",
                "--iodepth=32",
                "--rw=randwrite",
                "--bs=16k",
                "--size=64M",
                "--verify=crc32c",
                "--do_verify=1",
                "--verify_fatal=1",
                "--verify_state_save=0",
            ])
            .arg(format!("--filename={}", dev.0)),
        LIMIT,
    );
    assert!(
        fio.ok,
        "fio found wrong data or failed:\n{}\n{}",
        fio.stdout, fio.stderr
    );
    // Writes reached the device (fio's patterns compress but are not zero pages).
    let mm = std::fs::read_to_string(tmp.path().join("mnt/zram0/mm_stat")).unwrap();
    let orig: u64 = mm.split_whitespace().next().unwrap().parse().unwrap();
    assert!(orig >= 32 << 20, "mm_stat after 64 MiB of writes: {mm}");

    drop(dev);
    server.stop();
}
