//! The `allocator` setting through every front end: the attribute (listed like
//! `comp_algorithm`, taken before `disksize`, `EBUSY` after, `EINVAL` for an unknown name
//! or with `dedup` on), `zramd serve --allocator` with real NBD clients, the config file's
//! `allocator` key, `zramd stat --json`, and `fold`, refused on a device whose allocator
//! cannot share objects.
//!
//! A test whose tool is missing says so on stderr and returns; it never passes silently.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod cli;
    pub mod have;
    pub mod image;
    pub mod prose;
    pub mod run;
    #[expect(
        dead_code,
        reason = "these tests stop their servers cleanly and never kill one"
    )]
    pub mod served;
}

use std::process::Command;
use std::time::Duration;

use common::cli::{cli, cli_ok, scrape, serve};
use common::have::have;
use common::image::real_image;
use common::prose::prose;
use common::run::{run, run_ok};
use common::served::Served;
use zram::{Allocator, ZramConfig};
use zramd::device::Device;
use zramd::serve::{ConfigFile, DeviceSpec};
use zramd::sysfs::{attr, read, write};

const ZRAMD: &str = env!("CARGO_BIN_EXE_zramd");
const LIMIT: Duration = Duration::from_secs(60);

#[test]
fn the_attribute_is_a_setting_taken_before_disksize() {
    assert_eq!(attr("allocator").map(|a| a.mode), Some(0o644));
    let d = Device::new("zram0", ZramConfig::default());
    assert_eq!(
        read(&d, "allocator").unwrap(),
        "[zsmalloc] afmalloc zbud malloc\n"
    );
    for bad in ["", "\n", "slab", "zbud ", "ZBUD", "zbud\n\n"] {
        assert_eq!(
            write(&d, "allocator", bad.as_bytes()),
            Err(libc::EINVAL),
            "{bad:?}"
        );
    }
    assert_eq!(
        read(&d, "allocator").unwrap(),
        "[zsmalloc] afmalloc zbud malloc\n"
    );
    // dedup shares objects: only zsmalloc can, whichever is set first.
    write(&d, "dedup", b"1").unwrap();
    assert_eq!(write(&d, "allocator", b"afmalloc\n"), Err(libc::EINVAL));
    write(&d, "dedup", b"0").unwrap();
    for a in Allocator::ALL {
        write(&d, "allocator", format!("{a}\n").as_bytes()).unwrap();
        assert_eq!(d.settings().pool.allocator, a);
    }
    write(&d, "allocator", b"afmalloc").unwrap();
    assert_eq!(write(&d, "dedup", b"1\n"), Err(libc::EINVAL));
    assert_eq!(read(&d, "dedup").unwrap(), "0\n");

    // disksize: the device runs on it, and the setting is fixed.
    write(&d, "disksize", b"4M").unwrap();
    let z = d.zram().unwrap();
    assert_eq!(z.allocator(), Allocator::Afmalloc);
    for i in 0..64u64 {
        z.write(i * 4096, &prose(i)).unwrap();
    }
    let mut back = vec![0u8; 4096];
    z.read(5 * 4096, &mut back).unwrap();
    assert_eq!(back, prose(5));
    assert_eq!(write(&d, "allocator", b"zbud\n"), Err(libc::EBUSY));
    assert_eq!(
        read(&d, "allocator").unwrap(),
        "zsmalloc [afmalloc] zbud malloc\n"
    );
    // fold needs shared objects.
    assert_eq!(write(&d, "fold", b"1"), Err(libc::EOPNOTSUPP));
    // reset brings back the default allocator, as the kernel's brings back its default
    // algorithm.
    d.reset().unwrap();
    assert_eq!(d.settings().pool.allocator, Allocator::Zsmalloc);
    assert_eq!(
        read(&d, "allocator").unwrap(),
        "[zsmalloc] afmalloc zbud malloc\n"
    );
}

#[test]
fn config_files_take_the_allocator_key() {
    let file = ConfigFile::parse(
        "[[device]]\nname = \"a\"\nallocator = \"zbud\"\n[[device]]\nname = \"b\"\n",
    )
    .unwrap();
    assert_eq!(file.device[0].config.pool.allocator, Allocator::Zbud);
    assert_eq!(file.device[1].config.pool.allocator, Allocator::Zsmalloc);
    let e = ConfigFile::parse("[[device]]\nname = \"a\"\nallocator = \"slab\"\n").unwrap_err();
    assert!(format!("{e:#}").contains("slab"), "{e:#}");
    let e = ConfigFile::parse("[[device]]\nname = \"a\"\nallocator = \"zbud\"\ndedup = true\n")
        .and_then(|f| f.device[0].build().map(drop))
        .unwrap_err();
    assert!(format!("{e:#}").contains("dedup"), "{e:#}");
}

#[test]
fn stat_shows_it_and_fold_is_refused_where_objects_cannot_be_shared() {
    let dir = tempfile::tempdir().unwrap();
    let device = |name: &str, allocator| DeviceSpec {
        name: name.into(),
        size: "4M".parse().unwrap(),
        config: ZramConfig {
            pool: zram::PoolConfig {
                allocator,
                ..Default::default()
            },
            ..ZramConfig::default()
        },
        ..DeviceSpec::default()
    };
    let server = serve(
        dir.path(),
        vec![
            device("zram0", Allocator::Zsmalloc),
            device("zram1", Allocator::Afmalloc),
        ],
    );
    let control = server.control_path.clone();
    for name in ["zram0", "zram1"] {
        let z = server.registry.device(name).unwrap().zram().unwrap();
        for i in 0..32u64 {
            z.write(i * 4096, &prose(i % 4)).unwrap();
        }
    }
    let stat: serde_json::Value =
        serde_json::from_str(&cli_ok(&control, &["stat", "--json"])).unwrap();
    assert_eq!(stat[0]["allocator"], "zsmalloc", "{stat}");
    assert_eq!(stat[1]["allocator"], "afmalloc", "{stat}");
    let metrics = scrape(server.metrics_addr.unwrap());
    for (dev, allocator) in [("zram0", "zsmalloc"), ("zram1", "afmalloc")] {
        let line = format!(
            "zramd_device_info{{device=\"{dev}\",algorithm=\"lz4\",allocator=\"{allocator}\"}} 1"
        );
        assert!(metrics.contains(&line), "{line} not in\n{metrics}");
    }
    let table = cli_ok(&control, &["stat", "-o", "NAME,ALGORITHM,ALLOCATOR"]);
    assert_eq!(
        table,
        "NAME  ALGORITHM ALLOCATOR\nzram0 lz4       zsmalloc\nzram1 lz4       afmalloc\n"
    );
    let r = cli(&control, &["fold", "zram1"]);
    assert!(!r.ok, "{}", r.stdout);
    assert!(
        r.stderr.contains("zram1") && r.stderr.contains("does not support folding"),
        "{}",
        r.stderr
    );
    // Every device: those that can fold do.
    let out = cli_ok(&control, &["fold"]);
    assert!(out.contains("zram0:") && !out.contains("zram1"), "{out}");
    server.stop();
}

#[test]
fn serve_takes_allocator_and_clients_read_back_what_they_wrote() {
    let r = run(
        Command::new(ZRAMD).args(["serve", "--allocator", "slab"]),
        LIMIT,
    );
    assert!(!r.ok);
    assert!(
        r.stderr.contains("unknown allocator \"slab\""),
        "{}",
        r.stderr
    );
    if !have(
        "serve_takes_allocator_and_clients_read_back_what_they_wrote",
        "nbdcopy",
    ) {
        return;
    }
    for allocator in ["afmalloc", "zbud", "malloc"] {
        let dir = tempfile::tempdir().unwrap();
        let served = Served::start(dir.path(), &["--size", "8M", "--allocator", allocator]);
        assert_eq!(served.stat_json()[0]["allocator"], allocator);
        let src = dir.path().join("in.img");
        let img = real_image(&src, 8 << 20);
        run_ok(
            Command::new("nbdcopy").arg(&src).arg(served.uri("zram0")),
            LIMIT,
        );
        let back = dir.path().join("out.img");
        run_ok(
            Command::new("nbdcopy").arg(served.uri("zram0")).arg(&back),
            LIMIT,
        );
        assert!(
            std::fs::read(&back).unwrap() == img,
            "{allocator}: image differs"
        );
        served.stop();
    }
}
