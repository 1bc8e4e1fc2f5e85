//! Compression units over NBD: `zramd serve --unit-size` and the config file's `unit_size`,
//! driven by real clients (nbdcopy, qemu-io) at unaligned offsets, with `zramd stat --json`
//! showing the setting; bad values are refused at start with a clear message.
//!
//! A test whose tool is missing says so on stderr and returns; it never passes silently.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod have;
    pub mod image;
    pub mod run;
    #[expect(
        dead_code,
        reason = "these tests stop their servers cleanly and never kill one"
    )]
    pub mod served;
}

use std::process::Command;
use std::time::Duration;

use common::have::have;
use common::image::real_image;
use common::run::{run, run_ok};
use common::served::Served;

const ZRAMD: &str = env!("CARGO_BIN_EXE_zramd");

/// How long one client run may take.
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn nbdcopy_and_qemu_io_through_32k_units() {
    if !have("nbdcopy_and_qemu_io_through_32k_units", "nbdcopy")
        || !have("nbdcopy_and_qemu_io_through_32k_units", "qemu-io")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let size = 8usize << 20;
    let served = Served::start(
        dir.path(),
        &["--size", "8M", "--algorithm", "zstd", "--unit-size", "32K"],
    );
    let stat = served.stat_json();
    assert_eq!(stat[0]["unit_size"], 32768, "{stat}");
    assert_eq!(stat[0]["algorithm"], "zstd", "{stat}");
    // The unit is offered as the preferred block size.
    if have("nbdcopy_and_qemu_io_through_32k_units", "nbdinfo") {
        let out = run_ok(Command::new("nbdinfo").arg(served.uri("zram0")), LIMIT);
        let text = &out.stdout;
        assert!(text.contains("block_size_preferred: 32768"), "{text}");
    }

    // A whole image in and out.
    let src = dir.path().join("in.img");
    let img = real_image(&src, size);
    run_ok(
        Command::new("nbdcopy").arg(&src).arg(served.uri("zram0")),
        LIMIT,
    );
    let back = dir.path().join("out.img");
    run_ok(
        Command::new("nbdcopy").arg(served.uri("zram0")).arg(&back),
        LIMIT,
    );
    let got = std::fs::read(&back).unwrap();
    if got != img {
        let first = got.iter().zip(&img).position(|(a, b)| a != b);
        let last = got.iter().zip(&img).rposition(|(a, b)| a != b);
        panic!(
            "image read back: {} vs {} bytes, first diff {first:?} last {last:?}",
            got.len(),
            img.len()
        );
    }
    let stat = served.stat_json();
    let data = stat[0]["data"].as_u64().unwrap();
    let compr = stat[0]["compr"].as_u64().unwrap();
    assert!(
        data > 0 && data.is_multiple_of(32768),
        "whole units stored: {stat}"
    );
    assert!(compr < data, "{stat}");

    // Unaligned writes, zeroes and discards across unit boundaries, checked by pattern.
    let target = served.uri("zram0");
    let out = run_ok(
        Command::new("qemu-io")
            .args(["-f", "raw"])
            .args(["-c", "write -P 0x41 30000 70000"])
            .args(["-c", "write -P 0x42 65535 3"])
            .args(["-c", "write -z 40001 5000"])
            .args(["-c", "discard 131072 65536"])
            .args(["-c", "read -P 0x41 30000 10001"])
            .args(["-c", "read -P 0 40001 5000"])
            .args(["-c", "read -P 0x41 45001 20534"])
            .args(["-c", "read -P 0x42 65535 3"])
            .args(["-c", "read -P 0x41 65538 34462"])
            .args(["-c", "read -P 0 131072 65536"])
            .arg(&target),
        LIMIT,
    );
    let text = &out.stdout;
    assert!(!text.contains("fail"), "{text}");
    assert_eq!(text.matches("read ").count(), 6, "{text}");
    // The bytes around the edits are the image's.
    let mut bytes = std::fs::read(&src).unwrap();
    bytes[30000..100000].fill(0x41);
    bytes[65535..65538].fill(0x42);
    bytes[40001..45001].fill(0);
    bytes[131072..196608].fill(0);
    run_ok(Command::new("nbdcopy").arg(&target).arg(&back), LIMIT);
    assert!(std::fs::read(&back).unwrap() == bytes, "edits read back");
    served.stop();
}

#[test]
fn config_file_unit_size_and_bad_values() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("zramd.toml");
    std::fs::write(
        &config,
        "[[device]]\nname = \"big\"\nsize = \"4M\"\nalgorithm = \"zstd\"\nunit_size = \"64K\"\n\
         [[device]]\nname = \"plain\"\nsize = \"1M\"\n",
    )
    .unwrap();
    {
        let served = Served::start(dir.path(), &["--config", config.to_str().unwrap()]);
        let stat = served.stat_json();
        assert_eq!(stat[0]["name"], "big", "{stat}");
        assert_eq!(stat[0]["unit_size"], 65536, "{stat}");
        assert_eq!(stat[1]["unit_size"], 4096, "{stat}");
        served.stop();
    }
    for (args, why) in [
        (["--size", "1M", "--unit-size", "48K"], "power of two"),
        (["--size", "1M", "--unit-size", "2K"], "power of two"),
        (["--size", "1M", "--unit-size", "256K"], "power of two"),
        (
            ["--size", "16K", "--unit-size", "32K"],
            "larger than the device",
        ),
        (["--size", "1M", "--unit-size", "big"], "invalid size"),
    ] {
        let out = run(
            Command::new(ZRAMD)
                .arg("serve")
                .args(args)
                .arg("--unix")
                .arg(dir.path().join("x.sock"))
                .arg("--control")
                .arg(dir.path().join("x-control.sock")),
            LIMIT,
        );
        assert!(!out.ok, "{args:?} started");
        assert!(out.stderr.contains(why), "{args:?}: {}", out.stderr);
    }
}
