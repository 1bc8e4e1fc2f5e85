//! `zramd serve --image FILE` (config key `image`): the file's bytes are what the export
//! serves from the start, read back over NBD with nbdcopy byte for byte (zeroes past the
//! file's end); a file larger than the device, a missing file, a directory and a FIFO are
//! refused with a clear error before anything is served.

mod common {
    pub mod have;
    pub mod run;
}

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use common::have::have;
use common::run::{run, run_ok};
use zramd::serve::{ConfigFile, DeviceSpec};

/// A `zramd serve` process, killed and reaped when dropped.
struct Served(Child);

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `zramd serve ARGS --unix SOCKET` and waits for its socket (the server must not
/// exit first).
fn serve(args: &[&str], socket: &Path) -> Served {
    let child = Command::new(env!("CARGO_BIN_EXE_zramd"))
        .arg("serve")
        .args(args)
        .arg("--unix")
        .arg(socket)
        .stdout(Stdio::null())
        .spawn()
        .expect("run zramd serve");
    let mut served = Served(child);
    let start = Instant::now();
    while !socket.exists() {
        if let Some(status) = served.0.try_wait().unwrap() {
            panic!("zramd serve exited ({status}) before serving");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no socket after 60 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    served
}

/// 3 MiB and a bit of varied bytes, with an all-zero MiB in the middle.
fn image(dir: &Path) -> (PathBuf, Vec<u8>) {
    let mut data: Vec<u8> = (0..(3u32 << 20) + 1234)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    data[1 << 20..2 << 20].fill(0);
    let path = dir.join("disk.img");
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

#[test]
fn read_only_export_serves_the_image() {
    if !have("read_only_export_serves_the_image", "nbdcopy") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, data) = image(dir.path());
    let socket = dir.path().join("nbd.sock");
    let img_arg = img.to_str().unwrap();
    let _served = serve(
        &["--read-only", "--size", "4M", "--image", img_arg],
        &socket,
    );
    let out = dir.path().join("out.img");
    run_ok(
        Command::new("nbdcopy")
            .arg(format!("nbd+unix:///zram0?socket={}", socket.display()))
            .arg(&out),
        Duration::from_secs(60),
    );
    let got = std::fs::read(&out).unwrap();
    assert_eq!(got.len(), 4 << 20, "the device's size, not the file's");
    assert!(got[..data.len()] == data[..], "the image's bytes differ");
    assert!(got[data.len()..].iter().all(|&b| b == 0), "past the image");
}

#[test]
fn bad_images_are_refused_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let (img, _) = image(dir.path());
    let missing = dir.path().join("missing.img");
    let socket = dir.path().join("nbd.sock");
    // A FIFO no one writes to: opening it to read would wait for a writer.
    let fifo = dir.path().join("fifo");
    run_ok(Command::new("mkfifo").arg(&fifo), Duration::from_secs(10));
    for (path, size, why) in [
        (&img, "1M", "is larger than the device"),
        (&missing, "4M", "No such file"),
        (&dir.path().to_path_buf(), "4M", "not a regular file"),
        (&fifo, "4M", "not a regular file"),
    ] {
        let r = run(
            Command::new(env!("CARGO_BIN_EXE_zramd"))
                .args(["serve", "--read-only", "--size", size, "--image"])
                .arg(path)
                .arg("--unix")
                .arg(&socket),
            Duration::from_secs(60),
        );
        assert!(!r.ok, "{path:?}: {}", r.stderr);
        assert!(r.stderr.contains(why), "{path:?}: {}", r.stderr);
        assert!(
            r.stderr.contains(&path.display().to_string()),
            "names the file: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("panicked"), "{}", r.stderr);
        assert!(!socket.exists(), "{path:?}: nothing served");
    }
}

/// The config file's `image` key and the command line's `--image` are the same setting, and
/// it goes with the other device options (not with `--config`).
#[test]
fn image_is_a_device_option_and_a_config_key() {
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        device: DeviceSpec,
    }
    let spec = Cli::try_parse_from(["serve", "--image", "a.img"])
        .unwrap()
        .device;
    assert_eq!(spec.image, Some(PathBuf::from("a.img")));
    assert_eq!(Cli::try_parse_from(["serve"]).unwrap().device.image, None);
    let c = ConfigFile::parse("[[device]]\nname = \"a\"\nimage = \"b.img\"\n").unwrap();
    assert_eq!(c.device[0].image, Some(PathBuf::from("b.img")));

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("zramd.toml");
    std::fs::write(&config, "[[device]]\nname = \"a\"\nsize = \"1M\"\n").unwrap();
    let r = run(
        Command::new(env!("CARGO_BIN_EXE_zramd"))
            .args(["serve", "--image", "x.img", "--config"])
            .arg(&config),
        Duration::from_secs(30),
    );
    assert!(!r.ok, "{}", r.stdout);
    assert!(r.stderr.contains("--image"), "{}", r.stderr);
    // So does every device option, down to the last one added.
    let r = run(
        Command::new(env!("CARGO_BIN_EXE_zramd"))
            .args(["serve", "--no-fault-ahead", "--config"])
            .arg(&config),
        Duration::from_secs(30),
    );
    assert!(!r.ok, "{}", r.stdout);
    assert!(r.stderr.contains("--no-fault-ahead"), "{}", r.stderr);
}
