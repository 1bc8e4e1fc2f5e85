use super::*;
use zram::ZramConfig;

/// `idle` takes `all` or an age as the kernel's `kstrtoull(buf, 0, ...)` reads it, and
/// nothing around them.
#[test]
fn idle_reads_as_the_kernels() {
    let d = Device::new("zram0", ZramConfig::default());
    write(&d, "disksize", b"1M").unwrap();
    for ok in ["all", "all\n", "0x10", "010\n", "+5", "0"] {
        assert_eq!(write(&d, "idle", ok.as_bytes()), Ok(()), "{ok:?}");
    }
    for bad in [
        " 5", "5 ", " all", "all ", "all\n\n", "0x", "08", "-1", "1e3",
    ] {
        assert_eq!(
            write(&d, "idle", bad.as_bytes()),
            Err(libc::EINVAL),
            "{bad:?}"
        );
    }
}

/// A level is checked against the algorithm it is for when it is written, a dictionary
/// for an algorithm that takes none (lzo) is refused before its file is opened, and a
/// new `comp_algorithm` starts from its own defaults.
#[test]
fn algorithm_params_fit_their_algorithm() {
    let d = Device::new("zram0", ZramConfig::default());
    let level = |d: &Device| d.settings().params.level;
    for bad in [&b"algo=lz4 level=0\n"[..], b"algo=lz4 level=65538\n"] {
        assert_eq!(write(&d, "algorithm_params", bad), Err(libc::EINVAL));
    }
    write(&d, "algorithm_params", b"algo=lz4 level=8\n").unwrap();
    assert_eq!(level(&d), Some(8));
    write(&d, "comp_algorithm", b"lz4\n").unwrap();
    assert_eq!(level(&d), Some(8), "the same algorithm keeps its level");
    write(&d, "comp_algorithm", b"lz4hc\n").unwrap();
    assert_eq!(level(&d), None, "lz4's acceleration is no lz4hc level");
    assert_eq!(
        write(&d, "algorithm_params", b"level=13\n"),
        Err(libc::EINVAL)
    );
    write(&d, "algorithm_params", b"level=12\n").unwrap();
    write(&d, "comp_algorithm", b"lzo\n").unwrap();
    assert_eq!(
        write(&d, "algorithm_params", b"level=1\n"),
        Err(libc::EINVAL)
    );
    assert_eq!(
        write(&d, "algorithm_params", b"dict=/nonexistent/dict\n"),
        Err(libc::EINVAL),
        "lzo takes no dictionary: refused before the file is looked for (ENOENT)"
    );
    write(&d, "comp_algorithm", b"zstd\n").unwrap();
    write(&d, "algorithm_params", b"level=-5\n").unwrap();
    write(&d, "disksize", b"1M\n").unwrap();
    assert_eq!(d.zram().unwrap().params().level, Some(-5));
}

#[test]
fn attributes_behave_as_the_kernels() {
    let d = Device::new("zram0", ZramConfig::default());
    assert_eq!(read(&d, "initstate").unwrap(), "0\n");
    assert_eq!(read(&d, "disksize").unwrap(), "0\n");
    assert_eq!(
        read(&d, "comp_algorithm").unwrap(),
        "lzo-rle lzo [lz4] lz4hc zstd \n"
    );
    assert_eq!(read(&d, "reset"), Err(libc::EACCES));
    assert_eq!(write(&d, "mm_stat", b"1"), Err(libc::EACCES));
    assert_eq!(
        write(&d, "compact", b"1\n"),
        Err(libc::EINVAL),
        "compact needs an initialized device"
    );
    assert_eq!(write(&d, "comp_algorithm", b"deflate\n"), Err(libc::EINVAL));
    let long = [b'z'; 127];
    assert_eq!(write(&d, "comp_algorithm", &long), Err(libc::EINVAL));
    assert_eq!(write(&d, "comp_algorithm", &[b'z'; 128]), Err(libc::E2BIG));
    assert_eq!(
        write(&d, "comp_algorithm", &[&long[..], b"\n"].concat()),
        Err(libc::E2BIG)
    );
    let algo = format!("algo={} priority=1", "z".repeat(200));
    assert_eq!(
        write(&d, "recomp_algorithm", algo.as_bytes()),
        Err(libc::E2BIG)
    );
    write(&d, "comp_algorithm", b"zstd\n").unwrap();
    write(&d, "algorithm_params", b"algo=zstd level=5\n").unwrap();
    assert_eq!(
        write(&d, "algorithm_params", b"colour=blue\n"),
        Err(libc::EINVAL)
    );
    assert_eq!(write(&d, "disksize", b"0\n"), Err(libc::EINVAL));
    assert_eq!(write(&d, "disksize", b"lots\n"), Err(libc::EINVAL));
    write(&d, "disksize", b"1M\n").unwrap();
    assert_eq!(read(&d, "initstate").unwrap(), "1\n");
    assert_eq!(read(&d, "disksize").unwrap(), "1048576\n");
    assert_eq!(write(&d, "disksize", b"2M\n"), Err(libc::EBUSY));
    assert_eq!(write(&d, "comp_algorithm", b"lz4\n"), Err(libc::EBUSY));
    assert_eq!(d.zram().unwrap().params().level, Some(5));
    write(&d, "mem_limit", b"512K\n").unwrap();
    assert_eq!(write(&d, "mem_limit", b"x\n"), Err(libc::EINVAL));
    assert_eq!(write(&d, "mem_used_max", b"5\n"), Err(libc::EINVAL));
    write(&d, "mem_used_max", b"0\n").unwrap();
    write(&d, "compact", b"1\n").unwrap();
    let mm: Vec<u64> = read(&d, "mm_stat")
        .unwrap()
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(mm[3], 512 * 1024, "mem_limit shows in mm_stat");
    assert_eq!(
        read(&d, "io_stat").unwrap(),
        "       0        0 0        0\n"
    );
    assert_eq!(write(&d, "reset", b"0\n"), Err(libc::EINVAL));
    assert_eq!(write(&d, "reset", b"yes\n"), Err(libc::EINVAL));
    let opened = d.open().unwrap();
    assert_eq!(write(&d, "reset", b"1\n"), Err(libc::EBUSY));
    drop(opened);
    write(&d, "reset", b"1\n").unwrap();
    assert_eq!(read(&d, "initstate").unwrap(), "0\n");
    assert_eq!(read(&d, "nonsense"), Err(libc::ENOENT));
}

#[test]
fn unit_size_is_set_while_uninitialized() {
    let d = Device::new("zram0", ZramConfig::default());
    assert_eq!(read(&d, "unit_size").unwrap(), "4096\n");
    for bad in ["3K", "2K", "256K", "0", "lots", ""] {
        assert_eq!(
            write(&d, "unit_size", bad.as_bytes()),
            Err(libc::EINVAL),
            "{bad}"
        );
    }
    write(&d, "unit_size", b"32K\n").unwrap();
    assert_eq!(read(&d, "unit_size").unwrap(), "32768\n");
    // A unit larger than the disk: the disksize write is refused.
    assert_eq!(write(&d, "disksize", b"16K\n"), Err(libc::EINVAL));
    assert_eq!(read(&d, "initstate").unwrap(), "0\n");
    write(&d, "disksize", b"1M\n").unwrap();
    assert_eq!(d.zram().unwrap().unit_size(), 32 * 1024);
    assert_eq!(write(&d, "unit_size", b"64K\n"), Err(libc::EBUSY));
    assert_eq!(write(&d, "unit_size", b"5K\n"), Err(libc::EINVAL));
    assert_eq!(read(&d, "unit_size").unwrap(), "32768\n");
    // Data goes through the units.
    let opened = d.open().unwrap();
    opened.write(40_000, &[3u8; 5000]).unwrap();
    let mut back = [0u8; 5002];
    opened.read(39_999, &mut back).unwrap();
    assert_eq!((back[0], back[1], back[5000], back[5001]), (0, 3, 3, 0));
    drop(opened);
    write(&d, "reset", b"1\n").unwrap();
    write(&d, "unit_size", b"4K\n").unwrap();
    assert_eq!(read(&d, "unit_size").unwrap(), "4096\n");
}

/// The sizes and the errnos are the kernel's: each case was written to
/// `/sys/block/zramN/{mem_limit,disksize}` of a hot-added kernel 6.18 device and read
/// back from its `mm_stat` and `disksize`.
#[test]
fn sizes_parse_as_the_kernels_memparse() {
    let d = Device::new("zram0", ZramConfig::default());
    let limit = |d: &Device| d.zram().unwrap().mm_stat().mem_limit;
    for (bad, errno) in [
        (" 1M", libc::EINVAL),
        ("lots", libc::EINVAL),
        ("0", libc::EINVAL),
    ] {
        assert_eq!(write(&d, "disksize", bad.as_bytes()), Err(errno), "{bad:?}");
    }
    assert_eq!(
        write(&d, "disksize", b"16E"),
        Err(libc::EINVAL),
        "wraps to 0"
    );
    // The kernel's memparse stops at the `.` of `1.5G` (1 byte, one page) and ignores
    // what follows a suffix: the command line's `1.5G` and refused `1GB` do not apply here.
    for (text, size) in [
        ("0x100000", 1 << 20),
        ("010000", 4096),
        ("1Mxyz", 1 << 20),
        ("1.5G", 4096),
        ("1GiB", 1 << 30),
        ("1GB", 1 << 30),
    ] {
        write(&d, "disksize", text.as_bytes()).unwrap();
        assert_eq!(
            read(&d, "disksize").unwrap(),
            format!("{size}\n"),
            "{text:?}"
        );
        write(&d, "reset", b"1").unwrap();
    }
    write(&d, "disksize", b"1M").unwrap();
    // mm_stat shows the limit in whole pages, as the kernel's does.
    for (text, shown) in [
        ("0x10M", 16 << 20),
        ("010", 4096),
        ("1Kxyz", 4096),
        ("16E", 0),
        ("plenty", 0),
    ] {
        write(&d, "mem_limit", text.as_bytes()).unwrap();
        assert_eq!(limit(&d), shown, "{text:?}");
    }
    for bad in [" 1M", "-1", "lots", ""] {
        assert_eq!(
            write(&d, "mem_limit", bad.as_bytes()),
            Err(libc::EINVAL),
            "{bad:?}"
        );
    }
    write(&d, "unit_size", b"1M").unwrap_err();
    write(&d, "reset", b"1").unwrap();
    write(&d, "unit_size", b"0x2000 and more").unwrap();
    assert_eq!(read(&d, "unit_size").unwrap(), "8192\n");
}

/// `reset` and `mem_used_max` read numbers as the kernel's `kstrtou16`/`kstrtoul`;
/// `comp_algorithm` drops one newline; `compact` reads nothing. The errnos are the
/// kernel 6.18's, from the same writes to a hot-added device.
#[test]
fn numbers_parse_as_the_kernels_kstrto() {
    let d = Device::new("zram0", ZramConfig::default());
    for (text, want) in [
        ("70000", Err(libc::ERANGE)),
        ("65536", Err(libc::ERANGE)),
        ("99999999999999999999", Err(libc::ERANGE)),
        ("70000x", Err(libc::EINVAL)),
        (" 1", Err(libc::EINVAL)),
        ("1 ", Err(libc::EINVAL)),
        ("1\n\n", Err(libc::EINVAL)),
        ("0x1", Err(libc::EINVAL)),
        ("yes", Err(libc::EINVAL)),
        ("0", Err(libc::EINVAL)),
        ("", Err(libc::EINVAL)),
        ("65535\n", Ok(())),
        ("+1", Ok(())),
        ("1\0garbage", Ok(())),
    ] {
        assert_eq!(write(&d, "reset", text.as_bytes()), want, "reset {text:?}");
    }
    assert_eq!(kstrtoull(b"18446744073709551615\n", u64::MAX), Ok(u64::MAX));
    assert_eq!(
        kstrtoull(b"18446744073709551616", u64::MAX),
        Err(libc::ERANGE)
    );
    assert_eq!(write(&d, "comp_algorithm", b"zstd "), Err(libc::EINVAL));
    assert_eq!(write(&d, "comp_algorithm", b"zstd\n\n"), Err(libc::EINVAL));
    write(&d, "comp_algorithm", b"zstd\n").unwrap();
    write(&d, "disksize", b"1M").unwrap();
    write(&d, "compact", b"anything at all").unwrap();
    for bad in ["5", "0 ", "-0", "x"] {
        assert_eq!(write(&d, "mem_used_max", bad.as_bytes()), Err(libc::EINVAL));
    }
    write(&d, "mem_used_max", b"+0\n").unwrap();
}

/// Runs `write(dev, "algorithm_params", value)` on a thread and gives its answer; if it
/// has none after a minute (it is stuck), `unstick` runs and the test fails.
fn params_write(
    dev: &std::sync::Arc<Device>,
    value: &str,
    unstick: impl FnOnce(),
) -> Result<(), i32> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (d, v) = (std::sync::Arc::clone(dev), value.to_owned());
    std::thread::spawn(move || tx.send(write(&d, "algorithm_params", v.as_bytes())));
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(r) => r,
        Err(_) => {
            unstick();
            panic!("algorithm_params {value:?} is stuck");
        }
    }
}

#[test]
fn dictionaries_are_regular_files_of_bounded_size() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).display().to_string();
    let fifo = path("fifo");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    // Opening the FIFO's writing end lets a reader stuck in its open go on.
    let unstick = || {
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&fifo);
    };
    std::fs::write(path("empty"), b"").unwrap();
    std::fs::write(path("big"), vec![7u8; MAX_DICT_BYTES as usize + 1]).unwrap();
    std::fs::write(path("max"), vec![7u8; MAX_DICT_BYTES as usize]).unwrap();
    let words: Vec<u8> = b"zram keeps pages compressed. ".repeat(3000);
    std::fs::write(path("dict"), &words).unwrap();

    let d = std::sync::Arc::new(Device::new("zram0", ZramConfig::default()));
    write(&d, "comp_algorithm", b"zstd").unwrap();
    // Not a regular file: EINVAL, as the kernel's (which blocks on a FIFO first), and
    // at once: nothing waits for a FIFO's writer, nothing reads /dev/zero for ever.
    for (what, dict) in [
        ("a FIFO", fifo.clone()),
        ("/dev/zero", "/dev/zero".into()),
        ("a directory", dir.path().display().to_string()),
        ("a missing file", path("missing")),
        ("an empty file", path("empty")),
        ("a file over the limit", path("big")),
    ] {
        let value = format!("algo=zstd dict={dict}");
        assert_eq!(
            params_write(&d, &value, unstick),
            Err(libc::EINVAL),
            "{what}"
        );
    }
    assert!(d.settings().params.dictionary.is_none(), "nothing was kept");
    params_write(&d, &format!("algo=zstd dict={}", path("max")), unstick).unwrap();
    assert_eq!(
        d.settings().params.dictionary.map(|b| b.len()),
        Some(MAX_DICT_BYTES as usize)
    );
    params_write(
        &d,
        &format!("algo=zstd level=9 dict={}", path("dict")),
        unstick,
    )
    .unwrap();
    write(&d, "disksize", b"1M").unwrap();
    let dict = d.zram().unwrap().params().dictionary.clone();
    assert_eq!(dict.map(|b| b.len()), Some(words.len()));
    // Initialized: EBUSY before the file is touched (a FIFO would block, a missing file
    // would be EINVAL).
    for dict in [fifo.as_str(), "/dev/zero", &path("missing"), &path("dict")] {
        let value = format!("algo=zstd dict={dict}");
        assert_eq!(
            params_write(&d, &value, unstick),
            Err(libc::EBUSY),
            "{dict}"
        );
    }
    // The words are still checked first.
    assert_eq!(params_write(&d, "colour=blue", unstick), Err(libc::EINVAL));
}

/// `backing_compact` moves written-back objects out of sparse segments: `EINVAL` before
/// `disksize`, `ENODEV` without a backing file, then a pass that gives segments back.
#[test]
fn backing_compact_moves_objects_out_of_sparse_segments() {
    let d = Device::new("zram0", ZramConfig::default());
    assert_eq!(write(&d, "backing_compact", b"1"), Err(libc::EINVAL));
    assert_eq!(read(&d, "backing_compact"), Err(libc::EACCES));
    write(&d, "disksize", b"8M").unwrap();
    assert_eq!(write(&d, "backing_compact", b"1"), Err(libc::ENODEV));
    write(&d, "reset", b"1").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("backing");
    std::fs::File::create(&file).unwrap();
    write(&d, "backing_dev", file.as_os_str().as_encoded_bytes()).unwrap();
    write(&d, "disksize", b"8M").unwrap();
    let z = d.zram().unwrap();
    // 2048 incompressible pages (8 MiB of the file), then all but every 8th discarded.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for p in 0..2048u64 {
        let page: Vec<u8> = (0..4096)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        z.write(p * 4096, &page).unwrap();
    }
    write(&d, "writeback", b"huge").unwrap();
    for p in (0..2048u64).filter(|p| p % 8 != 0) {
        z.discard(p * 4096, 4096).unwrap();
    }
    let before = z.backing_stats().unwrap();
    write(&d, "backing_compact", b"anything").unwrap();
    let after = z.backing_stats().unwrap();
    assert_eq!(after.live_bytes, before.live_bytes);
    // Sealed segments 0-6 keep 32 pages each: 224 pages go to a new segment, and the seven
    // are free. The eighth was open (not sparse): it stays whole.
    assert_eq!(after.moved_bytes, 224 * 4096, "{after:?}");
    assert_eq!(after.file_bytes, (1 << 20) + 224 * 4096, "{after:?}");
    assert_eq!(
        (before.file_bytes, after.segments_punched),
        (8 << 20, 7),
        "{before:?}"
    );
}
