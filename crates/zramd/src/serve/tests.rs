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
