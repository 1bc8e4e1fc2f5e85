//! `zramd idle`, `recompress`, `writeback` and `policy` through the control socket with the
//! real binary, `zramd stat`'s post-processing lines, and the metrics' post-processing
//! figures.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    pub mod cli;
    pub mod prose;
    pub mod run;
}

use common::prose::prose;

use common::cli::{cli, cli_ok, scrape, serve};
use zram::ZramConfig;
use zramd::serve::DeviceSpec;

#[test]
fn idle_recompress_writeback_and_policy_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(
        dir.path(),
        vec![DeviceSpec {
            name: "zram0".into(),
            size: "4M".parse().unwrap(),
            config: ZramConfig {
                recomp_algorithm: vec!["algo=zstd priority=1 level=19".parse().unwrap()],
                ..ZramConfig::default()
            },
            ..DeviceSpec::default()
        }],
    );
    let control = server.control_path.clone();
    let z = server.registry.device("zram0").unwrap().zram().unwrap();
    for i in 0..64 {
        z.write(i * 4096, &prose(i)).unwrap();
    }
    z.write(64 * 4096, &[0u8; 4096]).unwrap();

    let out = cli_ok(&control, &["idle", "zram0", "all"]);
    assert_eq!(
        out, "64 slots marked idle\n",
        "the same-filled page is skipped"
    );
    for (args, why) in [
        (&["idle", "zram0", "soon"][..], "invalid argument"),
        (&["idle", "zram9", "all"], "no device named \"zram9\""),
        (&["recompress", "zram0", "type=all"], "invalid argument"),
        (&["recompress", "zram0", "priority=2"], "priority"),
        (&["writeback", "zram0", "idle"], "no backing device"),
        (&["policy", "zram0", "cold=1"], "invalid argument"),
        (
            &["policy", "zram0", "writeback_age=60"],
            "no backing device",
        ),
    ] {
        let r = cli(&control, args);
        assert!(!r.ok, "{args:?} succeeded: {}", r.stdout);
        assert!(r.stderr.contains(why), "{args:?}: {}", r.stderr);
    }

    let before = z.mm_stat().compr_data_size;
    let out = cli_ok(
        &control,
        &["recompress", "zram0", "type=idle", "max_pages=10"],
    );
    assert!(out.contains(" of 10 slots recompressed"), "{out}");
    // Nothing is shared on this device: every attempt ran the encoder.
    assert!(
        out.contains("; 10 encodings run, 0 slots shared one"),
        "{out}"
    );
    let out = cli_ok(&control, &["recompress", "zram0", "type=idle"]);
    let done: u64 = out.split_whitespace().next().unwrap().parse().unwrap();
    assert!(done > 0, "{out}");
    assert!(z.mm_stat().compr_data_size < before);

    let out = cli_ok(&control, &["policy", "zram0"]);
    assert!(
        out.starts_with(&format!("policy: {}\n", zram::Policy::default())),
        "{out}"
    );
    assert!(out.contains("rounds 0"), "{out}");
    let out = cli_ok(
        &control,
        &[
            "policy",
            "zram0",
            "recompress_age=0",
            "min_age=0",
            "interval=9",
        ],
    );
    assert!(
        out.contains("interval=9") && out.contains("rounds 0"),
        "{out}"
    );
    assert_eq!(z.policy().interval, 9);
    let out = cli_ok(&control, &["policy", "zram0", "run"]);
    assert!(
        out.contains("rounds 1") && out.contains("last round:"),
        "{out}"
    );

    let out = cli_ok(&control, &["stat", "-v"]);
    assert!(
        out.contains("zram0: backing_dev none  bd_stat 0 0 0"),
        "{out}"
    );
    assert!(out.contains("zram0: recompressed "), "{out}");
    assert!(out.contains("64 slots marked idle"), "{out}");
    assert!(out.contains("zram0: policy enabled=0 interval=9"), "{out}");
    assert!(out.contains("1 rounds"), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&cli_ok(&control, &["stat", "--json"])).unwrap();
    let post = &json[0]["post"];
    assert_eq!(post["idle_marked"], 64);
    assert!(post["recomp_done"].as_u64().unwrap() >= done);
    assert_eq!(json[0]["policy"]["rounds"], 1);

    let body = scrape(server.metrics_addr.unwrap());
    for want in [
        "# TYPE zramd_bd_count gauge",
        "zramd_bd_count{device=\"zram0\"} 0",
        "zramd_bd_writes_total{device=\"zram0\"} 0",
        "zramd_idle_marked_total{device=\"zram0\"} 64",
        "zramd_policy_rounds_total{device=\"zram0\"} 1",
        "zramd_backing_file_bytes{device=\"zram0\"} 0",
        "# TYPE zramd_recomp_done counter",
    ] {
        assert!(body.contains(want), "{want} missing:\n{body}");
    }
    let recomp_done = format!(
        "zramd_recomp_done_total{{device=\"zram0\"}} {}",
        post["recomp_done"]
    );
    assert!(body.contains(&recomp_done), "{recomp_done}:\n{body}");
    server.stop();
}
