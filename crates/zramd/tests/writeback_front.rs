//! Writeback to a real backing file through the front ends: the attribute files over FUSE
//! (`idle all`, `writeback idle`, `bd_stat`, data read back whole, `writeback_limit`), the
//! control socket (`writeback`, a policy round writing back), and `backing_dev` on a
//! missing path failing `disksize` with `ENOENT`. Needs the file backing store
//! (`zram::backing::FileBacking`). Tests that cannot run here print why and return.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod have;
    pub mod mnt;
    pub mod prose;
    pub mod serve_tree;
}

use common::prose::prose;
use std::io::Read as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;

use common::mnt::{errno_of, fuse_dirs};
use common::serve_tree::serve_tree;
use zram::ZramConfig;
use zramd::control::{self, Request};
use zramd::device::Device;
use zramd::serve::Server;

fn bd_stat(dev: &Path) -> [u64; 3] {
    let text = std::fs::read_to_string(dev.join("bd_stat")).unwrap();
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|f| f.parse().unwrap())
        .collect();
    [v[0], v[1], v[2]]
}

/// A server with `zram0` (16 MiB, writing back to `backing`) and its tree at `mnt`.
fn start(dir: &Path, mnt: &Path, backing: &Path) -> Server {
    serve_tree(
        dir,
        mnt,
        ZramConfig {
            backing_dev: Some(backing.to_owned()),
            recomp_algorithm: vec!["algo=zstd priority=1".parse().unwrap()],
            ..ZramConfig::default()
        },
    )
}

#[test]
fn writeback_through_the_tree_reads_back_whole() {
    let Some((tmp, mnt, _detach)) = fuse_dirs("writeback_through_the_tree_reads_back_whole") else {
        return;
    };
    let backing = tmp.path().join("backing");
    std::fs::write(&backing, b"old contents are discarded").unwrap();
    let server = start(tmp.path(), &mnt, &backing);
    let dev = mnt.join("zram0");
    let write = |name: &str, value: &str| std::fs::write(dev.join(name), value);
    assert_eq!(
        std::fs::read_to_string(dev.join("backing_dev")).unwrap(),
        format!("{}\n", backing.display())
    );

    const PAGES: u64 = 256;
    let mut data: Vec<u8> = (0..PAGES).flat_map(prose).collect();
    // Some same-filled pages, which writeback skips.
    data[4096 * 10..4096 * 12].fill(0);
    let disk = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(dev.join("disk"))
        .unwrap();
    disk.write_all_at(&data, 0).unwrap();
    assert_eq!(bd_stat(&dev), [0, 0, 0]);
    for bad in ["cold", "page_index=", "type=all", "idle huge"] {
        assert_eq!(
            errno_of(write("writeback", bad)),
            Some(libc::EINVAL),
            "{bad:?}"
        );
    }
    write("writeback", "idle\n").unwrap();
    assert_eq!(bd_stat(&dev), [0, 0, 0], "nothing is idle yet");
    write("idle", "all\n").unwrap();
    write("writeback", "idle\n").unwrap();
    let written = PAGES - 2;
    assert_eq!(bd_stat(&dev), [written, 0, written]);
    let state = std::fs::read_to_string(dev.join("block_state")).unwrap();
    assert_eq!(
        state.lines().filter(|l| l.contains('w')).count() as u64,
        written
    );
    // Recompression leaves written-back slots alone.
    write("recompress", "type=idle").unwrap();
    assert_eq!(bd_stat(&dev), [written, 0, written]);

    let mut back = vec![0u8; data.len()];
    std::fs::File::open(dev.join("disk"))
        .unwrap()
        .read_exact(&mut back)
        .unwrap();
    assert!(back == data, "the data reads back whole from the file");
    let [count, reads, writes] = bd_stat(&dev);
    assert_eq!((count, writes), (written, written));
    assert!(reads > 0, "read back from the file");

    // The figures: stat and metrics show the file.
    let stats = server.registry.stats();
    let backing_figures = stats[0].backing.expect("backing figures");
    assert!(backing_figures.file_bytes > 0 && backing_figures.live_bytes > 0);
    assert_eq!(stats[0].post.bd_writes, written);
    let metrics = zramd::metrics::render(&server.registry);
    assert!(
        metrics.contains(&format!(
            "zramd_bd_writes_total{{device=\"zram0\"}} {written}"
        )),
        "{metrics}"
    );

    // writeback_limit: two pages, then EIO.
    disk.write_all_at(&data[..4096 * 8], 0).unwrap();
    write("writeback_limit_enable", "1").unwrap();
    write("writeback_limit", "2").unwrap();
    write("idle", "all").unwrap();
    assert_eq!(errno_of(write("writeback", "idle")), Some(libc::EIO));
    assert_eq!(bd_stat(&dev)[2], written + 2);
    assert_eq!(
        std::fs::read_to_string(dev.join("writeback_limit")).unwrap(),
        "0\n"
    );
    write("writeback_limit_enable", "0").unwrap();

    // The control socket: writeback, then a policy round with nothing left to write.
    let r = control::handle(
        &server.registry,
        &Request::Writeback {
            device: "zram0".into(),
            args: "type=idle page_indexes=0-7".into(),
        },
    );
    assert!(r.ok, "{r:?}");
    assert_eq!(r.written_back.unwrap().pages, 6);
    disk.write_all_at(&data[..4096 * 4], 0).unwrap();
    let r = control::handle(
        &server.registry,
        &Request::Policy {
            device: "zram0".into(),
            words: "writeback_age=0 min_age=0 run".into(),
        },
    );
    assert!(r.ok, "{r:?}");
    let policy = r.policy.unwrap().stats;
    assert_eq!(
        (policy.rounds, policy.written_back_pages),
        (1, 4),
        "{policy:?}"
    );
    drop(disk);
    let mut back = vec![0u8; data.len()];
    std::fs::File::open(dev.join("disk"))
        .unwrap()
        .read_exact(&mut back)
        .unwrap();
    assert!(back == data, "the data reads back whole after every pass");
    server.stop();
}

#[test]
fn backing_dev_on_a_missing_path_fails_disksize_with_enoent() {
    use zramd::sysfs::{read, write};
    let d = Device::new("zram0", ZramConfig::default());
    write(&d, "backing_dev", b"/nonexistent/zramd/backing\n").unwrap();
    assert_eq!(write(&d, "disksize", b"1M"), Err(libc::ENOENT));
    assert_eq!(read(&d, "initstate").unwrap(), "0\n");
    // A file that exists works.
    let file = tempfile::NamedTempFile::new().unwrap();
    write(&d, "backing_dev", file.path().to_str().unwrap().as_bytes()).unwrap();
    write(&d, "disksize", b"1M").unwrap();
    assert_eq!(read(&d, "initstate").unwrap(), "1\n");
    let z = d.zram().unwrap();
    z.write(0, &prose(1)).unwrap();
    write(&d, "idle", b"all").unwrap();
    write(&d, "writeback", b"page_index=0").unwrap();
    assert_eq!(read(&d, "bd_stat").unwrap(), "       1        0        1\n");
    let mut back = vec![0u8; 4096];
    z.read(0, &mut back).unwrap();
    assert_eq!(back, prose(1));
}

/// A device whose backing file is its own `disk` in the tree fails `disksize` (the disk is
/// not open before the device is made: `ENXIO`) and the tree goes on answering. Before, the
/// open of the backing file waited on a lookup in the tree that waited on the device's lock,
/// which the open's own thread held: `disksize` never answered, every later lookup in the
/// device's folder hung unkillably, and the server could not stop.
#[test]
fn its_own_disk_as_backing_file_is_refused_not_a_deadlock() {
    let Some((tmp, mnt, _detach)) =
        fuse_dirs("its_own_disk_as_backing_file_is_refused_not_a_deadlock")
    else {
        return;
    };
    let server = serve_tree(tmp.path(), &mnt, ZramConfig::default());
    let dev = mnt.join("zram0");
    std::fs::write(dev.join("reset"), "1").unwrap();
    let disk = dev.join("disk");
    std::fs::write(dev.join("backing_dev"), disk.to_str().unwrap()).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let disksize = dev.join("disksize");
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::write(disksize, "16M"));
    });
    let answer = rx
        .recv_timeout(std::time::Duration::from_secs(30))
        .expect("disksize answered within 30 s");
    assert_eq!(errno_of(answer), Some(libc::ENXIO));
    assert_eq!(
        std::fs::read_to_string(dev.join("initstate")).unwrap(),
        "0\n"
    );
    // The tree still answers, and the device can be made with a real backing file.
    let backing = tmp.path().join("backing");
    std::fs::write(&backing, b"").unwrap();
    std::fs::write(dev.join("backing_dev"), backing.to_str().unwrap()).unwrap();
    std::fs::write(dev.join("disksize"), "16M").unwrap();
    assert_eq!(
        std::fs::read_to_string(dev.join("initstate")).unwrap(),
        "1\n"
    );
    server.stop();
}
