//! NBD over TLS with pre-shared keys (`--tls require --tls-psk FILE`): nbdinfo, nbdcopy
//! (libnbd) and qemu-img (qemu's `tls-creds-psk`), all GnuTLS clients, connect with the
//! key and move real data both ways; a wrong key and a plain client get no export, and the
//! server goes on serving; bad PSK files and certificates with keys fail start-up.
//!
//! A test whose tool is missing says so on stderr and returns; it never passes silently.
//! Pre-shared keys need the `tls-psk` feature (OpenSSL; `scripts/test.sh` enables it):
//! without it, `nbd_tls.rs` checks that `--tls-psk` is refused with a clear error.

#![cfg(feature = "tls-psk")]

mod common {
    pub mod have;
    pub mod image;
    pub mod run;
}

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::have::have;
use common::image::real_image;
use common::run::{run, run_ok};
use zramd::nbd::TlsMode;
use zramd::serve::{DeviceSpec, ServeOptions, Server};

const LIMIT: Duration = Duration::from_secs(120);

fn start(dir: &Path, certs: Option<PathBuf>, psk: Option<PathBuf>) -> anyhow::Result<Server> {
    let mut options = ServeOptions {
        devices: vec![DeviceSpec {
            size: "64M".parse().unwrap(),
            ..DeviceSpec::default()
        }],
        listen: vec!["127.0.0.1:0".into()],
        control: Some(dir.join("control.sock")),
        ..ServeOptions::default()
    };
    options.settings.nbd.tls = TlsMode::Require;
    options.settings.nbd.tls_certificates = certs;
    options.settings.nbd.tls_psk = psk;
    Server::start(&options)
}

/// `user:` and 32 random bytes in hex, as `psktool -u user` writes it, in `dir/keys.psk`
/// (the name qemu's `tls-creds-psk` looks for).
fn psk_file(dir: &Path, user: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let key: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    let file = dir.join("keys.psk");
    std::fs::write(&file, format!("{user}:{key}\n")).unwrap();
    file
}

fn uri(port: u16, user: &str, file: &Path) -> String {
    format!(
        "nbds://{user}@127.0.0.1:{port}/zram0?tls-psk-file={}",
        file.display()
    )
}

#[test]
fn nbdinfo_nbdcopy_and_qemu_img_over_tls_psk() {
    const NAME: &str = "nbdinfo_nbdcopy_and_qemu_img_over_tls_psk";
    for tool in ["qemu-img", "nbdinfo", "nbdcopy"] {
        if !have(NAME, tool) {
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let keys = psk_file(&dir.path().join("psk"), "alice");
    let server = start(dir.path(), None, Some(keys.clone())).unwrap();
    let port = server.tcp_addrs[0].port();

    let info = run_ok(
        Command::new("nbdinfo").arg(uri(port, "alice", &keys)),
        LIMIT,
    );
    assert!(info.stdout.contains("with TLS"), "{}", info.stdout);
    assert!(info.stdout.contains("67108864"), "{}", info.stdout);

    // nbdcopy writes real data over TLS-PSK and reads it back.
    let img = dir.path().join("img");
    let data = real_image(&img, 12 << 20);
    run_ok(
        Command::new("nbdcopy")
            .arg(&img)
            .arg(uri(port, "alice", &keys)),
        LIMIT,
    );
    let back = dir.path().join("back");
    run_ok(
        Command::new("nbdcopy")
            .arg(uri(port, "alice", &keys))
            .arg(&back),
        LIMIT,
    );
    let back = std::fs::read(&back).unwrap();
    assert!(
        back[..data.len()] == data[..],
        "data read back over TLS-PSK differs"
    );
    assert!(back[data.len()..].iter().all(|&b| b == 0));

    // qemu-img with tls-creds-psk (dir holds keys.psk).
    let creds = format!(
        "tls-creds-psk,id=tls0,endpoint=client,dir={},username=alice",
        keys.parent().unwrap().display()
    );
    let target = format!("driver=nbd,host=127.0.0.1,port={port},export=zram0,tls-creds=tls0");
    let q = run_ok(
        Command::new("qemu-img").args(["info", "--object", &creds, "--image-opts", &target]),
        LIMIT,
    );
    assert!(q.stdout.contains("67108864"), "{}", q.stdout);

    // The same user with another key, an unknown user, and a plain client get nothing.
    let wrong = psk_file(&dir.path().join("wrong"), "alice");
    let bob = psk_file(&dir.path().join("bob"), "bob");
    for (what, target) in [
        ("wrong key", uri(port, "alice", &wrong)),
        ("unknown user", uri(port, "bob", &bob)),
        ("plain client", format!("nbd://127.0.0.1:{port}/zram0")),
    ] {
        let r = run(Command::new("nbdinfo").arg(&target), LIMIT);
        assert!(!r.ok, "{what} served: {}", r.stdout);
        assert!(!r.stdout.contains("export-size"), "{what}: {}", r.stdout);
    }

    // The server keeps serving the right key.
    let size = run_ok(
        Command::new("nbdinfo")
            .arg("--size")
            .arg(uri(port, "alice", &keys)),
        LIMIT,
    );
    assert_eq!(size.stdout.trim(), "67108864");
    server.stop();
}

#[test]
fn bad_psk_files_and_both_credentials_fail_start_up() {
    let dir = tempfile::tempdir().unwrap();
    for (i, (text, why)) in [
        ("", "no keys"),
        ("alice:00ff\nbob\n", "line 2: no ':'"),
        ("alice:zz\n", "line 1: the key is not hexadecimal"),
    ]
    .into_iter()
    .enumerate()
    {
        let file = dir.path().join(format!("bad{i}.psk"));
        std::fs::write(&file, text).unwrap();
        let err = start(dir.path(), None, Some(file.clone())).unwrap_err();
        let err = format!("{err:#}");
        assert!(
            err.contains(why) && err.contains(&format!("bad{i}.psk")),
            "{text:?}: {err}"
        );
    }
    let keys = psk_file(&dir.path().join("psk"), "alice");
    let err = start(dir.path(), Some(dir.path().to_path_buf()), Some(keys)).unwrap_err();
    assert!(format!("{err:#}").contains("exclude each other"), "{err:#}");
    assert!(
        !dir.path().join("control.sock").exists(),
        "a failed start leaves nothing"
    );
}
