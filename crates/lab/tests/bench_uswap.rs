//! `zramd-lab bench uswap` on a tiny region, once: its JSON has every workload with its
//! pages read back from the compressed tier and from the backing file, readahead on and off,
//! the fault tiers (the compressed ones in both fault modes) and the targets, and the
//! counts that follow from the workloads' definitions hold; and readahead switched between
//! segments with handler threads. Structure only: no latency is asserted.

use std::process::Command;

use serde_json::Value;

/// `zramd-lab bench uswap` on a region of 8 MiB with a budget of 2 MiB, 2 rounds per
/// setting and 1 µs of work per page, plus `args`: its JSON object, or `None` (saying why)
/// where userfaultfd cannot be used.
fn bench_uswap(args: &[&str]) -> Option<Value> {
    let tiny = [
        "--size",
        "8M",
        "--budget",
        "2M",
        "--rounds",
        "2",
        "--work-us",
        "1",
    ];
    let out = Command::new(env!("CARGO_BIN_EXE_zramd-lab"))
        .args(["bench", "uswap"])
        .args(tiny)
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if !out.status.success() && stderr.contains("needs userfaultfd") {
        eprintln!("SKIPPED: {}", stderr.trim());
        return None;
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
    Some(serde_json::from_str(&stdout).expect("one JSON object"))
}

#[test]
fn bench_uswap_reports_every_workload_and_tier() {
    let Some(r) = bench_uswap(&["--threads", "2", "--noise-threads", "1"]) else {
        return;
    };
    let s = &r["settings"];
    assert_eq!(s["rounds"], 2);
    assert_eq!(s["threads"], 2);
    assert_eq!(s["noise_threads"], 1);
    // Faults read the backing file page by page unless asked otherwise.
    assert_eq!(s["readback_readahead"], false);

    let runs = r["runs"].as_array().expect("runs");
    // Each workload, pages from the compressed tier and from the backing file, readahead
    // on and off.
    assert_eq!(runs.len(), 12, "{r}");
    let find = |w: &str, source: &str, ra: bool| {
        runs.iter()
            .find(|x| x["workload"] == w && x["source"] == source && x["readahead"] == ra)
            .unwrap_or_else(|| panic!("{w} {source} readahead {ra} missing: {r}"))
    };
    for (w, source) in ["sequential", "random", "combined"]
        .into_iter()
        .flat_map(|w| ["compressed", "written_back"].map(|src| (w, src)))
    {
        for ra in [true, false] {
            let run = find(w, source, ra);
            let pages = run["pages_per_thread"].as_u64().unwrap();
            let threads = run["measured_threads"].as_u64().unwrap();
            assert_eq!(threads, 2, "{run}");
            assert_eq!(run["noise_threads"], u64::from(w == "combined"), "{run}");
            let l = &run["latency"];
            // Two runs, each with 2 rounds of each setting (switched between segments).
            assert_eq!(run["runs"], 2, "{run}");
            assert_eq!(run["rounds"], 4, "{run}");
            assert_eq!(l["samples"].as_u64(), Some(pages * threads * 4), "{run}");
            for key in ["avg_us", "max_us", "p50_us", "p90_us", "p99_us"] {
                assert!(l[key].as_f64().is_some_and(f64::is_finite), "{key}: {run}");
            }
            assert_eq!(run["noise_latency"].is_object(), w == "combined", "{run}");
            let c = &run["counts"];
            // A region four times its budget, every page touched per round: faults.
            assert!(c["pgmajfault"].as_u64() > Some(0), "{run}");
            assert!(c["pswpin"].as_u64() > Some(0), "{run}");
            assert!(run["fault_latency"]["samples"].as_u64() > Some(0), "{run}");
            if !ra {
                // Nothing read ahead, every page read back faulted; a hit counts pages
                // read ahead in a segment with readahead on and used after the switch.
                assert_eq!(c["swap_ra"], 0, "{run}");
                assert_eq!(c["pswpin"], c["pgmajfault"], "{run}");
            }
            if source == "written_back" {
                // Everything the device held went to the file before every timed round, so
                // faults read it.
                // More than one write-back per run could give (each holds at most every
                // page of the region): pages went to the file again before later rounds.
                let region_pages = pages * (threads + run["noise_threads"].as_u64().unwrap());
                assert!(
                    run["written_back_pages"].as_u64() > Some(2 * region_pages),
                    "{run}"
                );
                assert!(run["bd_reads"].as_u64() > Some(0), "{run}");
            } else {
                assert_eq!(run["written_back_pages"], 0, "{run}");
                assert_eq!(run["bd_reads"], 0, "{run}");
            }
        }
        let count = |ra: bool, key: &str| find(w, source, ra)["counts"][key].as_u64().unwrap();
        assert!(
            count(true, "swap_ra_hit") + count(false, "swap_ra_hit") <= count(true, "swap_ra"),
            "{w} {source}: more hits than pages read ahead: {r}"
        );
    }
    for source in ["compressed", "written_back"] {
        let seq_on = find("sequential", source, true);
        assert!(seq_on["counts"]["swap_ra"].as_u64() > Some(0), "{seq_on}");
    }

    let tiers = r["tiers"].as_array().expect("tiers");
    assert_eq!(tiers.len(), 5, "{r}");
    // The compressed tiers in the chosen fault mode (in-thread by default), then in the
    // other, then the written-back tier in the chosen one.
    for (t, (name, faults)) in tiers.iter().zip([
        ("compressed", "in-thread"),
        ("compressed_alone", "in-thread"),
        ("compressed", "handlers"),
        ("compressed_alone", "handlers"),
        ("written_back", "in-thread"),
    ]) {
        assert_eq!(t["tier"], name, "{t}");
        assert_eq!(t["faults"], faults, "{t}");
        let accesses = t["pages"].as_u64().unwrap() * 2;
        // Every page evicted before each round, readahead off: every access a major fault.
        assert_eq!(t["latency"]["samples"].as_u64(), Some(accesses), "{t}");
        assert_eq!(t["counts"]["pgmajfault"].as_u64(), Some(accesses), "{t}");
        assert_eq!(t["counts"]["swap_ra"], 0, "{t}");
    }
    // With room for every page, nothing is evicted while the faults are served.
    assert_eq!(tiers[1]["counts"]["pswpout"], 0, "{r}");
    assert_eq!(tiers[3]["counts"]["pswpout"], 0, "{r}");
    assert!(tiers[4]["written_back_pages"].as_u64() > Some(0), "{r}");
    assert!(tiers[4]["bd_reads"].as_u64() > Some(0), "{r}");

    let names: Vec<&str> = r["targets"]
        .as_array()
        .expect("targets")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    for want in [
        "sequential p90 on/off",
        "random p90 on/off",
        "random avg on/off",
        "combined p90 on/off",
        "written back: sequential p90 on/off",
        "written back: random p90 on/off",
        "written back: random avg on/off",
        "written back: combined p90 on/off",
        "compressed-tier fault p50 (us)",
        "compressed-tier fault p99 (us)",
        "compressed, no eviction: p50 (us)",
    ] {
        assert!(names.contains(&want), "{want}: {names:?}");
    }
}

/// With handler threads serving the faults (a page read ahead may still be on its way when
/// the program is woken), a switch of readahead waits for the region to be quiet: the
/// segments with readahead off read nothing ahead.
#[test]
fn bench_uswap_switches_readahead_cleanly_with_handler_threads() {
    let Some(r) = bench_uswap(&[
        "--workload",
        "sequential",
        "--faults",
        "handlers",
        "--runs",
        "1",
        "--threads",
        "1",
    ]) else {
        return;
    };
    let runs = r["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{r}");
    for run in runs {
        assert_eq!(run["source"], "compressed", "{run}");
        let c = &run["counts"];
        if run["readahead"] == true {
            assert!(c["swap_ra"].as_u64() > Some(0), "{run}");
        } else {
            assert_eq!(c["swap_ra"], 0, "{run}");
            assert_eq!(c["pswpin"], c["pgmajfault"], "{run}");
        }
    }
}
