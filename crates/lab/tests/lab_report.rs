//! `zramd-lab report --quick` (what `zramd lab --quick` runs), smoke-run once as root: the
//! report, its JSON, CSV files and PNG plots exist; the report has every seed's section and
//! a verdict line per table; every CSV parses with numbers in it; every PNG has a PNG header
//! and a nonzero size. Structure only: no figure is asserted. And bad arguments fail with a
//! clear error.

use std::path::Path;
use std::process::Command;

fn lab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_zramd-lab"))
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next().map(|u| u == "0"))
        .unwrap_or(false)
}

/// Checks a CSV: a header, at least one row, every row as wide as the header, and numbers.
fn check_csv(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("a header").split(',').collect();
    let mut rows = 0;
    let mut numbers = 0;
    for l in lines {
        let fields: Vec<&str> = l.split(',').collect();
        assert_eq!(fields.len(), header.len(), "{}: {l}", path.display());
        numbers += fields.iter().filter(|f| f.parse::<f64>().is_ok()).count();
        rows += 1;
    }
    assert!(rows > 0, "{}: no rows", path.display());
    assert!(numbers > 0, "{}: no numbers", path.display());
}

/// Checks a PNG: the signature, an IHDR chunk with a nonzero width and height.
fn check_png(path: &Path) {
    let bytes = std::fs::read(path).unwrap();
    assert!(
        bytes.len() > 100,
        "{}: {} bytes",
        path.display(),
        bytes.len()
    );
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n", "{}", path.display());
    assert_eq!(&bytes[12..16], b"IHDR", "{}", path.display());
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert!(
        width > 0 && height > 0,
        "{}: {width}x{height}",
        path.display()
    );
}

#[test]
fn quick_report_has_every_seed_and_its_files() {
    if !is_root() {
        eprintln!("SKIPPED: zramd-lab report --quick needs root (loop devices, mount)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = lab()
        .args(["report", "--quick", "--out"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for line in stderr.lines().filter(|l| l.starts_with("SKIPPED")) {
        eprintln!("{line}");
    }
    let md = std::fs::read_to_string(dir.path().join("report.md")).unwrap();
    for seed in ["000", "001", "002", "003", "004"] {
        assert!(
            md.contains(&format!("## Seed {seed}: ")),
            "no seed {seed}:\n{md}"
        );
    }
    assert!(
        md.contains("zramd pool") && md.contains("zramd class") && md.contains("zramd sharded"),
        "seed 001's locking modes:\n{md}"
    );
    // Seed 002, unless it says userfaultfd is unavailable: each workload with pages from the
    // compressed tier and from the backing file.
    if !md.contains("uswap: userfaultfd unavailable") {
        for w in ["sequential", "random", "combined"] {
            for table in [
                format!("### {w} workload: first-touch latency"),
                format!("### {w} workload, pages written back to a file: first-touch latency"),
            ] {
                assert!(md.contains(&table), "no {table:?}:\n{md}");
            }
        }
    }
    let tables = md.matches("\n### ").count();
    let verdicts = md.matches("**Where zramd stands:**").count();
    assert!(
        tables > 0 && verdicts == tables,
        "{tables} tables, {verdicts} verdicts"
    );

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
            .unwrap();
    assert_eq!(json["sections"].as_array().map(Vec::len), Some(5));

    let (mut csvs, mut pngs) = (0, 0);
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        match p.extension().and_then(|e| e.to_str()) {
            Some("csv") => {
                check_csv(&p);
                csvs += 1;
            }
            Some("png") => {
                check_png(&p);
                pngs += 1;
                let name = p.file_name().unwrap().to_string_lossy().into_owned();
                assert!(
                    md.contains(&format!("]({name})")),
                    "{name} not in the report"
                );
            }
            _ => {}
        }
    }
    // Seed 000's class table and chain-size plot need neither root nor userfaultfd; seed
    // 003's run needs root, which this test has.
    assert!(dir.path().join("seed000-classes.csv").is_file());
    assert!(dir.path().join("seed000-chain-size.png").is_file());
    assert!(dir.path().join("seed003-untar.csv").is_file());
    assert!(dir.path().join("seed003-overhead.png").is_file());
    assert!(csvs >= 3 && pngs >= 2, "{csvs} CSV files, {pngs} PNG files");
}

#[test]
fn bad_arguments_fail_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such.tar");
    let out = lab()
        .args(["report", "--quick", "--out"])
        .arg(dir.path().join("out"))
        .arg("--tarball")
        .arg(&missing)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("is not a file"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let out = lab()
        .args(["report", "--seed", "999", "--out"])
        .arg(dir.path().join("out2"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("the seeds are 000 to 004"), "{stderr}");
}
