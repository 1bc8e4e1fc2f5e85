//! `zramd-lab bench nbd` once on a small input: every server has a row with finite speeds, the
//! library path's write speed is there too, and the temporary folder is gone afterwards; a
//! client tool that fails (a stand-in `nbdcopy`
//! found first on PATH, exiting 3) is named in the error with its exit status and stderr, the
//! bench exits non-zero, and the folder is gone too. With `--connections 1,2`, the curve
//! has a point per count with four finite speeds and, where fio has its nbd engine, two
//! finite read rates; a count of 0 and a fio run of 0 s are refused. Structure only: no
//! speed is asserted.

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LAB: &str = env!("CARGO_BIN_EXE_zramd-lab");

/// Why the bench cannot run here, if it cannot.
fn missing() -> Option<String> {
    for tool in ["nbdcopy", "qemu-io", "nbdkit"] {
        if Command::new(tool).arg("--version").output().is_err() {
            return Some(format!("{tool} is not installed"));
        }
    }
    let zramd = Path::new(LAB).with_file_name("zramd");
    if !zramd.is_file() {
        return Some(format!(
            "{} is not built (cargo build --release -p zramd)",
            zramd.display()
        ));
    }
    None
}

/// A 2 MiB input of mixed text and zeros, in `dir`.
fn input(dir: &Path) -> PathBuf {
    let mut data: Vec<u8> = (0..40_000u32)
        .flat_map(|i| format!("line {i} of the input\n").into_bytes())
        .collect();
    data.resize(2 << 20, 0);
    let path = dir.join("input.bin");
    std::fs::write(&path, data).unwrap();
    path
}

/// Runs the bench once with `tmp` as its TMPDIR and `path` as its PATH.
fn bench(input: &Path, tmp: &Path, path: Option<OsString>) -> Output {
    bench_with(&[], input, tmp, path)
}

/// [`bench`] with `extra` arguments.
fn bench_with(extra: &[&str], input: &Path, tmp: &Path, path: Option<OsString>) -> Output {
    let mut cmd = Command::new(LAB);
    cmd.args(["bench", "nbd", "--repeat", "1", "--json", "--input"])
        .arg(input)
        .args(extra)
        .env("TMPDIR", tmp);
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    cmd.output().unwrap()
}

/// Runs the bench once on a fresh input with `extra` arguments, asserts that it succeeded
/// and left nothing in its TMPDIR, and returns its JSON report and stdout.
fn report(extra: &[&str]) -> (serde_json::Value, String) {
    let data = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let out = bench_with(extra, &input(data.path()), tmp.path(), None);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert_eq!(left_in(tmp.path()), Vec::<PathBuf>::new());
    let report = serde_json::from_str(&stdout).expect("one JSON object");
    (report, stdout)
}

/// What is left in `dir`.
fn left_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect()
}

#[test]
fn bench_nbd_reports_every_server_and_leaves_no_folder() {
    if let Some(why) = missing() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let (report, stdout) = report(&[]);
    let library = report["library_write_mb_s"].as_f64().unwrap_or(f64::NAN);
    assert!(
        library.is_finite() && library > 0.0,
        "library path: {stdout}"
    );
    let rows = report["servers"].as_array().expect("a servers array");
    assert_eq!(rows.len(), 7, "{stdout}");
    for row in rows {
        for key in ["write_mb_s", "read_mb_s"] {
            let v = row[key].as_f64().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v > 0.0, "{key}: {row}");
        }
    }
}

#[test]
fn a_crashing_peer_is_named_with_its_status_and_stderr() {
    if let Some(why) = missing() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let data = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    // A stand-in nbdcopy: answers the bench's --version probe, fails every copy.
    let bin = data.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let fake = bin.join("nbdcopy");
    std::fs::write(
        &fake,
        "#!/bin/sh\n\
         if [ \"$1\" = --version ]; then echo 'nbdcopy stand-in'; exit 0; fi\n\
         echo 'stand-in nbdcopy: simulated crash' >&2\n\
         exit 3\n",
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut path = OsString::from(&bin);
    path.push(":");
    path.push(std::env::var_os("PATH").unwrap_or_default());
    let out = bench(&input(data.path()), tmp.path(), Some(path));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    for expected in [
        "peer nbdcopy failed",
        "exit status: 3",
        "stand-in nbdcopy: simulated crash",
    ] {
        assert!(stderr.contains(expected), "{expected:?} missing: {stderr}");
    }
    assert_eq!(left_in(tmp.path()), Vec::<PathBuf>::new());
}

#[test]
fn the_connections_curve_has_a_point_per_count() {
    if let Some(why) = missing() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let (report, stdout) = report(&["--connections", "1,2", "--fio-seconds", "1"]);
    let fio = lab::bench::fio_has_nbd();
    let points = report["connections"]
        .as_array()
        .expect("a connections array");
    let counts: Vec<u64> = points
        .iter()
        .map(|p| p["connections"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(counts, [1, 2], "{stdout}");
    for p in points {
        for key in [
            "zramd_write_mb_s",
            "zramd_read_mb_s",
            "nbdkit_write_mb_s",
            "nbdkit_read_mb_s",
        ] {
            let v = p[key].as_f64().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v > 0.0, "{key}: {p}");
        }
        for key in ["zramd_fio_read_iops", "nbdkit_fio_read_iops"] {
            if fio {
                let v = p[key].as_f64().unwrap_or(f64::NAN);
                assert!(v.is_finite() && v > 0.0, "{key}: {p}");
            } else {
                assert!(p[key].is_null(), "{key} without fio: {p}");
            }
        }
    }
    if !fio {
        eprintln!("SKIPPED: the curve's fio figures (fio or its nbd engine is missing)");
    }

    let data = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    for (extra, error) in [
        (
            ["--connections", "0,1"],
            "--connections takes counts of at least 1",
        ),
        (["--fio-seconds", "0"], "--fio-seconds must be at least 1"),
    ] {
        let mut args = vec!["--connections", "1"];
        args.extend(extra);
        let out = bench_with(&args, &input(data.path()), tmp.path(), None);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(error), "{stderr}");
    }
    assert_eq!(left_in(tmp.path()), Vec::<PathBuf>::new());
}
