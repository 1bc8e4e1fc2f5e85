//! `zramd fold [DEV] [--json]` through the control socket with the real binary: what the
//! pass did, per device; all initialized devices without DEV; the errors for an unknown or
//! uninitialized device; then the folding and deduplication figures in `zramd stat` (text
//! and JSON) and in the metrics.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod cli;
    pub mod prose;
    pub mod run;
}

use common::cli::{cli, cli_ok, scrape, serve};
use common::prose::prose;
use zram::ZramConfig;
use zramd::serve::DeviceSpec;

fn device(name: &str, dedup: bool) -> DeviceSpec {
    DeviceSpec {
        name: name.into(),
        size: "4M".parse().unwrap(),
        config: ZramConfig {
            dedup,
            ..ZramConfig::default()
        },
        ..DeviceSpec::default()
    }
}

#[test]
fn zramd_fold_runs_the_pass_and_stat_shows_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(
        dir.path(),
        vec![device("zram0", false), device("zram1", true)],
    );
    let control = server.control_path.clone();
    let z = server.registry.device("zram0").unwrap().zram().unwrap();
    const PAGES: u64 = 128;
    for copy in 0..2 {
        for i in 0..PAGES {
            z.write((copy * PAGES + i) * 4096, &prose(i)).unwrap();
        }
    }

    // One device, in words.
    let out = cli_ok(&control, &["fold", "zram0"]);
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words.first(), Some(&"zram0:"), "{out}");
    assert!(
        out.ends_with(" pages freed\n") && out.lines().count() == 1,
        "{out}"
    );
    let scanned: u64 = words[1].parse().unwrap();
    let folded: u64 = words[4].parse().unwrap();
    assert!(scanned >= PAGES && folded > 0, "{out}");
    let stats = z.fold_stats();
    assert_eq!((stats.folds, stats.objects_folded), (1, folded), "{out}");
    assert!(z.mm_stat().pages_folded > 0, "{out}");

    // All initialized devices, in JSON; an uninitialized one is left out.
    let r = cli(&control, &["reset", "zram1"]);
    assert!(r.ok, "{}", r.stderr);
    // Reset brought back the default (off), as the kernel's brings back its algorithm; the
    // setting is chosen again for the next disksize.
    let zram1 = server.registry.device("zram1").unwrap();
    assert!(!zram1.settings().dedup);
    zramd::sysfs::write(&zram1, "dedup", b"1").unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&cli_ok(&control, &["fold", "--json"])).unwrap();
    let list = json.as_array().expect("a list");
    assert_eq!(list.len(), 1, "{json}");
    assert_eq!(list[0]["device"], "zram0");
    for key in [
        "objects_scanned",
        "objects_folded",
        "bytes_folded",
        "pages_freed",
    ] {
        assert!(list[0][key].is_u64(), "{key} in {json}");
    }
    for (args, why) in [
        (&["fold", "zram9"][..], "no device named \"zram9\""),
        (&["fold", "zram1"], "zram1 is not initialized"),
    ] {
        let r = cli(&control, args);
        assert!(!r.ok, "{args:?} succeeded: {}", r.stdout);
        assert!(r.stderr.contains(why), "{args:?}: {}", r.stderr);
    }

    // zramd stat -v, text and JSON.
    let out = cli_ok(&control, &["stat", "-v"]);
    assert!(
        out.contains(&format!(
            "zram0: dedup off; 2 folds, {} objects folded, ",
            z.fold_stats().objects_folded
        )),
        "{out}"
    );
    // The uninitialized zram1 is left out of the table, as zramctl does, unless named.
    assert!(!out.contains("zram1"), "{out}");
    let out = cli_ok(&control, &["stat", "-v", "zram1"]);
    assert!(out.contains("zram1: dedup on; 0 folds"), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&cli_ok(&control, &["stat", "--json"])).unwrap();
    let f = &json[0]["fold"];
    assert_eq!(f["folds"], 2, "{json}");
    assert_eq!(f["dedup"], false);
    assert_eq!(f["pages_folded"], json[0]["mm_stat_fields"][9]);
    for key in [
        "objects_folded",
        "dedup_pages",
        "dedup_bytes",
        "shared_objects",
        "index_bytes",
    ] {
        assert!(f[key].is_u64(), "{key} in {f}");
    }
    assert_eq!(json[1]["fold"]["dedup"], true, "the setting, uninitialized");

    // The metrics.
    let s = z.fold_stats();
    let body = scrape(server.metrics_addr.unwrap());
    for want in [
        "# TYPE zramd_folds counter".to_owned(),
        "zramd_folds_total{device=\"zram0\"} 2".into(),
        "zramd_dedup{device=\"zram0\"} 0".into(),
        "zramd_dedup{device=\"zram1\"} 1".into(),
        format!(
            "zramd_objects_folded_total{{device=\"zram0\"}} {}",
            s.objects_folded
        ),
        format!(
            "zramd_pages_folded_total{{device=\"zram0\"}} {}",
            z.mm_stat().pages_folded
        ),
        format!(
            "zramd_shared_objects{{device=\"zram0\"}} {}",
            s.shared_objects
        ),
        format!(
            "zramd_fold_index_bytes{{device=\"zram0\"}} {}",
            s.index_bytes
        ),
        "zramd_dedup_pages_total{device=\"zram0\"} 0".into(),
        "zramd_dedup_bytes_total{device=\"zram0\"} 0".into(),
    ] {
        assert!(body.contains(&want), "{want} missing:\n{body}");
    }
    server.stop();
}
