//! Issue 13's lab figures: the untar bench's rows (seed 003's columns, zramd's metadata and
//! real overhead) from given `mm_stat` steps, their CSV and JSON, the overhead plot, the
//! `--allocator` lists of `bench untar` and `bench pool`, and a tiny `bench pool` run.

use std::path::PathBuf;
use std::process::Command;

use clap::Parser;
use lab::bench::untar::figures::{self, CSV_HEADER, Row, Sample, seed_line};
use lab::bench::untar::plot;
use zsmalloc::Allocator;

const MIB: u64 = 1 << 20;

/// A fresh directory under the temp dir for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lab-figures-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// zramd's `mm_stat` (twelve fields: the kernel's nine, pages_folded, metadata, cached).
fn zramd_mm(orig: u64, compr: u64, used: u64, metadata: u64) -> Vec<u64> {
    vec![orig, compr, used, 0, used, 3, 7, 2, 2, 0, metadata, 0]
}

/// The kernel's nine fields.
fn kernel_mm(orig: u64, compr: u64, used: u64) -> Vec<u64> {
    vec![orig, compr, used, 0, used, 1, 5, 0, 0]
}

fn sample(cycle: usize, step: &str, mm: Vec<u64>, rss: Option<u64>) -> Sample {
    Sample {
        cycle,
        step: step.into(),
        mm,
        rss,
    }
}

/// Two cycles of two steps on zramd, one cycle on the kernel.
fn rows() -> Vec<Row> {
    let ours = [
        sample(
            1,
            "untar",
            zramd_mm(10 * MIB, 4 * MIB, 4 * MIB + MIB / 2, MIB),
            Some(64 * MIB),
        ),
        sample(
            1,
            "rm drivers",
            zramd_mm(5 * MIB, 2 * MIB, 3 * MIB, MIB),
            Some(48 * MIB),
        ),
        sample(
            2,
            "untar",
            zramd_mm(10 * MIB, 4 * MIB, 5 * MIB, 2 * MIB),
            Some(66 * MIB),
        ),
        sample(2, "rm drivers", zramd_mm(0, 0, 0, MIB), Some(40 * MIB)),
    ];
    let theirs = [
        sample(1, "untar", kernel_mm(10 * MIB, 4 * MIB, 6 * MIB), None),
        sample(1, "rm drivers", kernel_mm(5 * MIB, 2 * MIB, 4 * MIB), None),
    ];
    let mut rows = Row::all("zramd", "zsmalloc", &ours);
    rows.extend(Row::all("kernel", "zsmalloc", &theirs));
    rows
}

#[test]
fn seed_columns_follow_from_mm_stat() {
    let rows = rows();
    let r = &rows[0];
    assert_eq!(
        (r.orig_size, r.compr_size, r.used_size),
        (10 * MIB, 4 * MIB, 4 * MIB + MIB / 2)
    );
    assert_eq!(r.overhead, (MIB / 2) as i64);
    assert_eq!(r.overhead_ratio, 12.5);
    assert_eq!(r.metadata, Some(MIB));
    assert_eq!(r.real_overhead, Some((MIB + MIB / 2) as i64));
    assert_eq!(r.real_ratio, Some(37.5));
    assert_eq!(r.rss, Some(64 * MIB));
    assert_eq!((r.same_pages, r.pages_compacted, r.huge_pages), (3, 7, 2));
    assert_eq!(r.pages_folded, Some(0));
    assert_eq!(
        seed_line(r).split_whitespace().collect::<Vec<_>>(),
        [
            "zramd", "zsmalloc", "1", "untar", "10.00MB", "4.00MB", "4.50MB", "0.50MB", "12.50%",
            "1.00MB", "1.50MB", "37.50%", "64.00MB"
        ]
    );
    // Second step: overhead 1 MiB over 2 MiB.
    assert_eq!(
        (rows[1].overhead, rows[1].overhead_ratio),
        (MIB as i64, 50.0)
    );
    assert_eq!(rows[1].real_ratio, Some(100.0));
    // Nothing stored: ratios are 0, the real overhead is the metadata alone.
    let empty = &rows[3];
    assert_eq!((empty.overhead, empty.overhead_ratio), (0, 0.0));
    assert_eq!(
        (empty.real_overhead, empty.real_ratio),
        (Some(MIB as i64), Some(0.0))
    );
    // The kernel has no metadata field: no real overhead, no RSS.
    let k = &rows[4];
    assert_eq!((k.overhead, k.overhead_ratio), ((2 * MIB) as i64, 50.0));
    assert_eq!(
        (k.metadata, k.real_overhead, k.real_ratio, k.rss),
        (None, None, None, None)
    );
    assert_eq!(k.pages_folded, None);
    assert_eq!(
        seed_line(k).split_whitespace().collect::<Vec<_>>(),
        [
            "kernel", "zsmalloc", "1", "untar", "10.00MB", "4.00MB", "6.00MB", "2.00MB", "50.00%",
            "-", "-", "-", "-"
        ]
    );
}

#[test]
fn steps_are_placed_in_their_cycles() {
    let rows = rows();
    let places: Vec<_> = rows
        .iter()
        .map(|r| (r.cycle, r.step_in_cycle, r.steps_in_cycle, r.x()))
        .collect();
    assert_eq!(
        places,
        [
            (1, 0, 2, 0.0),
            (1, 1, 2, 0.5),
            (2, 0, 2, 1.0),
            (2, 1, 2, 1.5),
            (1, 0, 2, 0.0),
            (1, 1, 2, 0.5)
        ]
    );
    let series = plot::series(&rows);
    let names: Vec<&str> = series.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["zramd zsmalloc", "kernel zsmalloc"]);
    assert_eq!(series[1].1, [(0.0, 50.0), (0.5, 100.0)]);
}

#[test]
fn csv_and_json_hold_every_row_raw() {
    let rows = rows();
    let csv = figures::csv(&rows);
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(lines.len(), rows.len() + 1);
    assert_eq!(lines[0], CSV_HEADER);
    assert_eq!(
        lines[1],
        "zramd,zsmalloc,1,0,untar,10485760,4194304,4718592,524288,12.500000,1048576,1572864,37.500000,67108864,4718592,3,7,2,0"
    );
    assert_eq!(
        lines[5],
        "kernel,zsmalloc,1,0,untar,10485760,4194304,6291456,2097152,50.000000,,,,,6291456,1,5,0,"
    );
    for line in &lines {
        assert_eq!(
            line.split(',').count(),
            CSV_HEADER.split(',').count(),
            "{line}"
        );
    }

    let dir = scratch("csv");
    figures::write(&dir, &rows).unwrap();
    assert_eq!(std::fs::read_to_string(dir.join("untar.csv")).unwrap(), csv);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("untar.json")).unwrap()).unwrap();
    let json = json.as_array().expect("an array of rows");
    assert_eq!(json.len(), rows.len());
    assert_eq!(json[0]["side"], "zramd");
    assert_eq!(json[0]["step"], "untar");
    assert_eq!(json[0]["compr_size"], 4 * MIB);
    assert_eq!(json[0]["overhead"], MIB / 2);
    assert_eq!(json[0]["overhead_ratio"], 12.5);
    assert_eq!(json[0]["real_overhead"], MIB + MIB / 2);
    assert_eq!(json[4]["side"], "kernel");
    assert!(json[4]["metadata"].is_null());
    assert!(json[4]["real_ratio"].is_null());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_plot_is_a_png_of_the_asked_size() {
    let dir = scratch("png");
    let png = dir.join("untar-overhead.png");
    let text = plot::draw(&rows(), &png, (640, 480)).unwrap();
    println!("plot drawn {} text", if text { "with" } else { "without" });
    let bytes = std::fs::read(&png).unwrap();
    assert_eq!(&bytes[..8], b"\x89PNG\r\n\x1a\n");
    assert_eq!(&bytes[12..16], b"IHDR");
    let width = u32::from_be_bytes(bytes[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(bytes[20..24].try_into().unwrap());
    assert_eq!((width, height), (640, 480));
    // No rows at all still makes a (blank) plot.
    plot::draw(&[], &png, (320, 200)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}

#[derive(Debug, Parser)]
struct Untar {
    #[command(flatten)]
    args: lab::bench::untar::Args,
}

#[derive(Debug, Parser)]
struct Pool {
    #[command(flatten)]
    args: lab::bench::pool::Args,
}

#[test]
fn allocator_lists_parse_and_bad_names_are_refused() {
    let untar = |extra: &[&str]| {
        let mut argv = vec!["untar", "--tarball", "linux.tar"];
        argv.extend(extra);
        Untar::try_parse_from(argv)
    };
    assert_eq!(untar(&[]).unwrap().args.allocators(), [Allocator::Zsmalloc]);
    assert_eq!(
        untar(&["--allocator", "zsmalloc,afmalloc"])
            .unwrap()
            .args
            .allocators(),
        [Allocator::Zsmalloc, Allocator::Afmalloc]
    );
    assert_eq!(
        untar(&["--allocator", "zbud", "--allocator", "malloc"])
            .unwrap()
            .args
            .allocators(),
        [Allocator::Zbud, Allocator::Malloc]
    );
    let err = untar(&["--allocator", "zsmalloc,slab"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("slab") && err.contains("afmalloc"), "{err}");

    let pool = |argv: &[&str]| Pool::try_parse_from(argv);
    assert_eq!(
        pool(&["pool"]).unwrap().args.allocators(),
        [Allocator::Zsmalloc]
    );
    assert_eq!(
        pool(&["pool", "--allocator", "zsmalloc,afmalloc"])
            .unwrap()
            .args
            .allocators(),
        [Allocator::Zsmalloc, Allocator::Afmalloc]
    );
    let err = pool(&["pool", "--allocator", "jemalloc"])
        .unwrap_err()
        .to_string();
    assert!(err.contains("jemalloc") && err.contains("zbud"), "{err}");
}

/// `zramd-lab bench pool` on a tiny configuration.
fn bench_pool(extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_zramd-lab"))
        .args(["bench", "pool", "--working-set", "200", "--ops", "2000"])
        .args(["--objects", "2000", "--repeat", "1"])
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn bench_pool_runs_each_allocator_asked_for() {
    let json: serde_json::Value =
        serde_json::from_str(&bench_pool(&["--allocator", "zsmalloc", "--json"])).unwrap();
    let reports = json["allocators"].as_array().unwrap();
    assert_eq!(reports.len(), 1);
    let zs = &reports[0];
    assert_eq!(zs["allocator"], "zsmalloc");
    assert!(zs["scaling"]["one_thread_ops_s"].as_f64().unwrap() > 0.0);
    let chains: Vec<_> = zs["overhead"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["chain_size"].as_u64().unwrap())
        .collect();
    assert_eq!(chains, [4, 8, 16]);
    for o in zs["overhead"].as_array().unwrap() {
        assert_eq!(o["objects"], 2000);
        assert!(o["overhead"].as_f64().unwrap() >= 1.0, "{o}");
        assert!(o["overhead_with_metadata"].as_f64() >= o["overhead"].as_f64());
    }

    // Every allocator named is measured: each of them opens.
    let json: serde_json::Value = serde_json::from_str(&bench_pool(&[
        "--allocator",
        "zsmalloc,afmalloc,zbud,malloc",
        "--json",
    ]))
    .unwrap();
    assert_eq!(json["skipped"].as_array().map(Vec::len), Some(0), "{json}");
    let mut named: Vec<&str> = json["allocators"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["allocator"].as_str().unwrap())
        .collect();
    named.sort_unstable();
    assert_eq!(named, ["afmalloc", "malloc", "zbud", "zsmalloc"]);
    for r in json["allocators"].as_array().unwrap() {
        let rows = r["overhead"].as_array().unwrap().len();
        assert_eq!(
            rows,
            if r["allocator"] == "zsmalloc" { 3 } else { 1 },
            "{r}"
        );
    }

    let text = bench_pool(&["--allocator", "zsmalloc"]);
    let table: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("allocator"))
        .collect();
    assert_eq!(table.len(), 4, "{text}");
    assert!(
        table[1..].iter().all(|l| l.starts_with("zsmalloc")),
        "{text}"
    );
}

#[test]
fn bench_device_runs_on_the_allocator_asked_for() {
    let dir = scratch("bench-device-allocator");
    let input = dir.join("input");
    // 2 MiB of text-like bytes: compressible, not same-filled.
    let text: Vec<u8> = (0..2 << 20)
        .map(|i: usize| b"allocator chunk slab zspage "[i % 28] ^ ((i / 4096) as u8 & 1))
        .collect();
    std::fs::write(&input, &text).unwrap();
    for allocator in ["afmalloc", "zbud", "malloc"] {
        let out = Command::new(env!("CARGO_BIN_EXE_zramd-lab"))
            .args(["bench", "--repeat", "1", "--json", "--allocator", allocator])
            .arg("--input")
            .arg(&input)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{allocator}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let mm = json["zramd"]["mm_stat"].as_array().unwrap();
        assert_eq!(
            mm[0].as_u64(),
            Some(2 << 20),
            "{allocator}: orig_data_size {json}"
        );
        assert!(
            mm[2].as_u64().unwrap() > 0,
            "{allocator}: mem_used_total {json}"
        );
        assert!(json["zramd"]["write_mb_s"].as_f64().unwrap() > 0.0);
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_zramd-lab"))
        .args(["bench", "--allocator", "slab", "--input"])
        .arg(&input)
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("slab"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn thread_lists_parse_and_bad_counts_are_refused() {
    let pool = |argv: &[&str]| Pool::try_parse_from(argv);
    assert_eq!(pool(&["pool"]).unwrap().args.thread_counts(), [1, 2]);
    assert_eq!(
        pool(&["pool", "--threads", "1,2,4,8,16"])
            .unwrap()
            .args
            .thread_counts(),
        [1, 2, 4, 8, 16]
    );
    assert_eq!(
        pool(&["pool", "--threads", "4"])
            .unwrap()
            .args
            .thread_counts(),
        [4]
    );
    assert!(pool(&["pool", "--threads", "1,two"]).is_err());
    // A count of 0 parses, and the run refuses it.
    let out = Command::new(env!("CARGO_BIN_EXE_zramd-lab"))
        .args(["bench", "pool", "--threads", "1,0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threads"));
}

/// `bench pool --threads 1,2,3` prints one curve row per count, and its JSON holds them.
#[test]
fn bench_pool_prints_a_row_per_thread_count() {
    let json: serde_json::Value =
        serde_json::from_str(&bench_pool(&["--threads", "1,2,3", "--json"])).unwrap();
    let curve = json["allocators"][0]["scaling"]["curve"]
        .as_array()
        .unwrap();
    let counts: Vec<u64> = curve
        .iter()
        .map(|p| p["threads"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 2, 3]);
    assert_eq!(curve[0]["ratio"].as_f64(), Some(1.0));
    assert!(curve.iter().all(|p| p["ops_s"].as_f64().unwrap() > 0.0));
    let text = bench_pool(&["--threads", "1,3"]);
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("threads"))
        .skip(1)
        .take_while(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[1].trim_start().starts_with('3'), "{text}");
}

/// `bench --input FILE --threads 1,2` measures each count: one JSON point per count (a
/// single count keeps the one report it always printed), and a bad count is refused.
#[test]
fn bench_device_takes_a_thread_list() {
    let dir = scratch("bench-device-threads");
    let input = dir.join("input");
    let text: Vec<u8> = (0..1 << 20)
        .map(|i: usize| b"thread list curve "[i % 18] ^ ((i / 4096) as u8 & 3))
        .collect();
    std::fs::write(&input, &text).unwrap();
    let bench = |threads: &str| {
        Command::new(env!("CARGO_BIN_EXE_zramd-lab"))
            .args(["bench", "--repeat", "1", "--json", "--threads", threads])
            .arg("--input")
            .arg(&input)
            .output()
            .unwrap()
    };
    let out = bench("1,2");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let points = json.as_array().unwrap();
    let counts: Vec<u64> = points
        .iter()
        .map(|p| p["threads"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 2]);
    for p in points {
        assert_eq!(p["zramd"]["mm_stat"][0].as_u64(), Some(1 << 20), "{p}");
    }
    let one: serde_json::Value =
        serde_json::from_str(&String::from_utf8_lossy(&bench("2").stdout)).unwrap();
    assert_eq!(one["zramd"]["mm_stat"][0].as_u64(), Some(1 << 20), "{one}");
    let bad = bench("1,0");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--threads"));
    let _ = std::fs::remove_dir_all(&dir);
}
