//! The post-processing attribute files through a mounted FUSE tree: their modes, `idle`,
//! `recompress`, `block_state` longer than a page read whole and at offsets, `bd_stat`,
//! `policy` and `policy_stat`, the errnos; and `zramd serve`'s options reaching the tree.
//! Tests that cannot run here print why and return.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod have;
    pub mod mm_stat;
    pub mod mnt;
    pub mod prose;
    #[expect(
        dead_code,
        reason = "only the server's own CLI runs here, through Served"
    )]
    pub mod run;
    pub mod serve_tree;
    #[expect(
        dead_code,
        reason = "these tests reach the server through its tree and CLI, not NBD"
    )]
    pub mod served;
}

use common::prose::prose;
use std::io::Read as _;
use std::os::unix::fs::{FileExt as _, PermissionsExt as _};
use std::path::Path;

use common::mm_stat::mm_stat;
use common::mnt::{errno_of, fuse_dirs};
use common::serve_tree::serve_tree;
use common::served::Served;
use zram::ZramConfig;

/// `mm_stat`'s second field.
fn compr_data_size(dev: &Path) -> u64 {
    mm_stat(dev)[1]
}

#[test]
fn post_processing_through_the_tree() {
    let Some((tmp, mnt, _detach)) = fuse_dirs("post_processing_through_the_tree") else {
        return;
    };
    let server = serve_tree(
        tmp.path(),
        &mnt,
        ZramConfig {
            recomp_algorithm: vec!["algo=zstd priority=1 level=19".parse().unwrap()],
            ..ZramConfig::default()
        },
    );
    let dev = mnt.join("zram0");
    let read = |name: &str| std::fs::read_to_string(dev.join(name));
    let write = |name: &str, value: &str| std::fs::write(dev.join(name), value);
    for (name, mode) in [
        ("backing_dev", 0o644),
        ("idle", 0o200),
        ("writeback", 0o200),
        ("writeback_limit_enable", 0o644),
        ("writeback_limit", 0o644),
        ("writeback_batch_size", 0o644),
        ("bd_stat", 0o444),
        ("recomp_algorithm", 0o644),
        ("recompress", 0o200),
        ("block_state", 0o444),
        ("policy", 0o644),
        ("policy_stat", 0o444),
    ] {
        let meta = std::fs::metadata(dev.join(name)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, mode, "{name}");
    }

    const PAGES: u64 = 768;
    let data: Vec<u8> = (0..PAGES).flat_map(prose).collect();
    std::fs::OpenOptions::new()
        .write(true)
        .open(dev.join("disk"))
        .unwrap()
        .write_all_at(&data, 0)
        .unwrap();
    assert_eq!(read("bd_stat").unwrap(), "       0        0        0\n");
    assert_eq!(
        read("recomp_algorithm").unwrap(),
        "#1: lzo-rle lzo lz4 lz4hc [zstd] \n"
    );
    write("idle", "all\n").unwrap();

    // block_state: many pages long, whole however it is read.
    let state = read("block_state").unwrap();
    assert_eq!(state.lines().count(), PAGES as usize, "{state}");
    assert!(state.len() > 4 * 4096, "{} bytes", state.len());
    assert!(state.lines().all(|l| l.ends_with("...i..")), "{state}");
    let mut pieces = Vec::new();
    let mut f = std::fs::File::open(dev.join("block_state")).unwrap();
    let mut buf = [0u8; 1000];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        pieces.extend_from_slice(&buf[..n]);
    }
    assert_eq!(
        String::from_utf8(pieces).unwrap(),
        state,
        "read 1000 bytes at a time"
    );
    let fresh = std::fs::File::open(dev.join("block_state")).unwrap();
    let mut tail = vec![0u8; 500];
    let n = fresh.read_at(&mut tail, 10_000).unwrap();
    assert_eq!(
        &tail[..n],
        &state.as_bytes()[10_000..10_000 + n],
        "first read at an offset"
    );
    assert!(n > 0);

    // Recompression through the tree.
    let before = compr_data_size(&dev);
    write("recompress", "type=idle\n").unwrap();
    let after = compr_data_size(&dev);
    assert!(after < before, "compr_data_size {before} -> {after}");
    let state = read("block_state").unwrap();
    assert!(
        state.lines().filter(|l| l.contains('r')).count() > 100,
        "{state}"
    );
    let mut back = vec![0u8; data.len()];
    std::fs::File::open(dev.join("disk"))
        .unwrap()
        .read_exact(&mut back)
        .unwrap();
    assert!(back == data, "the data reads back after recompression");

    // The kernel's errnos.
    for (name, value, errno) in [
        ("writeback", "idle", libc::ENODEV),
        ("idle", "soon", libc::EINVAL),
        ("recompress", "type=all", libc::EINVAL),
        ("backing_dev", "/var/tmp/zram-backing", libc::EBUSY),
        ("recomp_algorithm", "algo=lzo priority=2", libc::EBUSY),
        ("algorithm_params", "priority=1 level=3", libc::EBUSY),
        ("writeback_batch_size", "0", libc::EINVAL),
        ("policy", "cold=1", libc::EINVAL),
        ("bd_stat", "1", libc::EACCES),
    ] {
        assert_eq!(
            errno_of(write(name, value)),
            Some(errno),
            "{name} {value:?}"
        );
    }
    assert_eq!(errno_of(read("idle")), Some(libc::EACCES));

    // The policy.
    assert_eq!(
        read("policy").unwrap(),
        format!("{}\n", zram::Policy::default())
    );
    write("policy", "interval=7\n").unwrap();
    assert!(read("policy").unwrap().contains(" interval=7 "));
    assert!(read("policy_stat").unwrap().ends_with("no round yet\n"));
    write("policy", "recompress_age=0 min_age=0 run").unwrap();
    let stat = read("policy_stat").unwrap();
    assert_eq!(stat.split_whitespace().next(), Some("1"), "{stat}");
    server.stop();
}

#[test]
fn serve_options_reach_the_tree() {
    let Some((tmp, mnt, _detach)) = fuse_dirs("serve_options_reach_the_tree") else {
        return;
    };
    let served = Served::start(
        tmp.path(),
        &[
            "--size",
            "8M",
            "--recomp-algorithm",
            "algo=zstd priority=2",
            "--writeback-batch-size",
            "7",
            "--fuse",
            mnt.to_str().unwrap(),
        ],
    );
    let dev = mnt.join("zram0");
    let read = |name: &str| std::fs::read_to_string(dev.join(name)).unwrap();
    assert_eq!(
        read("recomp_algorithm"),
        "#2: lzo-rle lzo lz4 lz4hc [zstd] \n"
    );
    assert_eq!(read("writeback_batch_size"), "7\n");
    assert_eq!(read("backing_dev"), "none\n");
    let r = served.cli(&[
        "policy",
        "zram0",
        "recompress_age=60",
        "recompress_priority=2",
    ]);
    assert!(r.ok, "{}", r.stderr);
    assert!(r.stdout.contains("recompress_priority=2"), "{}", r.stdout);
    assert!(read("policy").contains("recompress_age=60 recompress_priority=2"));
    let r = served.cli(&["policy", "zram0", "recompress_priority=1"]);
    assert!(!r.ok && r.stderr.contains("priority"), "{}", r.stderr);
    served.stop();
}
