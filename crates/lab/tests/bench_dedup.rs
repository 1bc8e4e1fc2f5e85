//! `zramd-lab bench dedup` on a few MiB of this machine's files, once: it runs, its JSON has
//! every figure, the ratios are finite, the fold freed something of the file written twice
//! and the data read back (the bench checks it). Structure only: no speed is asserted.

use std::process::Command;

pub mod common;

use common::files;

#[test]
fn bench_dedup_reports_every_figure() {
    let mut data = files("/usr/include", ".h", 64 << 10, 3 << 20);
    data.extend(files("/usr/bin", "", 256 << 10, (4 << 20) - data.len()));
    assert!(
        data.len() > 1 << 20,
        "too little data here: {} bytes",
        data.len()
    );
    let input = std::env::temp_dir().join(format!("bench-dedup-{}.bin", std::process::id()));
    std::fs::write(&input, &data).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_zramd-lab"))
        .args(["bench", "dedup", "--repeat", "1", "--json", "--input"])
        .arg(&input)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&input);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(r["bytes"], data.len() as u64);
    assert_eq!(r["repeat"], 1);
    let finite = |v: &serde_json::Value| v.as_f64().is_some_and(f64::is_finite);
    for pair in ["once", "twice"] {
        assert!(finite(&r[pair]["ratio"]), "{pair}: {r}");
        for (side, dedup) in [("off", false), ("on", true)] {
            let s = &r[pair][side];
            assert_eq!(s["dedup"], dedup, "{pair} {side}");
            assert!(finite(&s["write_mb_s"]), "{pair} {side}: {s}");
            assert_eq!(s["mm_stat"].as_array().map(Vec::len), Some(12), "{s}");
            for key in ["mem_used", "rss", "rss_delta"] {
                assert!(s[key].is_number(), "{key}: {s}");
            }
            assert!(s["fold_stats"]["dedup_pages"].is_u64(), "{s}");
        }
    }
    assert_eq!(r["twice"]["on"]["copies"], 2);
    let f = &r["fold"];
    for key in ["mem_used_ratio", "cpu_s", "wall_s", "cpu_s_per_gb"] {
        assert!(finite(&f[key]), "{key}: {f}");
    }
    assert!(
        f["mem_used_after"].as_u64() < f["before"]["mem_used"].as_u64(),
        "{f}"
    );
    assert!(f["pages_folded"].as_u64() > Some(0), "{f}");
    assert!(f["report"]["objects_folded"].as_u64() > Some(0), "{f}");
    // The second copy of the file shares what the first stored.
    assert!(
        r["twice"]["on"]["fold_stats"]["dedup_pages"].as_u64() > Some(0),
        "{r}"
    );
}
