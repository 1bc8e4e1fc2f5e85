//! Seed 004 through a mounted FUSE tree: the same 1 MiB of text written through the disk
//! file at two offsets, `echo 1 > fold`, then `mm_stat`'s tenth field (`pages_folded`) is
//! above 0, `mem_used_total` went down, `fold_stat` counts the pass, and the disk reads
//! back the same bytes. Skipped, saying why, where FUSE cannot be mounted.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod have;
    pub mod mm_stat;
    pub mod mnt;
    pub mod prose;
    pub mod serve_tree;
}

use std::os::unix::fs::{FileExt as _, PermissionsExt as _};

use common::mm_stat::mm_stat;
use common::mnt::{errno_of, fuse_dirs};
use common::prose::prose;
use common::serve_tree::serve_tree;
use zram::ZramConfig;

#[test]
fn echo_1_to_fold_folds_duplicates_written_through_the_disk() {
    let Some((tmp, mnt, _detach)) = fuse_dirs("echo_1_to_fold_folds_duplicates") else {
        return;
    };
    let server = serve_tree(tmp.path(), &mnt, ZramConfig::default());
    let dev = mnt.join("zram0");
    for (name, mode) in [("fold", 0o200), ("dedup", 0o644), ("fold_stat", 0o444)] {
        let meta = std::fs::metadata(dev.join(name)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, mode, "{name}");
    }
    assert_eq!(std::fs::read_to_string(dev.join("dedup")).unwrap(), "0\n");
    assert_eq!(
        errno_of(std::fs::read(dev.join("fold"))),
        Some(libc::EACCES)
    );

    // 1 MiB of text, at 0 and again at 4 MiB.
    const MIB: u64 = 1 << 20;
    let text: Vec<u8> = (0..MIB / 4096).flat_map(prose).collect();
    let disk = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev.join("disk"))
        .unwrap();
    disk.write_all_at(&text, 0).unwrap();
    disk.write_all_at(&text, 4 * MIB).unwrap();
    disk.sync_all().unwrap();
    let before = mm_stat(&dev);
    assert_eq!(before.len(), 12, "the kernel's nine, pages_folded, ours");
    assert_eq!(before[0], 2 * MIB, "orig_data_size");
    assert_eq!(before[9], 0, "nothing folded yet");

    std::fs::write(dev.join("fold"), "1\n").unwrap();
    let after = mm_stat(&dev);
    assert!(after[9] > 0, "pages_folded: {before:?} -> {after:?}");
    assert!(
        after[2] < before[2],
        "mem_used_total: {} -> {}",
        before[2],
        after[2]
    );
    assert_eq!(after[0], 2 * MIB, "orig_data_size is the slots' data still");
    let stat = std::fs::read_to_string(dev.join("fold_stat")).unwrap();
    let stat: Vec<u64> = stat
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    assert_eq!(stat[0], 1, "one fold: {stat:?}");
    assert!(stat[1] > 0, "objects folded: {stat:?}");
    assert_eq!(stat[2], after[9], "fold_stat's pages_folded is mm_stat's");

    for at in [0, 4 * MIB] {
        let mut back = vec![0u8; text.len()];
        disk.read_exact_at(&mut back, at).unwrap();
        assert!(back == text, "the copy at {at} reads back the same");
    }
    let mut gap = vec![1u8; (3 * MIB) as usize];
    disk.read_exact_at(&mut gap, MIB).unwrap();
    assert!(
        gap.iter().all(|&b| b == 0),
        "what was never written is zeroes"
    );
    drop(disk);
    server.stop();
}
