//! `zramd compact --backing [DEV]` through the control socket with the real binary: written-back
//! objects move out of the backing file's sparse segments, the file's extent shrinks and the
//! data reads back whole; a named device without a backing file is an error, all devices
//! leave such a device out; `zramd stat -v` and the metrics show the bytes moved.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod cli;
    pub mod run;
}

use common::cli::{cli, cli_ok, scrape, serve};
use zram::ZramConfig;
use zramd::serve::DeviceSpec;

const PAGES: u64 = 2048;

/// Page `p`: incompressible, so written back raw, a page of the file each.
fn page(p: u64) -> Vec<u8> {
    let mut state = (p + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..4096)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

#[test]
fn compact_backing_moves_objects_and_gives_segments_back() {
    let dir = tempfile::tempdir().unwrap();
    let backing = dir.path().join("backing");
    std::fs::File::create(&backing).unwrap();
    let spec = |name: &str, backing_dev| DeviceSpec {
        name: name.into(),
        size: "8M".parse().unwrap(),
        config: ZramConfig {
            backing_dev,
            ..ZramConfig::default()
        },
        ..DeviceSpec::default()
    };
    let server = serve(
        dir.path(),
        vec![spec("zram0", Some(backing)), spec("zram1", None)],
    );
    let control = server.control_path.clone();
    let z = server.registry.device("zram0").unwrap().zram().unwrap();
    for p in 0..PAGES {
        z.write(p * 4096, &page(p)).unwrap();
    }
    let out = cli_ok(&control, &["writeback", "zram0", "huge"]);
    assert!(out.contains("2048"), "{out}");
    // Every page but each 8th goes: sealed segments keep 32 of their 256 pages.
    for p in (0..PAGES).filter(|p| p % 8 != 0) {
        z.discard(p * 4096, 4096).unwrap();
    }
    let before = z.backing_stats().unwrap();

    let out = cli_ok(&control, &["compact", "--backing", "zram0"]);
    assert_eq!(
        out.lines().next(),
        Some(
            "zram0: backing file: 224 objects (896K, 224 slots) moved out of 7 sparse \
             segments (0 of them changed from outside, still reading EIO), 0 unreadable left \
             (0 segments kept whole)"
        ),
        "{out}"
    );
    assert!(out.ends_with(" pages freed\n"), "{out}");
    let after = z.backing_stats().unwrap();
    assert_eq!(after.moved_bytes, 224 * 4096);
    assert_eq!(after.live_bytes, before.live_bytes);
    assert!(
        after.file_bytes < before.file_bytes / 4,
        "{before:?} -> {after:?}"
    );
    for p in (0..PAGES).step_by(8) {
        let mut out = vec![0; 4096];
        z.read(p * 4096, &mut out).unwrap();
        assert!(out == page(p), "page {p} read back wrong bytes");
    }

    // A named device without a backing file is an error; all devices leave it out.
    let r = cli(&control, &["compact", "--backing", "zram1"]);
    assert!(!r.ok, "{}", r.stdout);
    assert!(r.stderr.contains("zram1"), "{}", r.stderr);
    let out = cli_ok(&control, &["compact", "--backing"]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("zram0: backing file: "), "{out}");
    // Without --backing, memory only.
    let out = cli_ok(&control, &["compact"]);
    assert_eq!(out.lines().count(), 1, "{out}");

    // The figures (the second pass moved what the first one's new segment sealed).
    let moved = z.backing_stats().unwrap().moved_bytes;
    assert!(moved > after.moved_bytes);
    let out = cli_ok(&control, &["stat", "-v", "zram0"]);
    let shown = format!("  moved {}  ", zramd::human::size(moved));
    assert!(out.contains(&shown), "{out}");
    let body = scrape(server.metrics_addr.unwrap());
    assert!(
        body.contains(&format!(
            "zramd_backing_moved_bytes_total{{device=\"zram0\"}} {moved}"
        )),
        "{body}"
    );
    server.stop();
}
