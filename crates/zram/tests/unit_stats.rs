//! Compression units larger than a page: the stats they report, the memory they give back,
//! `mem_limit`, metadata, and the `unit_size` values that are refused.

mod common;

use common::random;
use zram::links;
use zram::slot::{Flags, SlotEntry};
use zram::{Algorithm, BlockState, Error, PAGE_SIZE, PoolConfig, Size, Zram, ZramConfig};

const K: usize = 1024;

fn device(algorithm: Algorithm, unit_size: usize, disksize: usize) -> Zram {
    Zram::new(ZramConfig {
        disksize: disksize as u64,
        algorithm,
        unit_size: Size(unit_size as u64),
        pool: PoolConfig {
            shards: 1,
            ..PoolConfig::default()
        },
        auto_compact: None,
        ..ZramConfig::default()
    })
    .expect("device")
}

/// The `.rs` files under `dir`, recursively, in a fixed order.
fn rust_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .expect("read dir")
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Real text: this crate's own sources and tests, repeated to `len` bytes.
fn source_text(len: usize) -> Vec<u8> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    rust_files(&root.join("tests"), &mut files);
    let mut text = Vec::new();
    for f in files {
        text.extend(std::fs::read(f).expect("read source"));
    }
    assert!(text.len() > 128 * K, "{} bytes of source", text.len());
    text.iter().copied().cycle().take(len).collect()
}

fn objects(zram: &Zram) -> usize {
    zram.pool().objects()
}

#[test]
fn same_filled_units_cost_no_object() {
    let unit = 32 * K;
    let zram = device(Algorithm::Zstd, unit, 4 * unit);
    let word = 0x0123_4567_89AB_CDEFu64;
    zram.write(unit as u64, &word.to_ne_bytes().repeat(unit / 8))
        .unwrap();
    zram.write(0, &vec![0u8; unit]).unwrap();
    let m = zram.mm_stat();
    assert_eq!(m.same_pages, 2 * (unit / PAGE_SIZE) as u64, "{m:?}");
    assert_eq!(m.orig_data_size, 2 * unit as u64, "{m:?}");
    assert_eq!((m.compr_data_size, m.mem_used_total), (0, 0), "{m:?}");
    let e = zram.slot(1).unwrap();
    assert!(e.flags.contains(Flags::SAME));
    assert_eq!(e.handle, word);
    // A read of part of it, at an odd offset, sees the word's bytes in place.
    let mut buf = vec![0u8; 13];
    zram.read(unit as u64 + 3, &mut buf).unwrap();
    let b = word.to_ne_bytes();
    assert_eq!(buf, (3..16).map(|i| b[i % 8]).collect::<Vec<_>>());
    // Changing one byte makes it an ordinary compressed unit.
    zram.write(unit as u64 + 100, &[0xFF]).unwrap();
    let m = zram.mm_stat();
    assert_eq!(m.same_pages, (unit / PAGE_SIZE) as u64, "{m:?}");
    assert!(m.compr_data_size > 0 && m.mem_used_total > 0, "{m:?}");
}

#[test]
fn incompressible_units_are_stored_raw_and_freeing_gives_memory_back() {
    for algorithm in [Algorithm::Lz4, Algorithm::Zstd] {
        for unit in [8 * K, 32 * K, 128 * K] {
            let zram = device(algorithm, unit, 2 * unit);
            let data = random(2 * unit, 42);
            zram.write(0, &data).unwrap();
            let m = zram.mm_stat();
            let pages = (2 * unit / PAGE_SIZE) as u64;
            assert_eq!(m.huge_pages, pages, "{algorithm} {unit}: {m:?}");
            assert_eq!(m.huge_pages_since, pages, "{algorithm} {unit}: {m:?}");
            assert_eq!(m.compr_data_size, 2 * unit as u64, "{m:?}");
            assert_eq!(m.orig_data_size, 2 * unit as u64, "{m:?}");
            let e = zram.slot(0).unwrap();
            assert!(e.flags.contains(Flags::HUGE), "{e:?}");
            assert_eq!(e.len, unit);
            assert_eq!(objects(&zram), 2 * (links(unit) + 1));
            // A raw unit costs its pages plus one small tail object: here, in an empty
            // pool, at most one zspage for the two tails.
            let zspage = (zram.chain_size() * PAGE_SIZE) as u64;
            assert!(m.mem_used_total >= 2 * unit as u64, "{m:?}");
            assert!(m.mem_used_total <= 2 * unit as u64 + zspage, "{m:?}");
            let mut back = vec![0u8; 2 * unit];
            zram.read(0, &mut back).unwrap();
            assert!(back == data, "{algorithm} {unit}: read back");

            zram.discard(0, unit as u64).unwrap();
            let after = zram.mm_stat();
            assert!(after.mem_used_total < m.mem_used_total, "{after:?}");
            assert_eq!(after.huge_pages, pages / 2, "{after:?}");
            assert_eq!(after.huge_pages_since, pages, "{after:?}");
            assert_eq!(zram.slot(0), Some(SlotEntry::default()));
            assert_eq!(objects(&zram), links(unit) + 1);
            zram.write_zeroes(unit as u64, unit as u64).unwrap();
            let empty = zram.mm_stat();
            assert_eq!(
                (empty.mem_used_total, empty.orig_data_size),
                (0, 0),
                "{empty:?}"
            );
            assert_eq!(objects(&zram), 0);
            assert_eq!(
                zram.io_stat().notify_free,
                pages,
                "whole units count their pages"
            );
            zram.pool().check_invariants().unwrap();
        }
    }
}

#[test]
fn text_compresses_smaller_in_larger_units() {
    let len = 512 * K;
    let text = source_text(len);
    for algorithm in [Algorithm::Lz4, Algorithm::Zstd] {
        let mut sizes = Vec::new();
        for unit in [4 * K, 32 * K, 128 * K] {
            let zram = device(algorithm, unit, len);
            zram.write(0, &text).unwrap();
            let mut back = vec![0u8; len];
            zram.read(0, &mut back).unwrap();
            assert!(back == text, "{algorithm} {unit}");
            let m = zram.mm_stat();
            assert_eq!(m.orig_data_size, len as u64);
            assert_eq!(m.huge_pages, 0, "{algorithm} {unit}: {m:?}");
            sizes.push((unit, m.compr_data_size, m.mem_used_total));
        }
        // The whole point: a longer window finds more, in the stream and in the pool. The
        // pool is compared end to end only: on 512 KiB, a few pages of packing (the last
        // zspage of a class, a chain's tail) can put 32 KiB units a page or two above 4 KiB
        // ones, depending on the text (this crate's own sources).
        for w in sizes.windows(2) {
            assert!(w[1].1 < w[0].1, "{algorithm}: {sizes:?}");
        }
        assert!(sizes[2].2 < sizes[0].2, "{algorithm}: {sizes:?}");
    }
}

#[test]
fn long_streams_take_a_chain_and_are_freed_whole() {
    // Half random, half zero: the stream is about half a unit, several pieces long.
    let unit = 64 * K;
    let mut data = random(unit / 2, 7);
    data.resize(unit, 0);
    for algorithm in [Algorithm::Lz4, Algorithm::Zstd, Algorithm::LzoRle] {
        let zram = device(algorithm, unit, 2 * unit);
        zram.write(unit as u64, &data).unwrap();
        let e = zram.slot(1).unwrap();
        assert!(!e.flags.contains(Flags::HUGE), "{algorithm}: {e:?}");
        assert!(e.len > 4 * PAGE_SIZE && e.len < unit, "{algorithm}: {e:?}");
        assert_eq!(objects(&zram), links(e.len) + 1, "{algorithm}");
        assert_eq!(zram.mm_stat().compr_data_size, e.len as u64);
        // Rewriting one byte replaces the whole chain: no object leaks.
        zram.write(unit as u64 + 5, &[1]).unwrap();
        let e2 = zram.slot(1).unwrap();
        assert_eq!(objects(&zram), links(e2.len) + 1, "{algorithm}");
        let mut back = vec![0u8; unit];
        zram.read(unit as u64, &mut back).unwrap();
        data[5] = 1;
        assert!(back == data, "{algorithm}");
        data[5] = random(unit / 2, 7)[5];
        zram.clear();
        assert_eq!(objects(&zram), 0);
        assert_eq!(zram.mm_stat().mem_used_total, 0);
    }
}

#[test]
fn part_of_a_unit_discarded_or_zeroed_reads_as_zero_and_an_all_zero_unit_is_freed() {
    let unit = 16 * K;
    let zram = device(Algorithm::Zstd, unit, 2 * unit);
    let data = source_text(unit);
    zram.write(0, &data).unwrap();
    // Discard frees whole pages only: bytes 1.. of page 0 and pages 1 and 2.
    zram.discard(1, 3 * PAGE_SIZE as u64).unwrap();
    let mut back = vec![0u8; unit];
    zram.read(0, &mut back).unwrap();
    let mut want = data.clone();
    want[PAGE_SIZE..3 * PAGE_SIZE].fill(0);
    assert!(back == want);
    assert_eq!(zram.io_stat().notify_free, 0, "the unit held on");
    // Zeroing the rest frees the unit.
    zram.write_zeroes(0, PAGE_SIZE as u64).unwrap();
    zram.write_zeroes(3 * PAGE_SIZE as u64, PAGE_SIZE as u64)
        .unwrap();
    assert_eq!(zram.slot(0), Some(SlotEntry::default()));
    let m = zram.mm_stat();
    assert_eq!((m.orig_data_size, m.mem_used_total), (0, 0), "{m:?}");
    assert_eq!(zram.io_stat().notify_free, (unit / PAGE_SIZE) as u64);
}

#[test]
fn a_short_last_unit_counts_its_own_pages() {
    let unit = 32 * K;
    let disksize = unit + 3 * PAGE_SIZE;
    let zram = device(Algorithm::Lz4, unit, disksize);
    assert_eq!(zram.disksize(), disksize as u64);
    assert_eq!(zram.slot(2), None);
    zram.write(unit as u64, &random(3 * PAGE_SIZE, 5)).unwrap();
    let m = zram.mm_stat();
    assert_eq!(
        (m.orig_data_size, m.huge_pages),
        (3 * PAGE_SIZE as u64, 3),
        "{m:?}"
    );
    assert_eq!(zram.slot(1).unwrap().len, 3 * PAGE_SIZE);
    // Asking by offset finds the unit holding it (what a per-page caller needs).
    assert_eq!(zram.block_state(unit as u64 + 5000), Some(BlockState::Data));
    assert_eq!(zram.block_state(5000), Some(BlockState::Hole));
    assert_eq!(zram.block_state(disksize as u64), None);
    zram.write(unit as u64 + 7, &[9; 5]).unwrap();
    zram.discard(unit as u64, 3 * PAGE_SIZE as u64).unwrap();
    assert_eq!(zram.mm_stat().orig_data_size, 0);
    assert_eq!(zram.io_stat().notify_free, 3);
}

#[test]
fn mem_limit_keeps_the_old_unit() {
    let unit = 32 * K;
    let zram = device(Algorithm::Zstd, unit, 4 * unit);
    let old = source_text(unit);
    zram.write(0, &old).unwrap();
    let before = zram.mm_stat();
    zram.set_mem_limit(before.mem_used_total + PAGE_SIZE as u64);
    // An incompressible unit needs eight more pages: refused, the old data stays.
    let r = zram.write(0, &random(unit, 3));
    assert!(matches!(r, Err(Error::MemLimit { .. })), "{r:?}");
    let r = zram.write(100, &random(unit - 200, 4));
    assert!(matches!(r, Err(Error::MemLimit { .. })), "partial: {r:?}");
    let mut back = vec![0u8; unit];
    zram.read(0, &mut back).unwrap();
    assert!(back == old);
    let after = zram.mm_stat();
    assert_eq!(after.mem_used_total, before.mem_used_total, "{after:?}");
    assert_eq!(after.compr_data_size, before.compr_data_size);
    assert_eq!(zram.io_stat().failed_writes, 2);
    zram.pool().check_invariants().unwrap();
    // Same-filled units need no memory and still go in.
    zram.write(unit as u64, &vec![7u8; unit]).unwrap();
    zram.set_mem_limit(0);
    zram.write(0, &random(unit, 3)).unwrap();
}

#[test]
fn metadata_is_one_slot_per_unit() {
    let disksize = 64 << 20;
    let pages = device(Algorithm::Lz4, PAGE_SIZE, disksize).table_bytes();
    let units = device(Algorithm::Lz4, 32 * K, disksize).table_bytes();
    let slots = disksize / PAGE_SIZE;
    // 16 bytes a slot, plus the striped locks.
    assert!(
        pages >= 16 * slots && pages < 16 * slots + 64 * K,
        "{pages}"
    );
    assert!(units >= 2 * slots && units < 2 * slots + 64 * K, "{units}");
    let zram = device(Algorithm::Lz4, 32 * K, disksize);
    assert!(zram.mm_stat().metadata_bytes >= zram.table_bytes() as u64);
}

#[test]
fn bad_unit_sizes_are_refused() {
    let cfg = |unit_size: usize, disksize| ZramConfig {
        disksize,
        unit_size: Size(unit_size as u64),
        auto_compact: None,
        ..ZramConfig::default()
    };
    for (unit, why) in [
        (12 * K, "power of two"),
        (2 * K, "power of two from 4096"),
        (0, "power of two"),
        (256 * K, "to 131072"),
    ] {
        match Zram::new(cfg(unit, 1 << 20)) {
            Err(e @ Error::InvalidUnitSize(u)) if u == unit as u64 => {
                assert_eq!(e.errno(), libc::EINVAL);
                assert!(e.to_string().contains(why), "{unit}: {e}");
            }
            other => panic!("unit_size {unit}: {other:?}"),
        }
    }
    match Zram::new(cfg(64 * K, 32 * K as u64)) {
        Err(e @ Error::UnitLargerThanDevice { .. }) => {
            assert!(e.to_string().contains("larger than the device"), "{e}")
        }
        other => panic!("unit larger than the device: {other:?}"),
    }
    // The largest unit equal to the device is fine, as is the default.
    let z = Zram::new(cfg(128 * K, 128 * K as u64)).unwrap();
    assert_eq!(z.unit_size(), 128 * K);
    assert_eq!(ZramConfig::default().unit_size, Size(PAGE_SIZE as u64));
}
