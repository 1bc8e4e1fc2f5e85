//! The attribute files on random step sequences (1,500 built from words, 300 of noise):
//! settings, triggers and passes with well-formed and hostile values, interleaved with page
//! writes, reads and discards that a model checks. The same entry point the fuzz target
//! (`fuzz/fuzz_targets/sysfs_write.rs`) drives, bounded so it runs in the normal test suite
//! without cargo-fuzz.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use zramd::sysfs::{ATTRS, Step, exercise_attributes};

/// Values written to any attribute: each attribute's own words, and what no attribute takes.
const WORDS: &[&str] = &[
    "",
    "\n",
    "0",
    "1",
    "2",
    "-1",
    "+1",
    " 1",
    "1 ",
    "01",
    "0x10",
    "0X",
    "010",
    "4K",
    "8K",
    "64K",
    "128K",
    "3K",
    "256K",
    "1M",
    "2M",
    "64M",
    "1G",
    "1T",
    "1E",
    "16E",
    "99E",
    "18446744073709551615",
    "18446744073709551616",
    "4294967296",
    "65535",
    "65536",
    "99999999999999999999999",
    "lz4",
    "zstd",
    "lzo",
    "lzo-rle",
    "deflate",
    "LZ4",
    "all",
    "idle",
    "huge",
    "huge_idle",
    "incompressible",
    "type=idle",
    "type=huge",
    "type=huge_idle",
    "type=incompressible",
    "type=",
    "page_index=0",
    "page_index=63",
    "page_index=64",
    "page_index=18446744073709551615",
    "page_indexes=0-63",
    "page_indexes=5-2",
    "page_indexes=0-18446744073709551615",
    "page_indexes=-",
    "algo=zstd",
    "algo=lz4",
    "algo=lzo",
    "algo=",
    "algo=zstd priority=1",
    "algo=lzo priority=2",
    "priority=0",
    "priority=1",
    "priority=3",
    "priority=4",
    "priority=-1",
    "level=5",
    "level=-7",
    "level=99999999999",
    "level=",
    "threshold=0",
    "threshold=1",
    "threshold=2048",
    "threshold=4096",
    "threshold=99999",
    "max_pages=0",
    "max_pages=1",
    "max_pages=-1",
    "on",
    "off",
    "run",
    "none",
    "interval=0",
    "interval=1",
    "recompress_age=0",
    "writeback_age=0",
    "writeback_watermark=1",
    "writeback_watermark=1G",
    "writeback_round=4K",
    "min_age=0",
    "recompress_priority=1",
    "enabled=maybe",
    "zsmalloc",
    "zbud",
    "afmalloc",
    "malloc",
    "/scratch",
    "relative",
    "=",
    "==",
    "a=b=c",
    "\u{ff}\u{fe}",
    "\t",
    "\0tail",
];

/// Each attribute's well-formed values (half the writes use one of these).
fn own_words(attr: &str) -> &'static [&'static str] {
    match attr {
        "disksize" => &["256K", "1M", "2M"],
        "reset" | "compact" | "fold" => &["1"],
        "mem_used_max" => &["0"],
        "mem_limit" => &["0", "64K", "1M", "64M"],
        "comp_algorithm" => &["lz4", "lz4hc", "zstd", "lzo", "lzo-rle"],
        "algorithm_params" => &["algo=zstd level=1", "priority=1 level=9", "algo=lz4"],
        "recomp_algorithm" => &["algo=zstd priority=1", "algo=lz4hc priority=2 level=1"],
        "unit_size" => &["4K", "8K", "16K"],
        "backing_dev" => &["/scratch", "none"],
        "idle" => &["all", "0", "1"],
        "writeback" => &[
            "idle",
            "huge",
            "huge_idle",
            "incompressible",
            "page_index=3",
        ],
        "writeback_limit_enable" => &["0", "1"],
        "writeback_limit" => &["0", "1", "100"],
        "writeback_batch_size" => &["1", "4", "32"],
        "recompress" => &[
            "type=idle",
            "type=huge",
            "type=huge_idle threshold=2048",
            "max_pages=2",
        ],
        "policy" => &[
            "on interval=1 recompress_age=0 writeback_age=0",
            "run",
            "off",
        ],
        "dedup" => &["0", "1"],
        "allocator" => &["zsmalloc", "zbud", "afmalloc", "malloc"],
        _ => &[],
    }
}

/// Writes `name` = `words` (and a newline) as a step.
fn set(out: &mut Vec<u8>, name: &str, words: &str) {
    Step::Set(name, format!("{words}\n").as_bytes()).encode(out);
}

/// Settings taken only before `disksize`, then `disksize`: most rounds start so, with a
/// random choice of them, so that the steps after have data and a set-up to act on.
fn prefix(rng: &mut SmallRng, out: &mut Vec<u8>) {
    for name in [
        "comp_algorithm",
        "recomp_algorithm",
        "backing_dev",
        "unit_size",
        "allocator",
        "dedup",
    ] {
        if rng.gen_bool(0.5) {
            let words = own_words(name);
            set(out, name, words[rng.gen_range(0..words.len())]);
        }
    }
    set(out, "disksize", ["256K", "1M"][rng.gen_range(0..2)]);
}

/// One random step.
fn step(rng: &mut SmallRng, out: &mut Vec<u8>, writable: &[&str]) {
    let page = rng.gen_range(0..64);
    match rng.gen_range(0..20) {
        0..=7 => {
            let name = writable[rng.gen_range(0..writable.len())];
            let own = own_words(name);
            let mut value = String::new();
            for i in 0..rng.gen_range(1..=3) {
                if i > 0 {
                    value.push(' ');
                }
                if i == 0 && !own.is_empty() && rng.gen_bool(0.5) {
                    value.push_str(own[rng.gen_range(0..own.len())]);
                    break;
                }
                value.push_str(WORDS[rng.gen_range(0..WORDS.len())]);
            }
            if rng.gen_bool(0.5) {
                value.push('\n');
            }
            if rng.gen_bool(0.02) {
                value = "x".repeat(255);
            }
            Step::Set(name, value.as_bytes()).encode(out);
        }
        8..=12 => Step::Write {
            page,
            fill: rng.gen_range(0..24),
        }
        .encode(out),
        13..=18 => Step::Read { page }.encode(out),
        _ => Step::Discard {
            page,
            pages: rng.gen_range(1..=4),
        }
        .encode(out),
    }
}

#[test]
fn attributes_survive_random_steps_and_keep_the_data() {
    let scratch = tempfile::NamedTempFile::new().unwrap();
    let writable: Vec<&str> = ATTRS
        .iter()
        .filter(|a| a.writable())
        .map(|a| a.name)
        .collect();
    let mut rng = SmallRng::seed_from_u64(0x7379_7366);
    let mut accepted = std::collections::BTreeSet::new();
    let (mut checked, mut backed, mut refused) = (0, 0, 0);
    for round in 0..1500 {
        let mut input = Vec::new();
        if round % 4 != 0 {
            prefix(&mut rng, &mut input);
        }
        for _ in 0..rng.gen_range(5..60) {
            step(&mut rng, &mut input, &writable);
        }
        let seen = exercise_attributes(&input, scratch.path());
        accepted.extend(seen.accepted);
        checked += seen.checked_reads;
        refused += seen.refused_writes;
        backed = backed.max(seen.max_backed_pages);
    }
    // The steps reached every writable attribute's own work, read data back and wrote
    // some to the backing file: the run above is not vacuous.
    let missed: Vec<&&str> = writable.iter().filter(|n| !accepted.contains(*n)).collect();
    assert!(missed.is_empty(), "no write was accepted by {missed:?}");
    println!("{checked} reads checked, {refused} writes refused under a memory limit");
    assert!(checked > 100_000, "only {checked} reads were checked");
    assert!(
        refused > 0,
        "no write was ever refused under a memory limit"
    );
    assert!(backed > 0, "no page was ever written back");
    // Pure noise too: the driver's own decoding of arbitrary bytes.
    for _ in 0..300 {
        let len = rng.gen_range(0..200);
        let input: Vec<u8> = (0..len).map(|_| rng.r#gen()).collect();
        exercise_attributes(&input, scratch.path());
    }
}

/// One sequence through the paths that move data (recompression, writeback, reading a
/// written-back page back), each shown to have happened, with its reads checked.
#[test]
fn recompressed_and_written_back_pages_read_back() {
    let scratch = tempfile::NamedTempFile::new().unwrap();
    let mut input = Vec::new();
    set(&mut input, "recomp_algorithm", "algo=zstd priority=1");
    set(&mut input, "backing_dev", "/scratch");
    set(&mut input, "disksize", "1M");
    // Page 5 text-like (compressible), page 6 noise (huge), page 7 same-filled.
    for (page, fill) in [(5, 2), (6, 3), (7, 1)] {
        Step::Write { page, fill }.encode(&mut input);
    }
    set(&mut input, "idle", "all");
    set(&mut input, "recompress", "type=idle");
    set(&mut input, "idle", "all");
    set(&mut input, "writeback", "idle");
    for page in [5, 6, 7] {
        Step::Read { page }.encode(&mut input);
    }
    let seen = exercise_attributes(&input, scratch.path());
    for name in [
        "recomp_algorithm",
        "backing_dev",
        "disksize",
        "idle",
        "recompress",
        "writeback",
    ] {
        assert!(seen.accepted.contains(name), "{name} was refused: {seen:?}");
    }
    // Every page checked after each of the 7 accepted writes (64 each, from `disksize` on:
    // 5 times), at the three read steps and at the end.
    assert_eq!(seen.checked_reads, 5 * 64 + 3 + 64, "{seen:?}");
    assert!(seen.recompressed, "no slot was recompressed: {seen:?}");
    assert!(seen.max_backed_pages >= 2, "{seen:?}");
}
