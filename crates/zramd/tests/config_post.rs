//! The post-processing settings from a config file's `[[device]]` tables and from `zramd
//! serve`'s options: `backing_dev`, `recomp_algorithm`, `writeback_batch_size`,
//! `readback_readahead` and a `[device.policy]` table, which refuses unknown keys.

use clap::Parser as _;
use zram::{Algorithm, Size};
use zramd::serve::{ConfigFile, DeviceSpec};

#[test]
fn a_config_file_takes_every_post_processing_setting() {
    let c = ConfigFile::parse(
        "[[device]]\nname = \"a\"\nsize = \"64M\"\nbacking_dev = \"/var/tmp/zram-a\"\n\
         writeback_batch_size = 8\nreadback_readahead = false\n\
         recomp_algorithm = [{ priority = 1, algorithm = \"zstd\", level = 9 }, \
         { priority = 2, algorithm = \"lzo\" }]\n\
         [device.policy]\nenabled = true\ninterval = 30\nrecompress_age = 600\n\
         writeback_age = 7200\nwriteback_watermark = \"512M\"\nwriteback_day = \"2G\"\n\
         [[device]]\nname = \"b\"\n",
    )
    .unwrap();
    let a = &c.device[0].config;
    assert_eq!(
        a.backing_dev.as_deref(),
        Some(std::path::Path::new("/var/tmp/zram-a"))
    );
    assert_eq!(a.writeback_batch_size, 8);
    assert!(!a.readback_readahead);
    assert_eq!(a.recomp_algorithm.len(), 2);
    assert_eq!(
        (
            a.recomp_algorithm[0].priority,
            a.recomp_algorithm[0].algorithm
        ),
        (1, Algorithm::Zstd)
    );
    assert_eq!(a.recomp_algorithm[0].params.level, Some(9));
    assert_eq!(a.recomp_algorithm[1].algorithm, Algorithm::Lzo);
    assert!(a.policy.enabled);
    assert_eq!(a.policy.interval, 30);
    assert_eq!(a.policy.recompress_age, Some(600));
    assert_eq!(a.policy.writeback_age, Some(7200));
    assert_eq!(a.policy.writeback_watermark, Size(512 << 20));
    assert_eq!(a.policy.writeback_day, Size(2 << 30));
    let b = &c.device[1].config;
    assert_eq!(b.policy, zram::Policy::default());
    assert!(b.recomp_algorithm.is_empty() && b.backing_dev.is_none());
}

#[test]
fn unknown_or_bad_post_processing_keys_are_refused() {
    for (bad, why) in [
        (
            "[[device]]\nname = \"a\"\n[device.policy]\nwrtieback_age = 60\n",
            "wrtieback_age",
        ),
        (
            "[[device]]\nname = \"a\"\n[device.policy]\ninterval = \"soon\"\n",
            "soon",
        ),
        (
            "[[device]]\nname = \"a\"\nrecomp_algorithm = [{ priority = 1, algorithm = \"gzip\" }]\n",
            "gzip",
        ),
        (
            "[[device]]\nname = \"a\"\nrecomp_algorithm = [{ priority = 1, algo = \"zstd\" }]\n",
            "algo",
        ),
        (
            "[[device]]\nname = \"a\"\nwriteback_batch = 8\n",
            "writeback_batch",
        ),
    ] {
        let err = format!("{:#}", ConfigFile::parse(bad).unwrap_err());
        assert!(err.contains(why), "{bad:?}: {err}");
    }
    // A priority out of range or given twice parses, and the device refuses it.
    let c = ConfigFile::parse(
        "[[device]]\nname = \"a\"\nsize = \"1M\"\n\
         recomp_algorithm = [{ priority = 4, algorithm = \"zstd\" }]\n",
    )
    .unwrap();
    let err = format!("{:#}", c.device[0].build().unwrap_err());
    assert!(err.contains("priority 4"), "{err}");
}

#[test]
fn command_line_options_reach_the_device() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        device: DeviceSpec,
    }
    let spec = Cli::try_parse_from([
        "serve",
        "--size",
        "1M",
        "--recomp-algorithm",
        "algo=zstd priority=1 level=7",
        "--recomp-algorithm",
        "algo=lzo priority=3",
        "--backing-dev",
        "/var/tmp/zram-b",
        "--writeback-batch-size",
        "5",
        "--readback-readahead",
        "false",
    ])
    .unwrap()
    .device;
    let c = &spec.config;
    assert_eq!(c.recomp_algorithm.len(), 2);
    assert_eq!(c.recomp_algorithm[0].params.level, Some(7));
    assert_eq!(c.recomp_algorithm[1].priority, 3);
    assert_eq!(
        c.backing_dev.as_deref(),
        Some(std::path::Path::new("/var/tmp/zram-b"))
    );
    assert_eq!(c.writeback_batch_size, 5);
    assert!(!c.readback_readahead);
    // Without the backing file the device starts and has the rest.
    let spec = Cli::try_parse_from([
        "serve",
        "--size",
        "1M",
        "--recomp-algorithm",
        "algo=zstd priority=2",
        "--writeback-batch-size",
        "5",
    ])
    .unwrap()
    .device;
    let dev = spec.build().unwrap();
    let z = dev.zram().unwrap();
    assert_eq!(z.recomp_algorithms()[0].priority, 2);
    assert_eq!(z.writeback_batch_size(), 5);
    let bad = Cli::try_parse_from(["serve", "--recomp-algorithm", "algo=zstd priority=9"]);
    assert!(bad.is_err());
}
