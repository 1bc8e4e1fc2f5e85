//! `bench locking --quick` end to end (seed 001's experiment, one tiny fs_mark run per
//! configuration): as root with FUSE, loop devices and mkfs.ext4, its report has a row per
//! locking mode with files/s above zero, in the Markdown and the CSV. Structure only: no
//! speed is asserted.

use std::path::Path;

use lab::bench::locking::{Args, run};
use zram::Locking;

/// Why the bench cannot run here, if it cannot.
fn missing() -> Option<String> {
    if !lab::kernel::is_root() {
        return Some("not root (loop devices and mount need it)".into());
    }
    if !Path::new("/dev/fuse").exists() {
        return Some("no /dev/fuse".into());
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for tool in ["losetup", "mkfs.ext4", "mount", "fstrim"] {
        if !std::env::split_paths(&path).any(|d| d.join(tool).is_file()) {
            return Some(format!("{tool} is not installed"));
        }
    }
    None
}

#[test]
fn quick_locking_bench_has_a_row_per_mode() {
    if let Some(why) = missing() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let report = run(&Args {
        quick: true,
        ..Args::default()
    })
    .unwrap();
    let markdown = report.markdown();
    let csv = report.csv();
    for locking in Locking::ALL {
        let config = report
            .configs
            .iter()
            .find(|c| c.locking == Some(locking))
            .unwrap_or_else(|| panic!("no row for {locking}: {report:?}"));
        assert_eq!(config.files_per_s.len(), 1, "{config:?}");
        assert!(config.files_per_s.iter().all(|&r| r > 0.0), "{config:?}");
        assert!(config.builds.is_empty(), "--quick builds nothing");
        assert!(
            markdown.contains(&format!("| {} | ", config.name)),
            "{markdown}"
        );
        assert!(
            csv.contains(&format!("fs_mark,{},files_per_s,1,", config.name)),
            "{csv}"
        );
    }
    // The kernel's zram is there unless the report says why not.
    let kernel = report.configs.iter().any(|c| c.locking.is_none());
    assert!(
        kernel
            || report
                .notes
                .iter()
                .any(|n| n.starts_with("kernel zram: skipped")),
        "{report:?}"
    );
}

#[test]
fn nonsense_settings_are_a_clear_error() {
    let err = run(&Args {
        runs: 0,
        ..Args::default()
    })
    .unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("at least 1"), "{text}");
}
