//! `zramd stat` behaves like zramctl: its options (`-o`, `--output-all`, `-b`, `-n`,
//! `--raw`) and formats against a served device, `--mm-stat`, bad column lists; and, as
//! root with the kernel's zram, the same columns printed for a kernel zram device and a
//! served one holding the same data.
//!
//! A test whose facility is missing says so on stderr and returns; it never passes
//! silently.

/// Shared test helpers (`tests/common/`): each test includes the files it uses.
mod common {
    #[expect(dead_code, reason = "these tests scrape no metrics")]
    pub mod cli;
    pub mod have;
    pub mod run;
}

use std::io::Write as _;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::cli::{cli, cli_ok, serve};
use common::have::have;
use common::run::{run, run_ok};
use zram::{Algorithm, ZramConfig};
use zramd::human::size;
use zramd::serve::{DeviceSpec, Server};

const ZRAMD: &str = env!("CARGO_BIN_EXE_zramd");
const PAGE: usize = 4096;
const LIMIT: Duration = Duration::from_secs(60);

fn device(name: &str, disksize: &str, algorithm: Algorithm) -> DeviceSpec {
    DeviceSpec {
        name: name.into(),
        size: disksize.parse().unwrap(),
        config: ZramConfig {
            algorithm,
            ..ZramConfig::default()
        },
        ..DeviceSpec::default()
    }
}

/// `same` same-filled pages (zeros, a byte repeated, an 8-byte word repeated: no object
/// stored) then `random` pages of xorshift noise (incompressible: stored whole, as 4096-byte
/// huge objects), so that DATA and COMPR do not depend on the compressor's output.
fn pages(same: usize, random: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity((same + random) * PAGE);
    for i in 0..same {
        let word: u64 = match i % 3 {
            0 => 0,
            1 => 0xabab_abab_abab_abab,
            _ => 0x0123_4567_89ab_cdef,
        };
        for _ in 0..PAGE / 8 {
            data.extend_from_slice(&word.to_ne_bytes());
        }
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..random * PAGE / 8 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    data
}

/// A served `zram0` holding `data` at offset 0.
fn served_with(dir: &Path, disksize: &str, algorithm: Algorithm, data: &[u8]) -> Server {
    let server = serve(dir, vec![device("zram0", disksize, algorithm)]);
    let z = server.registry.device("zram0").unwrap().zram().unwrap();
    z.write(0, data).unwrap();
    server
}

#[test]
fn options_and_formats() {
    let dir = tempfile::tempdir().unwrap();
    let data = pages(3, 2);
    let server = serve(
        dir.path(),
        vec![
            device("zram0", "64M", Algorithm::Lz4),
            device("zram1", "1M", Algorithm::Lz4),
        ],
    );
    let control = server.control_path.clone();
    let z = server.registry.device("zram0").unwrap().zram().unwrap();
    z.write(0, &data).unwrap();
    // zram1 reset: uninitialized, size 0.
    cli_ok(&control, &["reset", "zram1"]);
    let stat = |args: &[&str]| cli_ok(&control, &[&["stat"], args].concat());
    let json: serde_json::Value = serde_json::from_str(&stat(&["--json"])).unwrap();
    let mm: Vec<u64> = json[0]["mm_stat_fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    // Five pages stored, the two random ones as 4096-byte objects, three same-filled.
    assert_eq!(mm[..2], [5 * 4096, 2 * 4096], "{json}");
    assert_eq!(mm[5], 3, "{json}");

    // The command: widths from the cells, at least the header's.
    assert_eq!(
        stat(&["-o", "NAME,DISKSIZE,DATA,COMPR,ALGORITHM", "-b", "-n"]),
        "zram0 67108864 20480  8192 lz4\n"
    );
    // zramctl's default columns; the uninitialized zram1 is left out, as zramctl does.
    let total = size(mm[2]);
    let w = total.len().max(5);
    assert_eq!(
        stat(&[]),
        format!(
            "NAME  ALGORITHM DISKSIZE DATA COMPR {:>w$} STREAMS MOUNTPOINT\n\
             zram0 lz4            64M  20K    8K {total:>w$}         \n",
            "TOTAL"
        )
    );
    assert_eq!(
        stat(&["--raw"]),
        format!(
            "NAME ALGORITHM DISKSIZE DATA COMPR TOTAL STREAMS MOUNTPOINT\n\
             zram0 lz4 64M 20K 8K {total}  \n"
        )
    );
    assert_eq!(
        stat(&[
            "--raw",
            "-n",
            "-b",
            "-o",
            "zero-pages,data,Migrated,mem-limit"
        ]),
        format!("3 20480 {} 0\n", mm[6])
    );
    // Given by name, an uninitialized device is shown.
    assert_eq!(
        stat(&["zram1", "-o", "NAME,DISKSIZE,DATA"]),
        "NAME  DISKSIZE DATA\nzram1       0B   0B\n"
    );
    let all = stat(&["--output-all"]);
    let header: Vec<&str> = all.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "DISKSIZE",
            "DATA",
            "COMPR",
            "ALGORITHM",
            "STREAMS",
            "ZERO-PAGES",
            "TOTAL",
            "MEM-LIMIT",
            "MEM-USED",
            "MIGRATED",
            "COMP-RATIO",
            "MOUNTPOINT",
            "ALLOCATOR",
            "UNIT-SIZE",
            "RATIO",
            "EXPORT"
        ]
    );
    assert_eq!(
        stat(&["-n", "--raw", "-o", "ALLOCATOR,UNIT-SIZE,COMP-RATIO,EXPORT"]),
        format!(
            "zsmalloc 4K 2.50 {}\n",
            json[0]["export"].as_str().unwrap().replace(' ', "\\x20")
        )
    );
    // -v: the post-processing lines after the table.
    let verbose = stat(&["-v"]);
    assert!(verbose.starts_with(&stat(&[])), "{verbose}");
    assert!(
        verbose.contains("zram0: backing_dev none  bd_stat 0 0 0"),
        "{verbose}"
    );

    // --mm-stat: one device's exactly as its file, all after their names.
    let line = json[0]["mm_stat"].as_str().unwrap();
    assert!(line.ends_with('\n'));
    assert_eq!(stat(&["--mm-stat", "zram0"]), line);
    let every = stat(&["--mm-stat"]);
    let lines: Vec<&str> = every.lines().collect();
    assert_eq!(lines.len(), 2, "{every}");
    assert_eq!(format!("{}\n", lines[0]), format!("zram0: {line}"));
    let zram1: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(zram1[0], "zram1:");
    assert!(zram1[1..].iter().all(|f| *f == "0"), "{every}");

    // Bad input: one clear line, no output.
    for (args, why) in [
        (&["-o", "NOSUCH"][..], "unknown column: \"NOSUCH\""),
        (&["-o", "NAME,"], "unknown column: \"\""),
        (&["-o", ""], "no columns given"),
        (&["nosuch"], "no device named \"nosuch\""),
    ] {
        let r = run(
            Command::new(ZRAMD)
                .arg("stat")
                .args(args)
                .arg("--control")
                .arg(&control)
                .env_remove("RUST_BACKTRACE"),
            LIMIT,
        );
        assert!(!r.ok && r.stdout.is_empty(), "{args:?}: {}", r.stdout);
        assert_eq!(r.stderr.trim().lines().count(), 1, "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains(why), "{args:?}: {}", r.stderr);
    }
    for args in [&["--mm-stat", "--json"][..], &["--json", "-o", "NAME"]] {
        let r = cli(&control, &[&["stat"], args].concat());
        assert!(
            !r.ok && r.stderr.contains("cannot be used with"),
            "{args:?}: {}",
            r.stderr
        );
    }
    server.stop();
}

/// A kernel zram device added for a test: reset and removed when dropped.
struct KernelZram {
    id: u32,
}

impl KernelZram {
    fn add() -> std::io::Result<Self> {
        let id = std::fs::read_to_string("/sys/class/zram-control/hot_add")?;
        let id = id.trim().parse().map_err(std::io::Error::other)?;
        Ok(Self { id })
    }

    fn attr(&self, name: &str) -> String {
        format!("/sys/block/zram{}/{name}", self.id)
    }

    fn path(&self) -> String {
        format!("/dev/zram{}", self.id)
    }
}

impl Drop for KernelZram {
    fn drop(&mut self) {
        let _ = std::fs::write(self.attr("reset"), "1");
        let _ = std::fs::write("/sys/class/zram-control/hot_remove", self.id.to_string());
    }
}

/// zramctl's output and ours for the same columns; NAME, when asked, differs by nature
/// (`/dev/zramN` against `zram0`): each line is compared after the NAME column.
fn compare(kernel: &KernelZram, control: &Path, args: &[&str], with_name: bool) {
    let theirs = run_ok(Command::new("zramctl").args(args).arg(kernel.path()), LIMIT).stdout;
    let ours = cli_ok(control, &[&["stat", "zram0"], args].concat());
    if !with_name {
        assert_eq!(ours, theirs, "{args:?}");
        return;
    }
    let rest = |out: &str, name: &str| -> Vec<String> {
        out.lines()
            .map(|l| {
                let cell = if l.starts_with("NAME") { "NAME" } else { name };
                assert!(l.starts_with(cell), "{l:?} {args:?}");
                // The name cell, its padding (aligned output) and the separator.
                let width = if args.contains(&"--raw") {
                    cell.len()
                } else {
                    name.len().max(4)
                };
                l[width + 1..].to_owned()
            })
            .collect()
    };
    assert_eq!(
        rest(&ours, "zram0"),
        rest(&theirs, &kernel.path()),
        "{args:?}\nours:\n{ours}zramctl:\n{theirs}"
    );
}

#[test]
fn prints_what_zramctl_prints() {
    const TEST: &str = "prints_what_zramctl_prints";
    if !have(TEST, "root") || !have(TEST, "zramctl") {
        return;
    }
    if !Path::new("/sys/class/zram-control/hot_add").exists() {
        eprintln!("SKIPPED {TEST}: no kernel zram (/sys/class/zram-control)");
        return;
    }
    // 64M: 1.6M stored, 1.2M compressed; 1536K (1.5M): 20K and 8K, narrower than the
    // headers.
    for (algorithm, disksize, data) in [
        (Algorithm::Lz4, "64M", pages(100, 300)),
        (Algorithm::LzoRle, "1536K", pages(3, 2)),
    ] {
        let kernel = KernelZram::add().expect("hot_add a kernel zram device");
        let offered = std::fs::read_to_string(kernel.attr("comp_algorithm")).unwrap();
        let name = algorithm.name();
        if !offered
            .split_whitespace()
            .any(|a| a.trim_matches(['[', ']']) == name)
        {
            eprintln!("SKIPPED {TEST} with {name}: the kernel's zram offers {offered:?}");
            continue;
        }
        std::fs::write(kernel.attr("comp_algorithm"), name).unwrap();
        std::fs::write(kernel.attr("disksize"), disksize).unwrap();
        {
            let mut dev = std::fs::OpenOptions::new()
                .write(true)
                .open(kernel.path())
                .unwrap();
            dev.write_all(&data).unwrap();
            dev.sync_all().unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let server = served_with(dir.path(), disksize, algorithm, &data);
        let control = server.control_path.clone();
        let columns = "NAME,DISKSIZE,DATA,COMPR,ALGORITHM";
        for args in [
            &["-o", columns, "-b", "-n"][..],
            &["-o", columns],
            &["-o", columns, "--raw"],
            &["-o", columns, "--raw", "-b"],
        ] {
            compare(&kernel, &control, args, true);
        }
        // Without NAME the lines are the same, byte for byte, also for the columns that
        // are empty or zero on both.
        let columns = "DISKSIZE,DATA,COMPR,ALGORITHM,ZERO-PAGES,MEM-LIMIT,STREAMS,MOUNTPOINT";
        for args in [
            &["-o", columns][..],
            &["-o", columns, "-b"],
            &["-o", columns, "--raw", "-n"],
        ] {
            compare(&kernel, &control, args, false);
        }
        server.stop();
    }
}
