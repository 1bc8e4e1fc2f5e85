//! The post-processing attribute files over a device (no FUSE): `backing_dev`, `idle`,
//! `writeback` and its limits, `bd_stat`, `recomp_algorithm`, `algorithm_params` for
//! secondary algorithms, `recompress`, `block_state`, `policy` and `policy_stat`: their
//! texts, their errnos, and recompression end to end. Writeback to a real file is in
//! `writeback_front.rs`.

mod common {
    pub mod prose;
}

use common::prose::prose;
use zram::ZramConfig;
use zramd::device::Device;
use zramd::sysfs::{read, write};

fn device() -> Device {
    Device::new("zram0", ZramConfig::default())
}

/// Every one of `values` written to `attr` is refused with `errno`.
fn refused(d: &Device, attr: &str, errno: i32, values: &[&str]) {
    for bad in values {
        assert_eq!(write(d, attr, bad.as_bytes()), Err(errno), "{attr} {bad:?}");
    }
}

fn mm_field(d: &Device, i: usize) -> u64 {
    read(d, "mm_stat")
        .unwrap()
        .split_whitespace()
        .nth(i)
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn backing_dev_is_a_setting_taken_while_uninitialized() {
    let d = device();
    assert_eq!(read(&d, "backing_dev").unwrap(), "none\n");
    refused(
        &d,
        "backing_dev",
        libc::EINVAL,
        &["", "\n", "relative/file", "file\n"],
    );
    write(&d, "backing_dev", b"/var/tmp/zram-backing\n").unwrap();
    assert_eq!(read(&d, "backing_dev").unwrap(), "/var/tmp/zram-backing\n");
    assert_eq!(
        d.settings().backing_dev.as_deref(),
        Some(std::path::Path::new("/var/tmp/zram-backing"))
    );
    write(&d, "backing_dev", b"none\n").unwrap();
    assert_eq!(read(&d, "backing_dev").unwrap(), "none\n");
    assert_eq!(d.settings().backing_dev, None);
    write(&d, "disksize", b"1M").unwrap();
    assert_eq!(
        write(&d, "backing_dev", b"/var/tmp/zram-backing"),
        Err(libc::EBUSY)
    );
    assert_eq!(
        write(&d, "backing_dev", b"relative"),
        Err(libc::EBUSY),
        "EBUSY first"
    );
    assert_eq!(read(&d, "backing_dev").unwrap(), "none\n");
}

#[test]
fn idle_and_writeback_answer_as_the_kernels() {
    let d = device();
    assert_eq!(
        write(&d, "idle", b"all"),
        Err(libc::EINVAL),
        "uninitialized"
    );
    assert_eq!(
        write(&d, "writeback", b"idle"),
        Err(libc::EINVAL),
        "uninitialized"
    );
    assert_eq!(read(&d, "idle"), Err(libc::EACCES));
    assert_eq!(read(&d, "writeback"), Err(libc::EACCES));
    assert_eq!(read(&d, "bd_stat").unwrap(), "       0        0        0\n");
    assert_eq!(read(&d, "block_state").unwrap(), "");
    write(&d, "disksize", b"1M").unwrap();
    let z = d.zram().unwrap();
    z.write(0, &prose(1)).unwrap();
    z.write(4096, &[0u8; 4096]).unwrap();
    z.write(8192, &prose(2)).unwrap();
    refused(
        &d,
        "idle",
        libc::EINVAL,
        &["", "soon", "-1", "1.5", "all please"],
    );
    let flags = |d: &Device| -> Vec<String> {
        read(d, "block_state")
            .unwrap()
            .lines()
            .map(|l| l.split_whitespace().last().unwrap().to_owned())
            .collect()
    };
    assert_eq!(flags(&d), ["......", "s.....", "......"]);
    write(&d, "idle", b"all\n").unwrap();
    assert_eq!(
        flags(&d),
        ["...i..", "s.....", "...i.."],
        "same-filled is skipped"
    );
    // An age: nothing has been idle for an hour yet, then everything has.
    z.read(0, &mut [0u8; 4096]).unwrap();
    write(&d, "idle", b"3600").unwrap();
    assert_eq!(flags(&d)[0], "......");
    z.skew_clock(7200);
    write(&d, "idle", b"3600\n").unwrap();
    assert_eq!(flags(&d)[0], "...i..");
    let state = read(&d, "block_state").unwrap();
    let first: Vec<&str> = state.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(first.len(), 3, "index, access time, flags: {state}");
    assert_eq!(first[0], "0");
    // No backing device: the kernel checks it before the words.
    refused(
        &d,
        "writeback",
        libc::ENODEV,
        &["idle", "huge", "page_index=0", "cold", ""],
    );
    assert_eq!(read(&d, "bd_stat").unwrap(), "       0        0        0\n");
}

#[test]
fn writeback_limits_and_batch_size() {
    let d = device();
    assert_eq!(read(&d, "writeback_limit_enable").unwrap(), "0\n");
    assert_eq!(read(&d, "writeback_limit").unwrap(), "0\n");
    assert_eq!(read(&d, "writeback_batch_size").unwrap(), "32\n");
    assert_eq!(
        write(&d, "writeback_limit", b"10"),
        Err(libc::EINVAL),
        "uninitialized"
    );
    refused(
        &d,
        "writeback_batch_size",
        libc::EINVAL,
        &["0", "x", "", "-1", "4294967296"],
    );
    write(&d, "writeback_batch_size", b"8\n").unwrap();
    assert_eq!(read(&d, "writeback_batch_size").unwrap(), "8\n");
    write(&d, "disksize", b"1M").unwrap();
    let z = d.zram().unwrap();
    assert_eq!(
        z.writeback_batch_size(),
        8,
        "the setting reaches the device"
    );
    write(&d, "writeback_batch_size", b"4").unwrap();
    assert_eq!(
        (
            z.writeback_batch_size(),
            read(&d, "writeback_batch_size").unwrap().as_str()
        ),
        (4, "4\n")
    );
    for attr in ["writeback_limit", "writeback_limit_enable"] {
        refused(&d, attr, libc::EINVAL, &["x", "", "-1", "1 2"]);
    }
    write(&d, "writeback_limit_enable", b"1\n").unwrap();
    assert!(z.writeback_limit_enabled());
    assert_eq!(read(&d, "writeback_limit_enable").unwrap(), "1\n");
    write(&d, "writeback_limit", b"100\n").unwrap();
    assert_eq!(read(&d, "writeback_limit").unwrap(), "100\n");
    assert_eq!(z.writeback_limit(), 100);
    write(&d, "writeback_limit_enable", b"0").unwrap();
    assert_eq!(read(&d, "writeback_limit_enable").unwrap(), "0\n");
}

#[test]
fn recomp_algorithm_and_its_params_are_settings() {
    let d = device();
    assert_eq!(read(&d, "recomp_algorithm").unwrap(), "");
    refused(
        &d,
        "recomp_algorithm",
        libc::EINVAL,
        &[
            "",
            "algo=gzip",
            "priority=1",
            "algo=zstd priority=0",
            "algo=zstd priority=4",
            "algo=zstd priority=x",
            "algo=zstd colour=blue",
            "algo= priority=1",
        ],
    );
    write(&d, "recomp_algorithm", b"algo=zstd\n").unwrap();
    assert_eq!(
        read(&d, "recomp_algorithm").unwrap(),
        "#1: lzo-rle lzo lz4 lz4hc [zstd] \n"
    );
    write(&d, "recomp_algorithm", b"algo=lzo priority=3").unwrap();
    write(&d, "recomp_algorithm", b"algo=lz4 priority=2").unwrap();
    write(&d, "recomp_algorithm", b"algo=lzo-rle priority=2").unwrap();
    assert_eq!(
        read(&d, "recomp_algorithm").unwrap(),
        "#1: lzo-rle lzo lz4 lz4hc [zstd] \n#2: [lzo-rle] lzo lz4 lz4hc zstd \n#3: lzo-rle [lzo] lz4 lz4hc zstd \n"
    );
    // algorithm_params of a secondary algorithm: by priority, or by name.
    write(&d, "algorithm_params", b"priority=1 level=9").unwrap();
    assert_eq!(d.settings().recomp_algorithm[0].params.level, Some(9));
    write(&d, "algorithm_params", b"algo=zstd level=12\n").unwrap();
    assert_eq!(d.settings().recomp_algorithm[0].params.level, Some(12));
    assert_eq!(d.settings().params.level, None, "the primary's are its own");
    write(&d, "algorithm_params", b"priority=0 level=1").unwrap();
    assert_eq!(d.settings().params.level, Some(1));
    refused(
        &d,
        "algorithm_params",
        libc::EINVAL,
        &[
            "priority=4 level=1",
            "priority=-1 level=1",
            "algo=deflate level=1",
            "priority=1 algo=lzo level=1",
        ],
    );
    // Rewriting the same algorithm keeps its parameters; another one starts afresh.
    write(&d, "recomp_algorithm", b"algo=zstd priority=1").unwrap();
    assert_eq!(d.settings().recomp_algorithm[0].params.level, Some(12));
    write(&d, "recomp_algorithm", b"algo=lz4 priority=1").unwrap();
    assert_eq!(d.settings().recomp_algorithm[0].params.level, None);
    let d = device();
    assert_eq!(
        write(&d, "algorithm_params", b"priority=2 level=3"),
        Err(libc::EINVAL),
        "none set"
    );
    write(&d, "recomp_algorithm", b"algo=zstd priority=2 level=5").unwrap();
    write(&d, "disksize", b"1M").unwrap();
    assert_eq!(
        d.zram().unwrap().recomp_algorithms()[0].params.level,
        Some(5)
    );
    assert_eq!(
        write(&d, "recomp_algorithm", b"algo=lzo priority=1"),
        Err(libc::EBUSY)
    );
    assert_eq!(
        write(&d, "algorithm_params", b"priority=2 level=3"),
        Err(libc::EBUSY)
    );
    assert_eq!(
        write(&d, "algorithm_params", b"priority=3 level=3"),
        Err(libc::EBUSY)
    );
    assert_eq!(
        write(&d, "recomp_algorithm", b"algo=gzip"),
        Err(libc::EINVAL),
        "words first"
    );
    assert_eq!(
        read(&d, "recomp_algorithm").unwrap(),
        "#2: lzo-rle lzo lz4 lz4hc [zstd] \n"
    );
}

#[test]
fn recompress_end_to_end() {
    let d = device();
    assert_eq!(
        write(&d, "recompress", b""),
        Err(libc::EINVAL),
        "uninitialized"
    );
    write(&d, "recomp_algorithm", b"algo=zstd priority=1 level=19").unwrap();
    write(&d, "disksize", b"4M").unwrap();
    let z = d.zram().unwrap();
    let pages: Vec<Vec<u8>> = (0..64).map(prose).collect();
    for (i, p) in pages.iter().enumerate() {
        z.write(i as u64 * 4096, p).unwrap();
    }
    refused(
        &d,
        "recompress",
        libc::EINVAL,
        &[
            "type=all",
            "colour=blue",
            "priority=4",
            "threshold=x",
            "idle",
            "algo=gzip",
        ],
    );
    assert_eq!(
        write(&d, "recompress", b"priority=2"),
        Err(libc::EINVAL),
        "no such priority"
    );
    let before = mm_field(&d, 1);
    // Idle slots only: none are idle yet.
    write(&d, "recompress", b"type=idle").unwrap();
    assert_eq!(mm_field(&d, 1), before);
    write(&d, "idle", b"all").unwrap();
    write(&d, "recompress", b"type=idle max_pages=8\n").unwrap();
    let state = read(&d, "block_state").unwrap();
    let recompressed = state.lines().filter(|l| l.ends_with("r.")).count();
    assert!((1..=8).contains(&recompressed), "{state}");
    write(&d, "recompress", b"type=idle priority=1").unwrap();
    let after = mm_field(&d, 1);
    assert!(after < before, "compr_data_size {before} -> {after}");
    let state = read(&d, "block_state").unwrap();
    assert!(
        state.lines().filter(|l| l.contains('r')).count() > 8,
        "{state}"
    );
    for (i, p) in pages.iter().enumerate() {
        let mut back = vec![0u8; 4096];
        z.read(i as u64 * 4096, &mut back).unwrap();
        assert_eq!(&back, p, "page {i}");
    }
}

#[test]
fn policy_reads_and_takes_words() {
    let d = device();
    let default = zram::Policy::default().to_string();
    assert_eq!(read(&d, "policy").unwrap(), format!("{default}\n"));
    assert_eq!(
        read(&d, "policy_stat").unwrap(),
        "       0        0        0        0        0        0        0\nno round yet\n"
    );
    refused(
        &d,
        "policy",
        libc::EINVAL,
        &["cold=1", "interval=x", "enabled=2", "recompress_priority=4"],
    );
    assert_eq!(
        write(&d, "policy", b"run"),
        Err(libc::EINVAL),
        "uninitialized"
    );
    assert_eq!(write(&d, "policy", b"interval=5 run"), Err(libc::EINVAL));
    assert_eq!(
        d.settings().policy.interval,
        60,
        "a refused write changes nothing"
    );
    write(&d, "policy", b"interval=5\n").unwrap();
    assert_eq!(d.settings().policy.interval, 5);
    write(&d, "recomp_algorithm", b"algo=zstd level=19").unwrap();
    write(&d, "disksize", b"1M").unwrap();
    let z = d.zram().unwrap();
    assert_eq!(
        z.policy().interval,
        5,
        "the settings' policy reaches the device"
    );
    for i in 0..16 {
        z.write(i * 4096, &prose(i)).unwrap();
    }
    assert_eq!(
        write(&d, "policy", b"writeback_age=10"),
        Err(libc::ENODEV),
        "no backing"
    );
    assert_eq!(write(&d, "policy", b"min_age=x"), Err(libc::EINVAL));
    write(
        &d,
        "policy",
        b"recompress_age=0 min_age=0 recompress_priority=1",
    )
    .unwrap();
    assert!(
        read(&d, "policy")
            .unwrap()
            .contains("recompress_age=0 recompress_priority=1")
    );
    assert_eq!(z.policy().recompress_age, Some(0));
    assert_eq!(
        d.settings().policy.recompress_age,
        Some(0),
        "kept for the next start"
    );
    write(&d, "policy", b"run\n").unwrap();
    let stat = read(&d, "policy_stat").unwrap();
    let mut lines = stat.lines();
    let numbers: Vec<u64> = lines
        .next()
        .unwrap()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert_eq!(numbers.len(), 7, "{stat}");
    assert_eq!(numbers[0], 1, "one round: {stat}");
    assert!(
        numbers[1] > 0 && numbers[2] > 0,
        "recompressed and saved: {stat}"
    );
    assert!(lines.next().unwrap().contains("recompressed"), "{stat}");
    assert!(read(&d, "block_state").unwrap().contains('r'));
}
