//! `zramd classes --chain-size N` prints the kernel's class table with seed 000's rows.

use std::process::Command;

#[path = "common/pipe.rs"]
mod pipe;

/// `(class, size, pages_per_zspage)` rows seed 000 prints for an empty pool.
const CHAIN_4: &[(usize, usize, usize)] = &[
    (94, 1536, 3),
    (100, 1632, 2),
    (202, 3264, 4),
    (254, 4096, 1),
];
const CHAIN_8: &[(usize, usize, usize)] = &[
    (202, 3264, 4),
    (211, 3408, 5),
    (217, 3504, 6),
    (222, 3584, 7),
    (225, 3632, 8),
    (254, 4096, 1),
];
const CHAIN_16: &[(usize, usize, usize)] = &[
    (202, 3264, 4),
    (206, 3328, 13),
    (207, 3344, 9),
    (208, 3360, 14),
    (211, 3408, 5),
    (212, 3424, 16),
    (214, 3456, 11),
    (217, 3504, 6),
    (219, 3536, 13),
    (222, 3584, 7),
    (223, 3600, 15),
    (225, 3632, 8),
    (228, 3680, 9),
    (230, 3712, 10),
    (232, 3744, 11),
    (234, 3776, 12),
    (235, 3792, 13),
    (236, 3808, 14),
    (238, 3840, 15),
    (254, 4096, 1),
];

/// The header of kernel 6.3+'s class table (fullness per ten-percent bucket).
const HEADER: [&str; 18] = [
    "class",
    "size",
    "10%",
    "20%",
    "30%",
    "40%",
    "50%",
    "60%",
    "70%",
    "80%",
    "90%",
    "99%",
    "100%",
    "obj_allocated",
    "obj_used",
    "pages_used",
    "pages_per_zspage",
    "freeable",
];

/// Runs `zramd classes --geometry GEOMETRY --chain-size CHAIN` and returns its output.
fn table(geometry: &str, chain: usize) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_zramd"))
        .args([
            "classes",
            "--geometry",
            geometry,
            "--chain-size",
            &chain.to_string(),
        ])
        .output()
        .expect("run zramd");
    assert!(out.status.success(), "zramd classes failed: {out:?}");
    String::from_utf8(out.stdout).expect("utf-8")
}

/// Runs `zramd classes` with the seed's geometry and returns its class rows as
/// `(class, size, pages_per_zspage)`.
fn rows(chain: usize) -> Vec<(usize, usize, usize)> {
    let text = table("seed", chain);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(header, HEADER);
    lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() == HEADER.len() && f[0] != "Total")
        .map(|f| {
            let n = |i: usize| f[i].parse::<usize>().expect("number");
            (n(0), n(1), n(16))
        })
        .collect()
}

/// Both geometries print kernel 6.3+'s columns, every row as wide as the header, with the
/// kernel's field widths (the header's columns end where the rows' do).
#[test]
fn both_geometries_print_the_bucket_columns() {
    for geometry in ["seed", "min-waste"] {
        let text = table(geometry, 8);
        let mut lines = text.lines();
        let header = lines.next().expect("header");
        assert_eq!(
            header.split_whitespace().collect::<Vec<_>>(),
            HEADER,
            "{geometry}"
        );
        assert!(
            header.starts_with(" class  size       10%       20%"),
            "{header:?}"
        );
        let rows: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
        assert!(rows.len() > 2, "{geometry}: {text}");
        assert!(rows.last().unwrap().trim_start().starts_with("Total"));
        for row in rows {
            let fields: Vec<&str> = row.split_whitespace().collect();
            let want = if fields[0] == "Total" {
                HEADER.len() - 2
            } else {
                HEADER.len()
            };
            assert_eq!(fields.len(), want, "{geometry}: {row:?}");
            assert_eq!(row.len(), header.len(), "{geometry}: {row:?}");
        }
    }
}

#[test]
fn class_counts_match_the_seed() {
    assert_eq!(rows(4).len(), 69);
    assert_eq!(rows(8).len(), 123);
    assert_eq!(rows(16).len(), 191);
}

#[test]
fn every_published_row_appears() {
    for (chain, published) in [(4, CHAIN_4), (8, CHAIN_8), (16, CHAIN_16)] {
        let got = rows(chain);
        for row in published {
            assert!(got.contains(row), "chain {chain}: row {row:?} missing");
        }
    }
}

#[test]
fn last_normal_class_before_the_huge_one() {
    for (chain, last_normal) in [(4, 202), (8, 225), (16, 238)] {
        let got = rows(chain);
        let n = got.len();
        assert_eq!(got[n - 1].0, 254);
        assert_eq!(got[n - 2].0, last_normal, "chain {chain}");
    }
}

#[test]
fn chain_size_out_of_range_is_a_clear_error() {
    for bad in ["0", "17"] {
        let out = Command::new(env!("CARGO_BIN_EXE_zramd"))
            .args(["classes", "--chain-size", bad])
            .output()
            .expect("run zramd");
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("chain size"), "stderr: {err}");
    }
}

/// Printing into a pipe nobody reads (`zramd classes | head -1` once `head` is done) ends
/// the command as SIGPIPE ends other tools: no panic, no backtrace on stderr.
#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    pipe::ends_quietly_on_a_closed_pipe(Command::new(env!("CARGO_BIN_EXE_zramd")).arg("classes"));
}
