//! `zramd serve`'s settings: config file keys, server settings, device options.

use super::*;
use crate::human::Timeout;
use zram::Header;

fn header_of(spec: &DeviceSpec) -> anyhow::Result<Header> {
    let dev = spec.build()?;
    let zram = dev.zram().context("initialized")?;
    Ok(zram
        .pool()
        .as_zsmalloc()
        .context("zsmalloc")?
        .classes()
        .header())
}

#[test]
fn object_header_setting() {
    let mut spec = DeviceSpec {
        size: Size(1 << 20),
        ..DeviceSpec::default()
    };
    assert_eq!(header_of(&spec).unwrap(), Header::Omitted);
    spec.config.pool.header = Header::Handle;
    assert_eq!(header_of(&spec).unwrap(), Header::Handle);
    let err =
        ConfigFile::parse("[[device]]\nname = \"a\"\nobject_header = \"inline\"\n").unwrap_err();
    let err = format!("{err:#}");
    assert!(err.contains("inline") && err.contains("omitted"), "{err}");
}

#[test]
fn server_settings_are_top_level_keys() {
    let c = ConfigFile::parse(
        "max_connections = 8\nmax_handshakes = 2\nhandshake_timeout = \"5s\"\n\
         idle_timeout = 0\nio_timeout = 90\nmax_in_flight = \"64M\"\n\
         socket_mode = \"0660\"\nsocket_group = \"disk\"\nswap_safe = true\n\
         [[device]]\nname = \"a\"\n",
    )
    .unwrap();
    let nbd = &c.settings.nbd;
    assert_eq!((nbd.max_connections, nbd.max_handshakes), (8, 2));
    assert_eq!(nbd.handshake_timeout, Timeout::secs(5));
    assert_eq!(nbd.idle_timeout.limit(), None);
    assert_eq!(nbd.io_timeout, Timeout::secs(90));
    assert_eq!(nbd.max_in_flight, Size(64 << 20));
    assert_eq!(
        nbd.max_request_bytes,
        ServerConfig::DEFAULT.max_request_bytes
    );
    assert_eq!(c.settings.sockets.socket_mode, crate::listen::Mode(0o660));
    assert_eq!(c.settings.sockets.socket_group.as_deref(), Some("disk"));
    assert!(c.settings.swap_safe);
    // What a file leaves out is the default, as on the command line.
    let d = ConfigFile::parse("[[device]]\nname = \"a\"\n").unwrap();
    assert_eq!(d.settings, ServerSettings::default());
    for (bad, why) in [
        ("colour = 1\n", "unknown setting \"colour\""),
        ("max_request_bytes = 1\n", "unknown setting"),
        ("socket_mode = \"0999\"\n", "invalid socket mode"),
        ("idle_timeout = \"soon\"\n", "invalid timeout"),
    ] {
        let text = format!("{bad}[[device]]\nname = \"a\"\n");
        let err = format!("{:#}", ConfigFile::parse(&text).unwrap_err());
        assert!(err.contains(why), "{bad:?}: {err}");
    }
}

#[test]
fn config_file_keys_are_the_settings() {
    let c = ConfigFile::parse(
        "[[device]]\nname = \"a\"\nsize = \"64M\"\nalgorithm = \"zstd\"\nlevel = 5\n\
         chain_size = 4\ngeometry = \"seed\"\nlocking = \"pool\"\nunit_size = \"32K\"\nread_only = true\n\
         [[device]]\nname = \"b\"\n",
    )
    .unwrap();
    let a = &c.device[0];
    assert_eq!(a.size, Size(64 << 20));
    assert_eq!(a.config.algorithm, zram::Algorithm::Zstd);
    assert_eq!(a.config.params.level, Some(5));
    assert_eq!(a.config.pool.chain_size, 4);
    assert_eq!(a.config.pool.geometry, zram::Geometry::Seed);
    assert_eq!(a.config.pool.locking, zram::Locking::Pool);
    assert_eq!(a.config.unit_size, Size(32 << 10));
    assert!(a.read_only);
    // One default everywhere: what a table leaves out is the device's default.
    let b = &c.device[1];
    assert_eq!(b.config, ZramConfig::default());
    assert_eq!(b.size, DEFAULT_DISKSIZE);
    for (bad, why) in [
        (
            "[[device]]\nname = \"a\"\ncolour = 1\n",
            "unknown setting \"colour\"",
        ),
        (
            "[[device]]\nname = \"a\"\nsize = \"lots\"\n",
            "invalid size",
        ),
        (
            "[[device]]\nname = \"a\"\n[[device]]\nname = \"a\"\n",
            "used twice",
        ),
        ("listen = []\n", "no [[device]]"),
        ("[[device]]\nsize = \"1G\"\n", "name"),
    ] {
        let err = format!("{:#}", ConfigFile::parse(bad).unwrap_err());
        assert!(err.contains(why), "{bad:?}: {err}");
    }
}

/// `chain_size = 0` (config file) and `--chain-size 0` (command line) are an invalid
/// chain size, not a lack of memory.
#[test]
fn chain_size_zero_is_an_invalid_chain_size() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        device: DeviceSpec,
    }
    let from_file = ConfigFile::parse("[[device]]\nname = \"a\"\nchain_size = 0\n")
        .unwrap()
        .device
        .remove(0);
    let from_args = <Cli as clap::Parser>::try_parse_from(["serve", "--chain-size", "0"])
        .unwrap()
        .device;
    for spec in [from_file, from_args] {
        assert_eq!(spec.config.pool.chain_size, 0);
        let err = format!("{:#}", spec.build().unwrap_err());
        assert!(
            err.contains("chain size 0") && !err.contains("memory"),
            "{err}"
        );
    }
}

#[test]
fn device_names_a_front_end_cannot_serve_are_refused() {
    let named = |name: &str| DeviceSpec {
        name: name.to_owned(),
        ..DeviceSpec::default()
    };
    for bad in [
        String::new(),
        ".".into(),
        "..".into(),
        "a/b".into(),
        "a\0b".into(),
        "two\nlines".into(),
        "tab\there".into(),
        "x".repeat(MAX_NAME + 1),
    ] {
        let err = named(&bad).check().unwrap_err().to_string();
        assert!(err.contains("is not a valid name"), "{bad:?}: {err}");
    }
    for good in ["zram0", "my-disk.1", "..a", "ü", &"x".repeat(MAX_NAME)] {
        named(good).check().unwrap();
    }
    let zero = DeviceSpec {
        size: Size(0),
        ..DeviceSpec::default()
    };
    assert!(zero.check().unwrap_err().to_string().contains("size"));
}

#[test]
fn unknown_keys_of_a_recomp_algorithm_are_refused() {
    let config = |entry: &str| {
        ConfigFile::parse(&format!(
            "[[device]]\nname = \"a\"\nrecomp_algorithm = [{{ {entry} }}]\n"
        ))
    };
    config("priority = 1, algorithm = \"zstd\", level = 5").unwrap();
    for (entry, key) in [
        ("priority = 1, algorithm = \"zstd\", levle = 5", "levle"),
        (
            "priority = 1, algorithm = \"zstd\", dictionary = \"d\"",
            "dictionary",
        ),
    ] {
        let err = format!("{:#}", config(entry).unwrap_err());
        assert!(err.contains(&format!("unknown setting {key:?}")), "{err}");
    }
}

#[test]
fn a_config_file_is_read_up_to_a_bound() {
    let err = format!(
        "{:#}",
        ConfigFile::load(Path::new("/dev/zero")).unwrap_err()
    );
    assert!(err.contains("longer than 16 MiB"), "{err}");
}

#[test]
fn no_backing_file_is_an_image_or_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("disk.img");
    std::fs::write(&image, [7u8; 8192]).unwrap();
    let config = dir.path().join("zramd.toml");
    let text = format!(
        "[[device]]\nname = \"a\"\nsize = \"1M\"\nimage = {:?}\n\
         [[device]]\nname = \"b\"\nsize = \"1M\"\nbacking_dev = {:?}\n",
        image.display().to_string(),
        image.display().to_string(),
    );
    std::fs::write(&config, &text).unwrap();
    let specs = ConfigFile::load(&config).unwrap().device;
    let err = check_devices(&specs).unwrap_err().to_string();
    assert!(err.contains("is device a's image"), "{err}");
    // Nothing was made, so nothing was discarded.
    assert_eq!(std::fs::read(&image).unwrap(), [7u8; 8192]);

    let own = format!(
        "[[device]]\nname = \"a\"\nbacking_dev = {:?}\n",
        config.display().to_string()
    );
    std::fs::write(&config, &own).unwrap();
    let err = format!("{:#}", ConfigFile::load(&config).unwrap_err());
    assert!(err.contains("is the config file"), "{err}");
    assert_eq!(std::fs::read_to_string(&config).unwrap(), own);

    // A bad device later in the list stops the start before an earlier one is made.
    let backing = dir.path().join("b.img");
    std::fs::write(&backing, [9u8; 4096]).unwrap();
    let mut specs = ConfigFile::parse(&format!(
        "[[device]]\nname = \"a\"\nsize = \"1M\"\nbacking_dev = {:?}\n\
         [[device]]\nname = \"..\"\nsize = \"1M\"\n",
        backing.display().to_string()
    ))
    .unwrap()
    .device;
    let err = Server::start(&ServeOptions {
        devices: std::mem::take(&mut specs),
        unix: vec![dir.path().join("nbd.sock")],
        control: Some(dir.path().join("control.sock")),
        ..ServeOptions::default()
    })
    .expect_err("refused");
    assert!(err.to_string().contains("is not a valid name"), "{err}");
    assert_eq!(std::fs::read(&backing).unwrap(), [9u8; 4096]);
}

#[test]
fn a_missing_backing_file_is_named_and_its_cause_told_once() {
    let spec = DeviceSpec {
        config: ZramConfig {
            backing_dev: Some("/no/such/dir/backing.img".into()),
            ..ZramConfig::default()
        },
        ..DeviceSpec::default()
    };
    let err = format!("{:#}", spec.build().unwrap_err());
    assert!(err.contains("/no/such/dir/backing.img"), "{err}");
    assert_eq!(err.matches("No such file").count(), 1, "{err}");
}

#[test]
fn server_limits_of_zero_are_refused() {
    check_settings(&ServerSettings::default()).unwrap();
    for key in ["max_connections", "max_handshakes"] {
        let mut settings = ServerSettings::default();
        match key {
            "max_connections" => settings.nbd.max_connections = 0,
            _ => settings.nbd.max_handshakes = 0,
        }
        let err = check_settings(&settings).unwrap_err().to_string();
        assert!(err.contains(&format!("{key} = 0")), "{err}");
    }
}
