//! Folding and inline deduplication on a device (seed 004 and beyond): identical pages
//! share one stored object, with `dedup` at write time or after a `fold`; every slot still
//! reads its own bytes through overwrites, discards and compaction; same-filled pages keep
//! their own path; huge pages and pages of larger units share too; sharing takes no memory
//! under `mem_limit`; `pages_folded` (mm_stat field 10) counts what folding gave back.

#[path = "common/mod.rs"]
mod common;
#[path = "common/text.rs"]
mod text;

use common::random;
use text::text_page;
use zram::slot::Flags;
use zram::{Algorithm, PAGE_SIZE, PoolConfig, Size, Zram, ZramConfig};

const P: u64 = PAGE_SIZE as u64;
const WORDS: [&str; 6] = [
    "fold ", "shared ", "object ", "handle ", "zspage ", "page\n",
];

fn device(pages: usize, dedup: bool, unit: usize, mem_limit: u64) -> Zram {
    Zram::new(ZramConfig {
        disksize: (pages * PAGE_SIZE) as u64,
        algorithm: Algorithm::Lz4,
        unit_size: Size(unit as u64),
        mem_limit: Size(mem_limit),
        dedup,
        pool: PoolConfig {
            chain_size: 4,
            ..PoolConfig::default()
        },
        auto_compact: None,
        ..ZramConfig::default()
    })
    .expect("device")
}

/// Writes `distinct` text pages `copies` times each: page `i` of copy `c` at page
/// `c * distinct + i`. Returns the image.
fn write_copies(zram: &Zram, distinct: usize, copies: usize) -> Vec<u8> {
    let mut image = Vec::new();
    for _ in 0..copies {
        for i in 0..distinct {
            image.extend_from_slice(&text_page(i, &WORDS));
        }
    }
    zram.write(0, &image).expect("write");
    image
}

fn read_all(zram: &Zram, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    zram.read(0, &mut buf).expect("read");
    buf
}

fn objects(zram: &Zram) -> u64 {
    zram.pool().objects() as u64
}

#[test]
fn dedup_stores_identical_pages_once_and_each_slot_keeps_its_bytes() {
    let (distinct, copies) = (16, 4);
    let zram = device(distinct * copies, true, PAGE_SIZE, 0);
    let plain = device(distinct * copies, false, PAGE_SIZE, 0);
    let mut image = write_copies(&zram, distinct, copies);
    write_copies(&plain, distinct, copies);
    assert!(zram.dedup() && !plain.dedup());
    assert_eq!(read_all(&zram, image.len()), image);
    assert_eq!(objects(&zram), distinct as u64);
    assert_eq!(objects(&plain), (distinct * copies) as u64);
    let stats = zram.fold_stats();
    assert_eq!(stats.dedup_pages, (distinct * (copies - 1)) as u64);
    let dup_bytes: u64 = (distinct..distinct * copies)
        .map(|i| zram.slot(i).unwrap().len as u64)
        .sum();
    assert_eq!(stats.dedup_bytes, dup_bytes);
    assert_eq!(stats.shared_objects, distinct as u64);
    assert!(stats.index_bytes > 0);
    // compr_data_size counts every slot's stream, as the kernel does; memory holds one.
    assert_eq!(
        zram.mm_stat().compr_data_size,
        plain.mm_stat().compr_data_size
    );
    assert!(zram.mm_stat().mem_used_total < plain.mm_stat().mem_used_total);
    zram.pool().check_invariants().unwrap();

    // Overwrite one copy of page 3, discard another, compact: the rest still read right.
    let other = random(PAGE_SIZE, 99);
    zram.write(3 * P, &other).expect("overwrite");
    image[3 * PAGE_SIZE..4 * PAGE_SIZE].copy_from_slice(&other);
    let d = distinct + 3;
    zram.discard((d * PAGE_SIZE) as u64, P).expect("discard");
    image[d * PAGE_SIZE..(d + 1) * PAGE_SIZE].fill(0);
    zram.compact();
    assert_eq!(read_all(&zram, image.len()), image);
    zram.pool().check_invariants().unwrap();

    // Free everything: the shared objects go with their last slot.
    zram.discard(0, image.len() as u64).expect("discard all");
    assert_eq!(objects(&zram), 0);
    assert_eq!(zram.mm_stat().mem_used_total, 0);
    assert_eq!(zram.fold_stats().shared_objects, 0);
    zram.pool().check_invariants().unwrap();
}

#[test]
fn fold_frees_the_copies_and_counts_pages_folded() {
    let (distinct, copies) = (64, 3);
    let zram = device(distinct * copies, false, PAGE_SIZE, 0);
    let image = write_copies(&zram, distinct, copies);
    let before = zram.mm_stat();
    assert_eq!(before.pages_folded, 0);
    assert_eq!(objects(&zram), (distinct * copies) as u64);
    let report = zram.fold().unwrap();
    assert_eq!(report.objects_folded, (distinct * (copies - 1)) as u64);
    assert!(report.objects_scanned >= (distinct * copies) as u64);
    assert!(report.pages_freed > 0, "{report:?}");
    let after = zram.mm_stat();
    assert_eq!(after.pages_folded, report.pages_freed);
    assert_eq!(after.fields()[9], report.pages_freed);
    assert!(after.mem_used_total < before.mem_used_total);
    assert_eq!(
        before.mem_used_total - after.mem_used_total,
        report.pages_freed * P
    );
    assert_eq!(objects(&zram), distinct as u64);
    assert_eq!(read_all(&zram, image.len()), image);
    let stats = zram.fold_stats();
    assert_eq!(
        (stats.folds, stats.objects_folded),
        (1, report.objects_folded)
    );
    assert_eq!(stats.pages_folded, report.pages_freed);
    // A second pass finds nothing new.
    assert_eq!(zram.fold().unwrap().objects_folded, 0);
    zram.pool().check_invariants().unwrap();
    // Clearing the device starts the count again, as for pages_compacted.
    zram.clear();
    assert_eq!(zram.mm_stat().pages_folded, 0);
    assert_eq!(zram.fold_stats().folds, 0);
}

#[test]
fn same_filled_pages_keep_their_own_path() {
    let zram = device(8, true, PAGE_SIZE, 0);
    zram.write(0, &vec![0u8; 4 * PAGE_SIZE]).unwrap();
    let word: Vec<u8> = (0..4 * PAGE_SIZE).map(|i| [7u8, 1, 2, 3][i % 4]).collect();
    zram.write(4 * P, &word).unwrap();
    for i in 0..8 {
        assert!(
            zram.slot(i).unwrap().flags.contains(Flags::SAME),
            "slot {i}"
        );
    }
    assert_eq!(zram.fold_stats().dedup_pages, 0);
    assert_eq!(objects(&zram), 0);
    assert_eq!(zram.mm_stat().same_pages, 8);
}

#[test]
fn huge_pages_are_shared_too() {
    let zram = device(6, true, PAGE_SIZE, 0);
    let page = random(PAGE_SIZE, 5);
    for i in 0..6 {
        zram.write(i * P, &page).unwrap();
    }
    for i in 0..6 {
        assert!(zram.slot(i as usize).unwrap().flags.contains(Flags::HUGE));
    }
    assert_eq!(objects(&zram), 1);
    assert_eq!(zram.mm_stat().huge_pages, 6);
    assert_eq!(zram.fold_stats().dedup_pages, 5);
    assert_eq!(read_all(&zram, 6 * PAGE_SIZE), page.repeat(6));
    zram.pool().check_invariants().unwrap();
}

#[test]
fn sharing_takes_no_memory_under_mem_limit() {
    // Enough for the first copies; every later write of the same bytes shares them.
    let zram = device(64, true, PAGE_SIZE, 16 * P);
    let image = write_copies(&zram, 8, 8);
    assert_eq!(read_all(&zram, image.len()), image);
    assert_eq!(objects(&zram), 8);
    assert!(zram.mm_stat().mem_used_total <= 16 * P);
}

#[test]
fn larger_units_dedupe_one_object_streams_and_fold_the_rest() {
    let unit = 16 * 1024;
    let units = 8;
    let zram = device(units * unit / PAGE_SIZE, true, unit, 0);
    // A unit of one text page repeated compresses into one object: written twice, stored
    // once.
    let text = text_page(1, &WORDS).repeat(unit / PAGE_SIZE);
    // Incompressible units are raw chains of four pieces: not deduplicated on write.
    let noise = random(unit, 3);
    let image = [&text[..], &text, &noise, &noise].concat();
    zram.write(0, &image).unwrap();
    assert_eq!(zram.fold_stats().dedup_pages, (unit / PAGE_SIZE) as u64);
    let chain = zram::links(unit) as u64 + 1;
    assert_eq!(objects(&zram), 1 + 2 * chain);
    // Folding folds what is identical piece by piece: the last pieces of the two chains.
    let report = zram.fold().unwrap();
    assert_eq!(report.objects_folded, 1);
    assert_eq!(objects(&zram), 2 * chain);
    assert_eq!(read_all(&zram, image.len()), image);
    zram.pool().check_invariants().unwrap();
    zram.discard(2 * unit as u64, unit as u64).unwrap();
    assert_eq!(read_all(&zram, image.len())[3 * unit..], noise[..]);
    zram.discard(0, (4 * unit) as u64).unwrap();
    assert_eq!(objects(&zram), 0);
    zram.pool().check_invariants().unwrap();
}
