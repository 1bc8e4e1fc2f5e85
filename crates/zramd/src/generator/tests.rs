use super::*;

const MIB: u64 = 1 << 20;

fn one(text: &str, ram: f64) -> DeviceSpec {
    let g = parse(text, ram).unwrap();
    assert_eq!(g.devices.len(), 1, "{text}");
    g.devices.into_iter().next().unwrap()
}

fn err(text: &str) -> String {
    format!("{:#}", parse(text, 8192.0).unwrap_err())
}

#[test]
fn sections_are_devices() {
    let g = parse(
        "# comment\n; another\n[zram0]\nzram-size = 512\n\n[zram1]\nzram-size = ram / 8\n\
         compression-algorithm = zstd\n",
        8192.0,
    )
    .unwrap();
    let names: Vec<&str> = g.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["zram0", "zram1"]);
    assert_eq!(g.devices[0].size, Size(512 * MIB));
    assert_eq!(g.devices[0].config, ZramConfig::default());
    assert_eq!(g.devices[1].size, Size(1024 * MIB));
    assert_eq!(g.devices[1].config.algorithm, Algorithm::Zstd);
    assert!(g.warnings.is_empty(), "{:?}", g.warnings);
}

#[test]
fn default_and_old_sizes() {
    assert_eq!(one("[zram0]\n", 2000.0).size, Size(1000 * MIB));
    assert_eq!(one("[zram0]\n", 16384.0).size, Size(4096 * MIB));
    let old = "[zram0]\nzram-fraction = 0.25\nmax-zram-size = 1024\n";
    assert_eq!(one(old, 2048.0).size, Size(512 * MIB));
    assert_eq!(one(old, 8192.0).size, Size(1024 * MIB));
    let no_max = "[zram0]\nzram-fraction = 0.25\nmax-zram-size = none\n";
    assert_eq!(one(no_max, 65536.0).size, Size(16384 * MIB));
    // zram-size wins over the old pair; sizes are whole pages.
    let both = "[zram0]\nzram-fraction = 0.25\nzram-size = 1.0001\n";
    assert_eq!(one(both, 2048.0).size, Size(MIB));
}

#[test]
fn algorithms_and_recompression() {
    let d = one(
        "[zram0]\ncompression-algorithm = lz4 zstd(level=9) lzo-rle (type=idle)\n",
        1024.0,
    );
    assert_eq!(d.config.algorithm, Algorithm::Lz4);
    let r = &d.config.recomp_algorithm;
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].priority, r[0].algorithm), (1, Algorithm::Zstd));
    assert_eq!(r[0].params.level, Some(9));
    assert_eq!((r[1].priority, r[1].algorithm), (2, Algorithm::LzoRle));
    let d = one(
        "[zram0]\ncompression-algorithm = zstd(level=3)\nrecompression-algorithm = lzo\n",
        1024.0,
    );
    assert_eq!(d.config.algorithm, Algorithm::Zstd);
    assert_eq!(d.config.params.level, Some(3));
    let r = &d.config.recomp_algorithm;
    assert_eq!(
        (r.len(), r[0].priority, r[0].algorithm),
        (1, 1, Algorithm::Lzo)
    );
    // A dictionary, read when the file is parsed, for any algorithm that takes one.
    let dir = tempfile::tempdir().unwrap();
    let dict = dir.path().join("dict");
    std::fs::write(&dict, b"zram stores pages compressed ".repeat(40)).unwrap();
    let d = one(
        &format!(
            "[zram0]\ncompression-algorithm = lz4(dict={0}, level=2) zstd(dict={0})\n",
            dict.display()
        ),
        1024.0,
    );
    assert_eq!(d.config.params.level, Some(2));
    assert_eq!(d.config.params.dictionary.as_ref().unwrap().len(), 29 * 40);
    assert!(d.config.recomp_algorithm[0].params.dictionary.is_some());
    // The generator's global recompression parameters are ignored, with a warning.
    let g = parse("[zram0]\ncompression-algorithm = lz4 (type=idle)\n", 1.0e3).unwrap();
    assert!(g.warnings[0].contains("type=idle"), "{:?}", g.warnings);
}

#[test]
fn backing_file_and_limits() {
    let d = one(
        "[zram3]\nwriteback-device = /var/lib/zramd/zram3.back\nzram-resident-limit = ram / 8\n",
        4096.0,
    );
    assert_eq!(d.name, "zram3");
    assert_eq!(
        d.config.backing_dev.as_deref(),
        Some(Path::new("/var/lib/zramd/zram3.back"))
    );
    assert_eq!(d.config.mem_limit, Size(512 * MIB));
    // host-memory-limit: no device on a machine with more memory; zram-size 0: none.
    let g = parse(
        "[zram0]\nhost-memory-limit = 4096\n[zram1]\nhost-memory-limit = none\n\
         [zram2]\nzram-size = 0\n",
        8192.0,
    )
    .unwrap();
    let names: Vec<&str> = g.devices.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["zram1"]);
    assert_eq!(g.warnings.len(), 2, "{:?}", g.warnings);
}

#[test]
fn swap_and_mount_keys_are_ignored_with_a_warning() {
    let g = parse(
        "[zram0]\nswap-priority = 100\nfs-type = ext4\nmount-point = /tmp\noptions =\n",
        1024.0,
    )
    .unwrap();
    assert_eq!(g.devices.len(), 1);
    assert_eq!(g.warnings.len(), 4, "{:?}", g.warnings);
    assert!(g.warnings.iter().any(|w| w.contains("swap-priority")));
}

#[test]
fn bad_input_is_one_clear_line() {
    for (text, why) in [
        ("[swap]\n", "unknown section [swap]"),
        ("[zram]\n", "unknown section [zram]"),
        ("[zramx]\n", "unknown section [zramx]"),
        ("[zram0\n", "not a [section] line"),
        ("zram-size = 1\n", "outside a [zramN] section"),
        ("set!x = echo 1\n[zram0]\n", "set! directives"),
        ("[zram0]\nzram-size\n", "not key = value"),
        (
            "[zram0]\ncolour = blue\n",
            "[zram0] line 2: unknown key \"colour\"",
        ),
        ("[zram0]\nzram-size = ram / 0\n", "division by zero"),
        ("[zram0]\nzram-size = ram * (2\n", "zram-size = ram * (2"),
        ("[zram0]\nzram-size = swap\n", "unknown name \"swap\""),
        ("[zram0]\nzram-size = 1 - ram\n", "negative"),
        (
            "[zram0]\ncompression-algorithm = 842\n",
            "unknown compression algorithm \"842\"",
        ),
        (
            "[zram0]\ncompression-algorithm = zstd(level=x)\n",
            "level \"x\"",
        ),
        (
            "[zram0]\ncompression-algorithm = zstd(dict=/nonexistent/a)\n",
            "dict=/nonexistent/a: No such file",
        ),
        (
            "[zram0]\ncompression-algorithm = zstd(colour=blue)\n",
            "\"colour=blue\" is not supported",
        ),
        (
            "[zram0]\ncompression-algorithm = zstd(level=1\n",
            "without its ')'",
        ),
        (
            "[zram0]\ncompression-algorithm = lz4 zstd lzo lzo-rle zstd\n",
            "priority 4",
        ),
        (
            "[zram0]\ncompression-algorithm = lz4 zstd\nrecompression-algorithm = lzo\n",
            "recompression-algorithm given beside",
        ),
        ("[zram0]\nhost-memory-limit = lots\n", "host-memory-limit"),
        (
            "[zram0]\nzram-resident-limit = 1/0\n",
            "zram-resident-limit = 1/0: division by zero",
        ),
        (
            "[zram0]\nzram-fraction = 0.5) * (1000\n",
            "zram-fraction = 0.5) * (1000: not a number",
        ),
        (
            "[zram0]\nmax-zram-size = ram\n",
            "max-zram-size = ram: not a number",
        ),
        ("[zram0]\nzram-fraction = -1\n", "not a number of 0 or more"),
        ("[zram0]\nzram-size = 99999999999999999\n", "is too large"),
    ] {
        let e = err(text);
        assert!(e.contains(why), "{text:?}: {e}");
        assert!(!e.contains('\n'), "{text:?}: {e}");
    }
}

#[test]
fn the_machines_memory() {
    let ram = ram_mib().unwrap();
    assert!(ram > 1.0, "{ram}");
}
