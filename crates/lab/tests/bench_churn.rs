//! `zramd-lab bench churn` on a few MiB of this machine's headers, with a backing file
//! bounded to 8 MiB: the rounds rewrite a quarter of the pages each, so the store fills with
//! sparse segments within a few rounds; every writeback must still pass (cleaning moves the
//! live objects out of them), cleaning must have moved something, and the data must read
//! back (the bench checks every page). No speed is asserted.

use std::process::Command;

pub mod common;

use common::files;

#[test]
fn bench_churn_writes_back_every_round_on_a_bounded_store() {
    let data = files("/usr/include", ".h", 64 << 10, 4 << 20);
    assert!(
        data.len() > 1 << 20,
        "too little data here: {} bytes",
        data.len()
    );
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let input = dir.path().join("corpus");
    std::fs::write(&input, &data).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_zramd-lab"))
        .args(["bench", "churn", "--room", "8", "--pages", "3072"])
        .args(["--rounds", "12", "--rewrite-percent", "25", "--input"])
        .arg(&input)
        .arg("--backing")
        .arg(dir.path().join("backing"))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("\nfailed writebacks: 0 of 13;"), "{stdout}");
    assert_eq!(stdout.matches(": ok ").count(), 13, "{stdout}");
    let moved: f64 = stdout
        .split("(moved ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|mib| mib.parse().ok())
        .unwrap_or_else(|| panic!("no moved figure: {stdout}"));
    assert!(moved > 0.0, "{stdout}");
    assert!(
        stdout.contains("all 3072 pages read back right"),
        "{stdout}"
    );
}
