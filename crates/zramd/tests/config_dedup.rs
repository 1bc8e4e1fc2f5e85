//! `dedup` from a config file's `[[device]]` table and from `zramd serve --dedup` reaches
//! the device: its `dedup` attribute reads 1 (0 by default); and `--dedup` is a device
//! option, refused next to `--config` as the others are.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    #[expect(dead_code, reason = "only `run`: the command must fail")]
    pub mod run;
}

use std::process::Command;
use std::time::Duration;

use clap::Parser as _;
use common::run::run;
use zramd::serve::{ConfigFile, DeviceSpec};
use zramd::sysfs::read;

#[test]
fn dedup_from_a_config_file_or_the_command_line_reaches_the_device() {
    let c = ConfigFile::parse(
        "[[device]]\nname = \"a\"\nsize = \"1M\"\ndedup = true\n\
         [[device]]\nname = \"b\"\nsize = \"1M\"\n",
    )
    .unwrap();
    let a = c.device[0].build().unwrap();
    assert_eq!(read(&a, "dedup").unwrap(), "1\n");
    assert!(a.zram().unwrap().dedup());
    let b = c.device[1].build().unwrap();
    assert_eq!(read(&b, "dedup").unwrap(), "0\n", "off by default");
    let err = format!(
        "{:#}",
        ConfigFile::parse("[[device]]\nname = \"a\"\ndedup = \"lots\"\n").unwrap_err()
    );
    assert!(err.contains("lots") || err.contains("bool"), "{err}");

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        device: DeviceSpec,
    }
    let spec = Cli::try_parse_from(["serve", "--size", "1M", "--dedup"])
        .unwrap()
        .device;
    let d = spec.build().unwrap();
    assert_eq!(read(&d, "dedup").unwrap(), "1\n");
    let spec = Cli::try_parse_from(["serve", "--size", "1M"])
        .unwrap()
        .device;
    assert_eq!(read(&spec.build().unwrap(), "dedup").unwrap(), "0\n");

    // The binary: a device option does not go with --config.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("zramd.toml");
    std::fs::write(&config, "[[device]]\nname = \"a\"\nsize = \"1M\"\n").unwrap();
    let r = run(
        Command::new(env!("CARGO_BIN_EXE_zramd"))
            .args(["serve", "--dedup", "--config"])
            .arg(&config),
        Duration::from_secs(30),
    );
    assert!(!r.ok, "{}", r.stdout);
    assert!(r.stderr.contains("--dedup"), "{}", r.stderr);
}
